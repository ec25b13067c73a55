//! Session logs over the Durable Streams protocol, JSON mode, at
//! `/v1/stream/{session}`: catch-up reads from an offset, long-poll and SSE
//! live reads, resumption from a saved offset, and the protocol's headers
//! (`Stream-Next-Offset`, `Stream-Up-To-Date`, `Stream-Cursor`, `ETag`).
//!
//! Mapping: a stream is a session; a message is an event's payload; an
//! offset is the index of the last event read, as 20 zero-padded digits (so
//! offsets sort as strings, as the protocol requires), with `-1` for the
//! start and `now` for the tail. A `POST` appends each message as a settled
//! event of type `message` (processed at append: a stream write is output,
//! not work for handlers). A `PUT` creates a stream by appending one settled
//! `a2.stream.created` event with a fixed id, so creating twice is a replay
//! (A5) and an empty stream exists; the protocol's view skips that event.
//! Only `application/json` streams exist: a session is a JSON event log.

use std::convert::Infallible;
use std::time::Duration;

use a2_core::{NewEvent, ReadEventsOptions, StoredEvent};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::Value;

use crate::auth::{CanAdmin, CanAppend, CanRead};
use crate::error::{ApiError, ApiResult, Body as Bytes, Path, Query};
use crate::metrics::StreamGuard;
use crate::routes::sessions::check_batch;
use crate::state::AppState;

/// The event type of the creation marker.
pub(crate) const CREATED: &str = "a2.stream.created";
/// The event type of messages appended through the protocol.
pub(crate) const MESSAGE: &str = "message";
/// Messages in one catch-up response at most.
const CHUNK: usize = 1_000;
/// How long a long-poll waits for new data before answering 204.
const LONG_POLL: Duration = Duration::from_secs(10);
/// How long an SSE response lives before the server closes it; the client
/// reconnects from its last offset (the protocol asks for about a minute,
/// so caches can collapse reconnections).
const SSE_LIFETIME: Duration = Duration::from_secs(60);
/// Width of a cursor interval, in seconds.
const CURSOR_INTERVAL_S: i64 = 20;

const NEXT_OFFSET: &str = "stream-next-offset";
const UP_TO_DATE: &str = "stream-up-to-date";
const CURSOR: &str = "stream-cursor";

/// An offset as the protocol sees it.
fn offset(index: u64) -> String {
    format!("{index:020}")
}

/// The index after which a read starts, from the `offset` parameter.
fn parse_offset(text: Option<&str>, frontier: u64) -> Result<u64, ApiError> {
    match text {
        None | Some("-1") => Ok(0),
        Some("now") => Ok(frontier),
        Some(t) if t.len() == 20 && t.bytes().all(|b| b.is_ascii_digit()) => t
            .parse::<u64>()
            .map_err(|_| ApiError::invalid(format!("malformed offset {t:?}"))),
        Some(t) => Err(ApiError::invalid(format!("malformed offset {t:?}"))),
    }
}

/// Whether a content type is JSON (`application/json`, any case, any
/// parameters).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

fn not_found(session: &str) -> ApiError {
    ApiError::not_found(format!("no stream {session:?}"))
}

/// The cursor of a response: the current interval, moved past the one the
/// client echoed so a CDN never collapses a request into its own response.
fn cursor(state: &AppState, echoed: Option<&str>) -> String {
    let now = state.store.clock().now_ms() / 1000 / CURSOR_INTERVAL_S;
    let echoed = echoed.and_then(|c| c.parse::<i64>().ok());
    match echoed {
        Some(c) if c >= now => (c + 1).to_string(),
        _ => now.to_string(),
    }
}

/// The session's frontier, or `None` when the stream does not exist.
async fn frontier(state: &AppState, session: &str) -> Result<Option<u64>, ApiError> {
    a2_core::validate::session_id(session)?;
    let page = state
        .store
        .read_history(session, a2_core::HistoryOptions::new(1))
        .await?;
    Ok(page.events.last().map(|e| e.event.index))
}

fn header_value(text: &str) -> HeaderValue {
    // Offsets and cursors are digits; a session id is never put in a header.
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn messages(events: &[StoredEvent]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e.event.event_type != CREATED)
        .map(|e| &e.event.payload)
        .collect()
}

