//! `GET` (catch-up, long-poll, SSE) and `HEAD`.

use std::task::Poll;
use std::time::Duration;

use a2_core::{ReadEventsOptions, StoredEvent};
use axum::body::Body;
use axum::extract::RawQuery;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::sse::SseBody;
use super::{
    CLOSED, CURSOR, EXPIRES_AT, NEXT_OFFSET, SSE_ENCODING, StreamPath, TTL, UP_TO_DATE, cursor,
    header_value, set_flag,
};
use crate::auth::CanRead;
use crate::error::{ApiError, ApiResult, ErrorBody, Path};
use crate::metrics::StreamGuard;
use crate::state::AppState;
use crate::streams::config::{self, Stream};
use crate::streams::offsets::{self, Position};
use crate::streams::{At, content, fnv, parse_offset};

/// Events in one catch-up response at most.
const PAGE: usize = 1_000;
/// Bytes of data in one catch-up response, about (a page stops after the
/// event that passes it).
const PAGE_BYTES: usize = 1 << 20;
/// How long an SSE response lives before the server closes it; the client
/// reconnects from its last offset (the protocol asks for about a minute,
/// so caches can collapse reconnections).
const SSE_LIFETIME: Duration = Duration::from_secs(60);
/// An SSE comment after this long without anything sent keeps idle
/// connections open.
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The query of a read: `offset`, `live`, `cursor`; others are ignored.
struct ReadQuery {
    offset: Option<String>,
    live: Option<String>,
    cursor: Option<String>,
}

fn parse_query(raw: Option<&str>) -> Result<ReadQuery, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| ApiError::invalid(format!("malformed query: {e}")))?;
    let mut query = ReadQuery {
        offset: None,
        live: None,
        cursor: None,
    };
    for (key, value) in pairs {
        let slot = match key.as_str() {
            "offset" => &mut query.offset,
            "live" => &mut query.live,
            "cursor" => &mut query.cursor,
            _ => continue,
        };
        if slot.is_some() {
            return Err(ApiError::invalid(format!("{key} given twice")));
        }
        *slot = Some(value);
    }
    Ok(query)
}

