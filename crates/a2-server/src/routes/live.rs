//! Live feeds as Server-Sent Events: a session's events (ST1) and a
//! presence namespace's patches (P4).
//!
//! Each SSE event of a session feed carries the event's index as its `id`,
//! so a browser's `EventSource` that reconnects sends `Last-Event-ID` and
//! resumes after the last event it saw, with no gap and no repeat. A feed
//! that fails (the store went away, the session was cleared, its next
//! events were trimmed) sends one `error` event with the JSON error body
//! and ends. A feed of a closed session sends an `end` event after its last
//! event (CL4), so a browser knows the log is complete and stops
//! reconnecting. Every feed ends when the server shuts down.

use std::convert::Infallible;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt, future};
use metrics::Gauge;

use crate::auth::{CanRead, CanWork};
use crate::error::{ApiError, ApiResult, Path, Query};
use crate::metrics::StreamGuard;
use crate::model::*;
use crate::state::AppState;

/// An SSE comment this often keeps proxies from closing an idle feed.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The `error` event that ends a feed.
fn error_event(error: a2_core::Error) -> SseEvent {
    json_event("error", &ApiError::from(error).body())
}

fn json_event<T: serde::Serialize>(kind: &'static str, value: &T) -> SseEvent {
    // Our own types always serialize: their maps have string keys.
    SseEvent::default()
        .event(kind)
        .data(serde_json::to_string(value).unwrap_or_default())
}

/// Ends `stream` at the first error (sent as an `error` event) or when the
/// server shuts down, and counts it in `gauge` as long as it lasts.
fn finish<S, T>(
    state: &AppState,
    gauge: &Gauge,
    stream: S,
    to_event: impl Fn(T) -> SseEvent + Send + 'static,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static
where
    S: Stream<Item = a2_core::Result<T>> + Send + 'static,
{
    let guard = StreamGuard::new(gauge);
    stream
        .scan(false, move |ended, item| {
            if *ended {
                return future::ready(None);
            }
            future::ready(Some(match item {
                Ok(value) => to_event(value),
                Err(error) => {
                    *ended = true;
                    error_event(error)
                }
            }))
        })
        .take_until(state.config.shutdown.clone().cancelled_owned())
        .map(move |event| {
            let _alive = &guard;
            Ok(event)
        })
}

/// The response of a feed, with a comment every [`KEEP_ALIVE`].
fn respond(events: impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static) -> Response {
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// Follows a session live (ST1): every event after `after_index` (or
/// `Last-Event-ID`), then each event appended later, as `event` messages
/// whose `id` is the index and whose data is the event as JSON.
#[utoipa::path(
    get,
    path = "/v1/sessions/{session}/live",
    params(("session" = String, Path, description = "The session id"), LiveQuery),
    security(("bearer" = ["read"])),
    responses((status = 200, description = "Server-Sent Events: `event` messages (data: an EventBody); an `end` message once the last event of a closed session was sent (CL4); an `error` message if the feed fails", content_type = "text/event-stream", body = String))
)]
pub(crate) async fn session(
    CanRead(state): CanRead,
    Path(session): Path<String>,
    Query(query): Query<LiveQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    a2_core::validate::session_id(&session)?;
    let after = match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| ApiError::invalid("Last-Event-ID must be an event index"))?,
        None => query.after_index.unwrap_or(0),
    };
    // `None` after the last item: the feed ended cleanly (CL4). A feed that
    // failed never gets there: `finish` stops at its error.
    let events = state
        .store
        .stream(&session, after)
        .map(|item| item.map(Some))
        .chain(futures::stream::once(future::ready(Ok(None))));
    let stream = finish(
        &state,
        &state.metrics.session_streams,
        events,
        |event: Option<a2_core::Event>| match event {
            Some(event) => {
                let id = event.index.to_string();
                json_event("event", &EventBody::from(event)).id(id)
            }
            None => SseEvent::default().event("end").data("{}"),
        },
    );
    Ok(respond(stream))
}

/// Follows a presence namespace live (P4): first a `snapshot` message with
/// the live entries, then a `patch` message for each applied write.
#[utoipa::path(
    get,
    path = "/v1/presence/{ns}/live",
    params(("ns" = String, Path, description = "The namespace")),
    security(("bearer" = ["read"])),
    responses((status = 200, description = "Server-Sent Events: one `snapshot` message (data: a PresenceResponse), then `patch` messages (data: a PresencePatchBody)", content_type = "text/event-stream", body = String))
)]
pub(crate) async fn presence(
    CanRead(state): CanRead,
    Path(ns): Path<String>,
) -> ApiResult<Response> {
    // Subscribe first, then read: a write between the two shows in both,
    // and applying a patch twice is harmless; the other order could miss it.
    let patches = state.store.presence_subscribe(&ns).await?;
    let entries = state.store.presence_read(&ns).await?;
    let snapshot = json_event("snapshot", &PresenceResponse::from(entries));
    let patches = finish(
        &state,
        &state.metrics.presence_streams,
        patches,
        |patch: a2_core::PresencePatch| json_event("patch", &PresencePatchBody::from(patch)),
    );
    let stream = futures::stream::once(future::ready(Ok(snapshot))).chain(patches);
    Ok(respond(stream))
}

/// Cancels of leased attempts, made by any process sharing the store (CN5):
/// a remote worker follows this to stop a handler at once instead of at
/// its next renewal (which lists the attempt as superseded, RN1). Each
/// message is `cancel` with a CancellationBody. A store that cannot push
/// (Redis over REST when polling) sends none.
#[utoipa::path(
    get,
    path = "/v1/work/cancellations",
    security(("bearer" = ["work"])),
    responses((status = 200, description = "Server-Sent Events: `cancel` messages (data: a CancellationBody)", content_type = "text/event-stream", body = String))
)]
pub(crate) async fn cancellations(CanWork(state): CanWork) -> ApiResult<Response> {
    // Live before the response starts (CN5): a worker that saw the stream
    // open misses no cancel made afterwards.
    let cancels = state.store.cancellations().await?;
    let stream = finish(
        &state,
        &state.metrics.presence_streams,
        cancels,
        |cancel: a2_core::Cancellation| json_event("cancel", &CancellationBody::from(cancel)),
    );
    Ok(respond(stream))
}