/// The query of a read.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ReadQuery {
    offset: Option<String>,
    live: Option<String>,
    cursor: Option<String>,
}

/// `PUT`: creates the stream (201), or finds it already there (200). An
/// optional body holds the first messages.
pub(crate) async fn create(
    _: CanAppend,
    State(state): State<AppState>,
    Path(session): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    // Without a Content-Type the stream takes the default, which here is
    // the only one: JSON.
    if headers.contains_key(header::CONTENT_TYPE) && !is_json(&headers) {
        return Err(unsupported());
    }
    let initial = parse_messages(&body, true)?;
    check_batch(&state, initial.len() + 1)?;
    let existed = frontier(&state, &session).await?.is_some();
    if existed && initial.is_empty() {
        let tail = frontier(&state, &session).await?.unwrap_or(0);
        return Ok(with_offset(StatusCode::OK, tail));
    }
    let mut batch = Vec::with_capacity(initial.len() + 1);
    if !existed {
        batch.push(NewEvent::new(CREATED, Value::Null).id(CREATED).settled());
    }
    batch.extend(initial.into_iter().map(message));
    let appended = state.store.append(&session, batch).await?;
    state
        .metrics
        .appended
        .increment(appended.events.len() as u64);
    let tail = appended.events.last().map_or(0, |e| e.event.index);
    let status = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok(with_offset(status, tail))
}

fn unsupported() -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "UnsupportedMediaType",
        "a2 streams are JSON event logs: only application/json streams exist",
    )
}

fn message(value: Value) -> NewEvent {
    NewEvent::new(MESSAGE, value).settled()
}

/// The messages of a body: a JSON value, or an array flattened one level.
fn parse_messages(body: &[u8], empty_ok: bool) -> Result<Vec<Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return if empty_ok {
            Ok(Vec::new())
        } else {
            Err(ApiError::invalid("an append needs a body"))
        };
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("the body is not JSON: {e}")))?;
    let values = match value {
        Value::Array(items) => items,
        other => vec![other],
    };
    if values.is_empty() && !empty_ok {
        return Err(ApiError::invalid(
            "an append of an empty array appends nothing",
        ));
    }
    Ok(values)
}

fn with_offset(status: StatusCode, tail: u64) -> Response {
    let mut response = status.into_response();
    let headers = response.headers_mut();
    headers.insert(NEXT_OFFSET, header_value(&offset(tail)));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `POST`: appends messages (an array is flattened one level); 204 with the
/// new tail offset.
pub(crate) async fn append(
    _: CanAppend,
    State(state): State<AppState>,
    Path(session): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    if frontier(&state, &session).await?.is_none() {
        return Err(not_found(&session));
    }
    if !is_json(&headers) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "InvalidArgument",
            "the stream is application/json; the append is not",
        ));
    }
    let values = parse_messages(&body, false)?;
    check_batch(&state, values.len())?;
    let appended = state
        .store
        .append(&session, values.into_iter().map(message).collect())
        .await?;
    state
        .metrics
        .appended
        .increment(appended.events.len() as u64);
    let tail = appended.events.last().map_or(0, |e| e.event.index);
    Ok(with_offset(StatusCode::NO_CONTENT, tail))
}