#[utoipa::path(
    head,
    path = "/v1/stream/{session}",
    params(StreamPath),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The stream's metadata, no body", headers(
            ("Stream-Next-Offset" = String, description = "The tail offset"),
            ("Stream-Closed" = String, description = "`true` when the stream is closed"),
            ("Stream-TTL" = String, description = "The TTL it was created with, in seconds"),
            ("Stream-Expires-At" = String, description = "The expiry it was created with"),
            ("ETag" = String, description = "The stream's state"),
        )),
        (status = 410, description = "The stream was deleted and forks of it live on (StreamGone)", body = ErrorBody),
    )
)]
/// `HEAD`: the stream's metadata, without a body.
pub(crate) async fn head(
    CanRead(state): CanRead,
    Path(StreamPath { session }): Path<StreamPath>,
) -> ApiResult<Response> {
    let stream = config::require(&state.streams, &session).await?;
    let mut response = StatusCode::OK.into_response();
    let h = response.headers_mut();
    h.insert(NEXT_OFFSET, header_value(&stream.offset(stream.tail)));
    h.insert(
        header::CONTENT_TYPE,
        header_value(&stream.config.content_type),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    set_flag(h, CLOSED, stream.closed);
    if let Some(ttl) = stream.config.ttl_seconds {
        h.insert(TTL, header_value(&ttl.to_string()));
    }
    if let Some(at) = &stream.config.expires_at {
        h.insert(EXPIRES_AT, header_value(at));
    }
    h.insert(
        header::ETAG,
        etag(&session, "-1", stream.tail, stream.closed),
    );
    Ok(response)
}

fn etag(session: &str, start: &str, next: u64, closed: bool) -> HeaderValue {
    // A session id may hold any character: it is hashed, never copied.
    let closed = if closed { ":c" } else { "" };
    header_value(&format!(
        "\"{:016x}:{start}:{next}{closed}\"",
        fnv(session.as_bytes())
    ))
}

#[utoipa::path(
    get,
    path = "/v1/stream/{session}",
    operation_id = "stream_read",
    params(
        StreamPath,
        ("offset" = Option<String>, Query, description = "`-1` (the start), `now` (the tail) or an offset the server gave"),
        ("live" = Option<String>, Query, description = "`long-poll` or `sse`; absent for a catch-up read"),
        ("cursor" = Option<String>, Query, description = "The `Stream-Cursor` of the previous response"),
    ),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "Data after the offset (a JSON array, or the bytes; for `live=sse` Server-Sent Events `data` and `control`)", content(
            (Vec<serde_json::Value> = "application/json"),
            (Vec<u8> = "application/octet-stream"),
            (String = "text/event-stream"),
        ), headers(
            ("Stream-Next-Offset" = String, description = "The offset to read from next"),
            ("Stream-Up-To-Date" = String, description = "`true` when the reader is at the tail"),
            ("Stream-Closed" = String, description = "`true` at the end of a closed stream"),
            ("Stream-Cursor" = String, description = "Echo it as `cursor` in the next live read"),
            ("ETag" = String, description = "The range read"),
        )),
        (status = 204, description = "A long-poll that found no data in time, or the end of a closed stream"),
        (status = 304, description = "The range read has the ETag given in If-None-Match"),
        (status = 410, description = "The stream was deleted and forks of it live on (StreamGone)", body = ErrorBody),
    )
)]
/// `GET`: a catch-up read, a long-poll, or an SSE stream.
pub(crate) async fn read(
    CanRead(state): CanRead,
    Path(StreamPath { session }): Path<StreamPath>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let query = parse_query(raw.as_deref())?;
    let at = match query.offset.as_deref() {
        Some(text) => Some(parse_offset(text)?),
        None => None,
    };
    let live = query.live.as_deref();
    match live {
        None | Some("long-poll") | Some("sse") => {}
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "live must be long-poll or sse, not {other:?}"
            )));
        }
    }
    if live.is_some() && at.is_none() {
        return Err(ApiError::invalid("a live read needs an offset"));
    }
    let stream = config::require(&state.streams, &session).await?;
    config::touch(&state.streams, &session, &stream).await?;
    let start = match at.unwrap_or(At::After(Position::index(0))) {
        At::After(position) => stream.index_of(position),
        At::Now => stream.tail,
    };
    match live {
        None if at == Some(At::Now) => Ok(at_tail(&stream)),
        None => {
            let start_text = query.offset.as_deref().unwrap_or("-1");
            catch_up(&state, &session, &stream, start, start_text, &headers).await
        }
        Some("long-poll") => {
            long_poll(&state, &session, stream, start, query.cursor.as_deref()).await
        }
        _ => Ok(sse(state, session, stream, start, query.cursor)),
    }
}

/// A catch-up read at `now`: no data, the tail offset, never cached.
fn at_tail(stream: &Stream) -> Response {
    let body = if stream.config.is_json() { "[]" } else { "" };
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header_value(&stream.config.content_type),
    );
    h.insert(NEXT_OFFSET, header_value(&stream.offset(stream.tail)));
    h.insert(UP_TO_DATE, HeaderValue::from_static("true"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    set_flag(h, CLOSED, stream.closed);
    response
}

/// Events after `after`, at most a page, and the tail they were read to.
async fn page(state: &AppState, session: &str, after: u64) -> ApiResult<(Vec<StoredEvent>, u64)> {
    let read = state
        .store
        .read_events(session, ReadEventsOptions::new(PAGE).after_index(after))
        .await?;
    let mut events = read.events;
    let mut bytes = 0;
    if let Some(cut) = events.iter().position(|e| {
        bytes += e.event.payload.to_string().len();
        bytes > PAGE_BYTES
    }) {
        events.truncate(cut + 1);
    }
    Ok((events, read.through_index))
}

/// A `200` with the data of `events`, read after `start` to `through`.
#[allow(clippy::too_many_arguments)]
fn data_response(
    session: &str,
    stream: &Stream,
    start: u64,
    start_text: &str,
    events: &[StoredEvent],
    through: u64,
    cursor_text: Option<String>,
) -> Response {
    let next = events
        .last()
        .map_or(start.max(through.min(start)), |e| e.event.index);
    let up_to_date = next >= through;
    let closed = stream.closed && up_to_date && next >= stream.tail;
    let data = content::render(&stream.config, events.iter().map(|e| &e.event));
    let mut response = (StatusCode::OK, data).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header_value(&stream.config.content_type),
    );
    h.insert(NEXT_OFFSET, header_value(&stream.offset(next)));
    set_flag(h, UP_TO_DATE, up_to_date);
    set_flag(h, CLOSED, closed);
    if let Some(c) = cursor_text {
        h.insert(CURSOR, header_value(&c));
    }
    h.insert(header::ETAG, etag(session, start_text, next, closed));
    response
}