/// `DELETE`: deletes the session (I4).
pub(crate) async fn delete(
    _: CanAdmin,
    State(state): State<AppState>,
    Path(session): Path<String>,
) -> ApiResult<StatusCode> {
    if frontier(&state, &session).await?.is_none() {
        return Err(not_found(&session));
    }
    state.store.clear(&session).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `HEAD`: the stream's content type and tail offset.
pub(crate) async fn head(
    _: CanRead,
    State(state): State<AppState>,
    Path(session): Path<String>,
) -> ApiResult<Response> {
    let Some(tail) = frontier(&state, &session).await? else {
        return Err(not_found(&session));
    };
    let mut response = with_offset(StatusCode::OK, tail);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// `GET`: a catch-up read, a long-poll, or an SSE stream.
pub(crate) async fn read(
    _: CanRead,
    State(state): State<AppState>,
    Path(session): Path<String>,
    Query(query): Query<ReadQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let Some(tail) = frontier(&state, &session).await? else {
        return Err(not_found(&session));
    };
    match query.live.as_deref() {
        None => catch_up(&state, &session, &query, tail, &headers).await,
        Some("long-poll") => {
            if query.offset.is_none() {
                return Err(ApiError::invalid("a long-poll needs an offset"));
            }
            long_poll(&state, &session, &query, tail).await
        }
        Some("sse") => {
            if query.offset.is_none() {
                return Err(ApiError::invalid("an SSE read needs an offset"));
            }
            let after = parse_offset(query.offset.as_deref(), tail)?;
            Ok(sse(state.clone(), session, after, query.cursor).into_response())
        }
        Some(other) => Err(ApiError::invalid(format!(
            "live must be long-poll or sse, not {other:?}"
        ))),
    }
}

/// Up to [`CHUNK`] events after `after`, and the frontier they were read to.
async fn page(state: &AppState, session: &str, after: u64) -> ApiResult<(Vec<StoredEvent>, u64)> {
    let page = state
        .store
        .read_events(session, ReadEventsOptions::new(CHUNK).after_index(after))
        .await?;
    Ok((page.events, page.through_index))
}

fn data_response(
    state: &AppState,
    session: &str,
    after: u64,
    events: &[StoredEvent],
    through: u64,
    cursor_of: Option<&str>,
) -> Response {
    let next = events.last().map_or(after, |e| e.event.index);
    let body = serde_json::to_vec(&messages(events)).unwrap_or_else(|_| b"[]".to_vec());
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(NEXT_OFFSET, header_value(&offset(next)));
    if next >= through {
        h.insert(UP_TO_DATE, HeaderValue::from_static("true"));
    }
    h.insert(CURSOR, header_value(&cursor(state, cursor_of)));
    // The identity of exactly this range: a session id may hold any
    // character, so it is hashed, never copied into the header.
    let tag = format!("\"{:016x}:{after}:{next}\"", fnv(session.as_bytes()));
    h.insert(header::ETAG, header_value(&tag));
    response
}

/// FNV-1a: a stable, dependency-free hash for the ETag's stream part.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

async fn catch_up(
    state: &AppState,
    session: &str,
    query: &ReadQuery,
    tail: u64,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let after = parse_offset(query.offset.as_deref(), tail)?;
    let (events, through) = if query.offset.as_deref() == Some("now") {
        (Vec::new(), tail)
    } else {
        page(state, session, after).await?
    };
    let mut response = data_response(state, session, after, &events, through, None);
    if query.offset.as_deref() == Some("now") {
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    let etag = response.headers().get(header::ETAG).cloned();
    if let (Some(tag), Some(wanted)) = (etag, headers.get(header::IF_NONE_MATCH))
        && tag == wanted
    {
        let mut not_modified = StatusCode::NOT_MODIFIED.into_response();
        not_modified.headers_mut().insert(header::ETAG, tag);
        return Ok(not_modified);
    }
    Ok(response)
}

async fn long_poll(
    state: &AppState,
    session: &str,
    query: &ReadQuery,
    tail: u64,
) -> ApiResult<Response> {
    let after = parse_offset(query.offset.as_deref(), tail)?;
    let cursor_of = query.cursor.as_deref();
    if query.offset.as_deref() != Some("now") {
        let (events, through) = page(state, session, after).await?;
        if !messages(&events).is_empty() {
            return Ok(data_response(
                state, session, after, &events, through, cursor_of,
            ));
        }
    }
    // Wait for the next event after the tail we know, then read what came.
    let _guard = StreamGuard::new(&state.metrics.session_streams);
    let from = after;
    let mut feed = state.store.stream(session, from);
    let shutdown = state.config.shutdown.clone();
    loop {
        let next = tokio::select! {
            next = tokio::time::timeout(LONG_POLL, feed.next()) => next.ok().flatten(),
            () = shutdown.cancelled() => None,
        };
        match next {
            Some(Ok(event)) if event.event_type == CREATED => continue,
            Some(Ok(_)) => {
                let (events, through) = page(state, session, from).await?;
                return Ok(data_response(
                    state, session, from, &events, through, cursor_of,
                ));
            }
            Some(Err(error)) => return Err(error.into()),
            None => {
                let tail = frontier(state, session).await?.unwrap_or(from);
                let mut response = StatusCode::NO_CONTENT.into_response();
                let h = response.headers_mut();
                h.insert(NEXT_OFFSET, header_value(&offset(tail.max(from))));
                h.insert(UP_TO_DATE, HeaderValue::from_static("true"));
                h.insert(CURSOR, header_value(&cursor(state, cursor_of)));
                return Ok(response);
            }
        }
    }
}

/// The SSE events of one batch of a feed: a `data` event with the
/// payloads (the stream's creation marker left out), a `control` event with
/// the offset after the batch, and an `error` event when the feed failed.
fn sse_batch(batch: Vec<a2_core::Result<a2_core::Event>>, cursor_text: &str) -> Vec<SseEvent> {
    let mut out = Vec::new();
    let mut last = None;
    let mut values = Vec::new();
    let mut failed = None;
    for item in batch {
        match item {
            Ok(event) => {
                last = Some(event.index);
                if event.event_type != CREATED {
                    values.push(event.payload);
                }
            }
            Err(error) => {
                failed = Some(error);
                break;
            }
        }
    }
    if !values.is_empty() {
        out.push(
            SseEvent::default()
                .event("data")
                .data(Value::Array(values).to_string()),
        );
    }
    if let Some(last) = last {
        let control = serde_json::json!({
            "streamNextOffset": offset(last),
            "streamCursor": cursor_text,
            "upToDate": true,
        });
        out.push(
            SseEvent::default()
                .event("control")
                .data(control.to_string()),
        );
    }
    if let Some(error) = failed {
        let body = ApiError::from(error).body();
        out.push(
            SseEvent::default()
                .event("error")
                .data(serde_json::to_string(&body).unwrap_or_default()),
        );
    }
    out
}

/// The SSE mode: for each batch, a `data` event (a JSON array of messages)
/// and a `control` event with the next offset, the cursor and, when caught
/// up, `upToDate`.
fn sse(
    state: AppState,
    session: String,
    after: u64,
    cursor_of: Option<String>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static> {
    let guard = StreamGuard::new(&state.metrics.session_streams);
    let shutdown = state.config.shutdown.clone();
    let cursor_text = cursor(&state, cursor_of.as_deref());
    let feed = state.store.stream(&session, after);
    // The first control event says where the reader stands even when no
    // data comes: the start offset, caught up if nothing is after it.
    let first = {
        let state = state.clone();
        let session = session.clone();
        let cursor_text = cursor_text.clone();
        async move {
            let tail = frontier(&state, &session)
                .await
                .ok()
                .flatten()
                .unwrap_or(after);
            let control = serde_json::json!({
                "streamNextOffset": offset(after),
                "streamCursor": cursor_text,
                "upToDate": after >= tail,
            });
            if after >= tail {
                vec![
                    SseEvent::default()
                        .event("control")
                        .data(control.to_string()),
                ]
            } else {
                Vec::new()
            }
        }
    };
    let batches = feed
        .ready_chunks(CHUNK)
        .flat_map(move |batch| futures::stream::iter(sse_batch(batch, &cursor_text)));
    let stream = futures::stream::once(first)
        .flat_map(futures::stream::iter)
        .chain(batches)
        .take_until(async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = tokio::time::sleep(SSE_LIFETIME) => {}
            }
        })
        .map(move |event| {
            let _alive = &guard;
            Ok(event)
        });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_sort_as_strings_and_parse_back() {
        assert!(offset(9) < offset(10));
        assert_eq!(parse_offset(Some(&offset(42)), 100).unwrap(), 42);
        assert_eq!(parse_offset(Some("-1"), 100).unwrap(), 0);
        assert_eq!(parse_offset(None, 100).unwrap(), 0);
        assert_eq!(parse_offset(Some("now"), 100).unwrap(), 100);
        for bad in ["", "abc", "12", "-2", "0000000000000000000x"] {
            assert!(parse_offset(Some(bad), 100).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bodies_flatten_one_level() {
        let one = parse_messages(br#"{"a":1}"#, false).unwrap();
        assert_eq!(one, vec![serde_json::json!({"a": 1})]);
        let two = parse_messages(br#"[[1,2],[3]]"#, false).unwrap();
        assert_eq!(two, vec![serde_json::json!([1, 2]), serde_json::json!([3])]);
        assert!(parse_messages(b"[]", false).is_err());
        assert!(parse_messages(b"", false).is_err());
        assert!(parse_messages(b"[]", true).unwrap().is_empty());
        assert!(parse_messages(b"{", true).is_err());
    }
}