async fn catch_up(
    state: &AppState,
    session: &str,
    stream: &Stream,
    start: u64,
    start_text: &str,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let (events, through) = page(state, session, start).await?;
    let response = data_response(session, stream, start, start_text, &events, through, None);
    let tag = response.headers().get(header::ETAG).cloned();
    if let (Some(tag), Some(wanted)) = (tag, headers.get(header::IF_NONE_MATCH))
        && tag == wanted
    {
        let mut not_modified = StatusCode::NOT_MODIFIED.into_response();
        not_modified.headers_mut().insert(header::ETAG, tag);
        return Ok(not_modified);
    }
    Ok(response)
}

/// A `204`: nothing after `next` yet (or ever, when closed).
fn nothing_new(
    state: &AppState,
    stream: &Stream,
    next: u64,
    closed: bool,
    echoed: Option<&str>,
) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let h = response.headers_mut();
    h.insert(NEXT_OFFSET, header_value(&stream.offset(next)));
    h.insert(UP_TO_DATE, HeaderValue::from_static("true"));
    h.insert(CURSOR, header_value(&cursor(state, echoed)));
    set_flag(h, CLOSED, closed);
    response
}

async fn long_poll(
    state: &AppState,
    session: &str,
    stream: Stream,
    start: u64,
    echoed: Option<&str>,
) -> ApiResult<Response> {
    let respond = |events: &[StoredEvent], through: u64, stream: &Stream| {
        data_response(
            session,
            stream,
            start,
            &stream.offset(start),
            events,
            through,
            Some(cursor(state, echoed)),
        )
    };
    let (events, through) = page(state, session, start).await?;
    if events.iter().any(|e| content::visible(&e.event)) {
        return Ok(respond(&events, through, &stream));
    }
    // Only markers (or nothing) after the offset: the reader is at the tail.
    let start = events.last().map_or(start, |e| e.event.index);
    if stream.closed && start >= stream.tail {
        return Ok(nothing_new(state, &stream, start, true, echoed));
    }
    let _guard = StreamGuard::new(&state.metrics.session_streams);
    let mut feed = state.store.stream(session, start);
    let shutdown = state.config.shutdown.clone();
    let deadline = tokio::time::Instant::now() + state.config.long_poll;
    loop {
        let next = tokio::select! {
            next = tokio::time::timeout_at(deadline, feed.next()) => next.ok(),
            () = shutdown.cancelled() => None,
        };
        match next {
            Some(Some(Ok(event))) if !content::visible(&event) => continue,
            Some(Some(Ok(_))) => {
                let (events, through) = page(state, session, start).await?;
                let stream = config::require(&state.streams, session).await?;
                return Ok(respond(&events, through, &stream));
            }
            Some(Some(Err(error))) => return Err(error.into()),
            // The feed ended: the session was closed (CL4).
            Some(None) => {
                let stream = config::require(&state.streams, session).await?;
                return Ok(nothing_new(state, &stream, start, stream.closed, echoed));
            }
            // Timed out, or the server is stopping.
            None => return Ok(nothing_new(state, &stream, start, false, echoed)),
        }
    }
}

/// A `control` event: the offset of the event at `next`, then the end of a
/// closed stream or the cursor and whether the reader is up to date.
/// Written by hand: one per batch per follower, of offsets and a cursor
/// the server made (digits), so nothing needs escaping; one `data:` line.
fn control(
    out: &mut Vec<u8>,
    config: &crate::streams::config::Config,
    next: u64,
    up_to_date: bool,
    closed: bool,
    cursor_text: &str,
) {
    out.extend_from_slice(b"event: control\ndata:{\"streamNextOffset\":\"");
    offsets::push(out, offsets::offset_of(&config.inserted, next));
    if closed {
        out.extend_from_slice(br#"","streamClosed":true}"#);
    } else {
        out.extend_from_slice(br#"","streamCursor":"#);
        if cursor_text.bytes().all(|b| b.is_ascii_digit()) {
            out.push(b'"');
            out.extend_from_slice(cursor_text.as_bytes());
            out.push(b'"');
        } else {
            // A string always serializes, its line breaks escaped.
            let _ = serde_json::to_writer(&mut *out, cursor_text);
        }
        out.extend_from_slice(if up_to_date {
            br#","upToDate":true}"#
        } else {
            br#","upToDate":false}"#
        });
    }
    out.extend_from_slice(b"\n\n");
}

/// The SSE mode: for each batch a `data` event and a `control` event with
/// the next offset, the cursor and, when caught up, `upToDate`; at the end
/// of a closed stream a last `control` with `streamClosed`.
fn sse(
    state: AppState,
    session: String,
    stream: Stream,
    start: u64,
    echoed: Option<String>,
) -> Response {
    let guard = StreamGuard::new(&state.metrics.session_streams);
    let shutdown = state.config.shutdown.clone();
    let cursor_text = cursor(&state, echoed.as_deref());
    let config = stream.config.clone();
    let initial_tail = stream.tail;
    // Where the reader stands before any data: said at once when it is at
    // the tail (and the end, when the stream is closed there).
    let mut first = Vec::new();
    let at_end = stream.closed && start >= stream.tail;
    if start >= stream.tail {
        control(&mut first, &config, start, true, at_end, &cursor_text);
    }
    let mut feed = if at_end {
        futures::stream::empty().boxed()
    } else {
        state.store.stream(&session, start)
    };
    // The events ready at once (a page at most) make one batch: a `data`
    // event and a `control` event. A failing feed ends the response
    // without the batch it failed in; the client resumes from its last
    // offset.
    let mut feed_done = false;
    let batches = {
        let cursor_text = cursor_text.clone();
        futures::stream::poll_fn(move |cx| {
            if feed_done {
                return Poll::Ready(None);
            }
            let mut events = Vec::new();
            loop {
                match feed.poll_next_unpin(cx) {
                    Poll::Ready(Some(Ok(event))) => {
                        events.push(event);
                        if events.len() >= PAGE {
                            break;
                        }
                    }
                    Poll::Ready(Some(Err(_))) => {
                        feed_done = true;
                        return Poll::Ready(None);
                    }
                    Poll::Ready(None) => {
                        feed_done = true;
                        if events.is_empty() {
                            return Poll::Ready(None);
                        }
                        break;
                    }
                    Poll::Pending if events.is_empty() => return Poll::Pending,
                    Poll::Pending => break,
                }
            }
            let mut out = Vec::new();
            content::push_sse_data(&mut out, &config, &events);
            if let Some(e) = events.last() {
                control(
                    &mut out,
                    &config,
                    e.index,
                    e.index >= initial_tail,
                    false,
                    &cursor_text,
                );
            }
            Poll::Ready(Some(out))
        })
    };
    // When the feed ends cleanly the session was closed (CL4): say so.
    let end = {
        let state = state.clone();
        let session = session.clone();
        async move {
            let mut out = Vec::new();
            if let Ok(Some(s)) = config::load(&state.streams, &session).await
                && s.closed
                && !at_end
            {
                control(&mut out, &s.config, s.tail, true, true, "");
            }
            out
        }
    };
    let events = futures::stream::once(async move { first })
        .chain(batches)
        .chain(futures::stream::once(end))
        .boxed();
    let body_stream = SseBody::new(events, SSE_KEEP_ALIVE, SSE_LIFETIME, shutdown, guard);
    let mut response = Response::new(Body::from_stream(body_stream));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if !stream.config.is_text() {
        h.insert(SSE_ENCODING, HeaderValue::from_static("base64"));
    }
    response
}
