//! `PUT` (create, or fork), `POST` (append, close) and `DELETE`.

use a2_core::{AppendOptions, ErrorCode, NewEvent};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::producer_headers::{EXPECTED_SEQ, PRODUCER_EPOCH, PRODUCER_SEQ, RECEIVED_SEQ};
use super::{
    CLOSED, EXPIRES_AT, FORK_OFFSET, FORK_SUB_OFFSET, FORKED_FROM, NEXT_OFFSET, SEQ, StreamPath,
    TTL, WORK, content_type, header_value, set_flag, text,
};
use crate::auth::{CanAdmin, CanAppend};
use crate::error::{ApiError, ApiResult, Body as Bytes, ErrorBody, Path};
use crate::routes::sessions::check_batch;
use crate::state::AppState;
use crate::streams::config::{self, Config, Stream};
use crate::streams::producers::{self, Producer};
use crate::streams::{CREATED, check_name, content, session_of_path};

/// The content type of a stream created without one.
const DEFAULT_TYPE: &str = "application/octet-stream";

pub(crate) fn conflict(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "Conflict", message)
}

/// Whether a header that is a flag (`Stream-Closed`) is set.
fn flag(headers: &HeaderMap, name: HeaderName) -> bool {
    text(headers, name).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// `Stream-TTL` and `Stream-Expires-At` of a request.
fn lifetime(headers: &HeaderMap) -> Result<(Option<u64>, Option<String>), ApiError> {
    let ttl = text(headers, TTL);
    let at = text(headers, EXPIRES_AT);
    if ttl.is_some() && at.is_some() {
        return Err(ApiError::invalid(
            "Stream-TTL and Stream-Expires-At cannot both be given",
        ));
    }
    let ttl = ttl
        .map(|t| crate::streams::whole_number(t, "Stream-TTL"))
        .transpose()?;
    if let Some(at) = at {
        config::parse_time(at)?;
    }
    Ok((ttl, at.map(str::to_owned)))
}

/// A write's response: the status, the tail offset (as the protocol writes
/// it), the content type and whether the stream is closed.
pub(crate) fn written(
    status: StatusCode,
    tail: &str,
    content_type: &str,
    closed: bool,
) -> Response {
    let mut response = status.into_response();
    let h = response.headers_mut();
    h.insert(NEXT_OFFSET, header_value(tail));
    h.insert(header::CONTENT_TYPE, header_value(content_type));
    set_flag(h, CLOSED, closed);
    response
}

/// A write's response that leaves `stream` as it is: its tail, its
/// content type, whether it is closed.
pub(crate) fn unchanged(status: StatusCode, stream: &Stream) -> Response {
    written(
        status,
        &stream.offset(stream.tail),
        &stream.config.content_type,
        stream.closed,
    )
}

/// Says which write of its producer a response answers.
fn producer_echo(response: &mut Response, epoch: u64, seq: u64) {
    let h = response.headers_mut();
    h.insert(PRODUCER_EPOCH, header_value(&epoch.to_string()));
    h.insert(PRODUCER_SEQ, header_value(&seq.to_string()));
}

/// The marker of a stream of `config`, under `id`.
pub(crate) fn marker(config: &Config, id: &str) -> NewEvent {
    let payload = serde_json::to_value(config).unwrap_or_default();
    NewEvent::new(CREATED, payload).id(id).settled()
}

/// Whether an existing stream has the configuration a `PUT` asks for:
/// closure included, as the reference server judges it (a `PUT` without
/// `Stream-Closed` to a closed stream asks for another configuration).
fn same_config(stream: &Stream, asked: &Config, closed: bool) -> bool {
    stream.config.accepts(&asked.content_type)
        && stream.config.work == asked.work
        && stream.config.ttl_seconds == asked.ttl_seconds
        && stream.config.expires_at == asked.expires_at
        && closed == stream.closed
}

#[utoipa::path(
    put,
    path = "/v1/stream/{session}",
    params(
        StreamPath,
        ("Stream-TTL" = Option<String>, Header, description = "Seconds after its last activity that the stream expires"),
        ("Stream-Expires-At" = Option<String>, Header, description = "When the stream expires (RFC 3339)"),
        ("Stream-Closed" = Option<String>, Header, description = "`true` creates it closed"),
        ("Stream-Forked-From" = Option<String>, Header, description = "Forks this stream (its path)"),
        ("Stream-Fork-Offset" = Option<String>, Header, description = "The fork's offset in its source"),
        ("Stream-Fork-Sub-Offset" = Option<String>, Header, description = "Messages or bytes the fork takes after the offset"),
        ("A2-Work" = Option<String>, Header, description = "`true`: what is appended is work for a2's handlers"),
    ),
    request_body(description = "The first data (optional), in the stream's content type", content(
        (serde_json::Value = "application/json"),
        (String = "text/plain"),
        (Vec<u8> = "application/octet-stream"),
    )),
    security(("bearer" = ["append"])),
    responses(
        (status = 200, description = "The stream exists with this configuration", headers(
            ("Stream-Next-Offset" = String, description = "The tail offset"),
        )),
        (status = 201, description = "Created", headers(
            ("Stream-Next-Offset" = String, description = "The tail offset"),
            ("Location" = String, description = "The stream's URL"),
        )),
        (status = 409, description = "The stream exists with another configuration, or its name is taken by a deleted stream's living forks", body = ErrorBody),
    )
)]
/// `PUT`: creates the stream (201, with `Location`), finds it with the same
/// configuration (200), or refuses another configuration (409). With
/// `Stream-Forked-From`, forks that stream.
pub(crate) async fn create(
    CanAppend(state): CanAppend,
    Path(StreamPath { session }): Path<StreamPath>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    check_name(&session)?;
    let (ttl_seconds, expires_at) = lifetime(&headers)?;
    let closed = flag(&headers, CLOSED);
    if let Some(source) = text(&headers, FORKED_FROM) {
        let source = session_of_path(source).to_owned();
        return super::create_fork::fork(
            &state,
            &session,
            &source,
            (&headers, &uri),
            ttl_seconds,
            expires_at,
            closed,
            &body,
        )
        .await;
    }
    if headers.contains_key(FORK_OFFSET) || headers.contains_key(FORK_SUB_OFFSET) {
        return Err(ApiError::invalid(
            "Stream-Fork-Offset needs Stream-Forked-From",
        ));
    }
    let config = Config {
        content_type: content_type(&headers).unwrap_or(DEFAULT_TYPE).to_owned(),
        ttl_seconds,
        expires_at,
        fork: None,
        work: flag(&headers, WORK),
        inserted: Vec::new(),
    };
    let existing = config::load(&state.streams, &session).await?;
    if existing.is_none() && crate::streams::forks::living(&state.streams, &session).await? {
        return Err(conflict(format!(
            "stream {session:?} was deleted and forks of it live on: its name is taken until they go"
        )));
    }
    if let Some(stream) = existing {
        return if same_config(&stream, &config, closed) {
            Ok(unchanged(StatusCode::OK, &stream))
        } else {
            Err(conflict(format!(
                "stream {session:?} exists with another configuration"
            )))
        };
    }
    let mut batch = vec![marker(&config, CREATED)];
    for (k, event) in content::events_of(&config, &body, true)?
        .into_iter()
        .enumerate()
    {
        batch.push(event.id(format!("a2.stream.initial.{k}")));
    }
    first_write(&state, &session, &config, batch, closed, (&headers, &uri)).await
}

/// The first write of a stream made by a `PUT` (created, or forked): its
/// marker and first data in one append with the stream's expiry (EX2) and
/// the close it asked for (CL6), all in one atomic step; a `201`.
pub(crate) async fn first_write(
    state: &AppState,
    session: &str,
    config: &Config,
    batch: Vec<NewEvent>,
    closed: bool,
    (headers, uri): (&HeaderMap, &Uri),
) -> ApiResult<Response> {
    check_batch(state, batch.len())?;
    let mut options = AppendOptions::new();
    if let Some(expiry) = config.expiry()? {
        options = options.expiry(expiry);
    }
    if closed {
        // The batch holds the marker at least: never empty.
        options = options.close();
    }
    let appended = state
        .streams
        .append_with(session, batch, options)
        .await
        .map_err(|e| match e.code() {
            // Another PUT created it meanwhile with another configuration.
            ErrorCode::PartialDuplicateBatch => conflict(format!(
                "stream {session:?} exists with another configuration"
            )),
            _ => e.into(),
        })?;
    count(state, appended.events.len().saturating_sub(1));
    let tail = appended.events.last().map_or(0, |e| e.event.index);
    let tail =
        crate::streams::offsets::text(crate::streams::offsets::offset_of(&config.inserted, tail));
    Ok(created(headers, uri, &tail, &config.content_type, closed))
}

/// A `201` with the stream's absolute URL in `Location`.
pub(crate) fn created(
    headers: &HeaderMap,
    uri: &Uri,
    tail: &str,
    content_type: &str,
    closed: bool,
) -> Response {
    let mut response = written(StatusCode::CREATED, tail, content_type, closed);
    let host = text(headers, header::HOST.as_str()).unwrap_or("localhost");
    response.headers_mut().insert(
        header::LOCATION,
        header_value(&format!("http://{host}{}", uri.path())),
    );
    response
}

pub(crate) fn count(state: &AppState, appended: usize) {
    state.metrics.appended.increment(appended as u64);
}

#[utoipa::path(
    post,
    path = "/v1/stream/{session}",
    params(
        StreamPath,
        ("Stream-Closed" = Option<String>, Header, description = "`true` also closes the stream"),
        ("Stream-Seq" = Option<String>, Header, description = "Appended only when it sorts after the last one written"),
        ("Producer-Id" = Option<String>, Header, description = "An idempotent producer (with Producer-Epoch and Producer-Seq)"),
        ("Producer-Epoch" = Option<String>, Header, description = "The producer's epoch"),
        ("Producer-Seq" = Option<String>, Header, description = "The producer's sequence number in its epoch"),
    ),
    request_body(description = "The data, in the stream's content type", content(
        (serde_json::Value = "application/json"),
        (String = "text/plain"),
        (Vec<u8> = "application/octet-stream"),
    )),
    security(("bearer" = ["append"])),
    responses(
        (status = 200, description = "A producer's write, appended", headers(
            ("Stream-Next-Offset" = String, description = "The tail offset"),
            ("Producer-Epoch" = String, description = "The producer's epoch"),
            ("Producer-Seq" = String, description = "The sequence number written"),
        )),
        (status = 204, description = "Appended; or a producer's retry, acknowledged without a second write", headers(
            ("Stream-Next-Offset" = String, description = "The tail offset"),
        )),
        (status = 403, description = "The producer's epoch is older than its current one (StaleProducerEpoch)", body = ErrorBody),
        (status = 409, description = "Another content type, a closed stream, a Stream-Seq not after the last, or a producer's sequence gap", body = ErrorBody),
        (status = 410, description = "The stream was deleted and forks of it live on (StreamGone)", body = ErrorBody),
    )
)]
/// `POST`: appends the body (`204` with the new tail); with
/// `Stream-Closed: true` also closes the stream (the body may then be
/// empty). An append to a closed stream is `409` with `Stream-Closed`. With
/// producer headers or `Stream-Seq`, the write is judged first (see
/// `producer`).
pub(crate) async fn append(
    CanAppend(state): CanAppend,
    Path(StreamPath { session }): Path<StreamPath>,
    mut request: Request,
) -> ApiResult<Response> {
    // The headers are taken, not copied (the extractor of a `HeaderMap`
    // clones it): reading the body needs none of them.
    let headers = std::mem::take(request.headers_mut());
    let Bytes(body) = Bytes::from_request(request, &state).await?;
    let (producer, seq, close) = if super::has_protocol_headers(&headers) {
        (
            super::producer_headers::producer_of(&headers)?,
            text(&headers, SEQ).map(str::to_owned),
            flag(&headers, CLOSED),
        )
    } else {
        (None, None, false)
    };
    let closing_only = close && body.is_empty();
    // A write judged against its writers' state is appended only at the
    // frontier it was judged at (A13); another write in between means
    // judging again. Each turn around is another writer's success.
    for _ in 0..MAX_TURNS {
        let stream = config::require(&state.streams, &session).await?;
        if !closing_only {
            check_type(&headers, &stream)?;
        }
        let writers = if producer.is_some() || seq.is_some() {
            Some(
                state
                    .streams
                    .writers
                    .state(&state.streams, &session, &stream)
                    .await?,
            )
        } else {
            None
        };
        if let (Some(p), Some(writers)) = (&producer, &writers) {
            // Before the closed check: the retry of a closing write is a
            // duplicate, acknowledged.
            if let Some(refused) = judged(&stream, p, writers.producer(&p.id)) {
                return Ok(refused);
            }
        }
        if stream.closed {
            if closing_only && producer.is_none() {
                return Ok(unchanged(StatusCode::NO_CONTENT, &stream));
            }
            return Ok(closed_refusal(&session, &stream.offset(stream.tail)));
        }
        if let (Some(seq), Some(last)) = (&seq, writers.as_ref().and_then(|w| w.last_seq()))
            && seq.as_str() <= last
        {
            return Err(conflict(format!(
                "Stream-Seq {seq:?} is not after the last one, {last:?}"
            )));
        }
        let mut events = content::events_of(&stream.config, &body, closing_only)?;
        let data = events.len();
        if writers.is_some() {
            events.push(producers::write_event(producer.as_ref(), seq.as_deref()));
        }
        check_batch(&state, events.len())?;
        let mut tail = stream.tail;
        let appends = !events.is_empty();
        if appends {
            // Without a writer to judge, another append in between is fine:
            // no expected frontier. A close goes with the data, in the same
            // atomic step (CL6): never data appended to a stream left open.
            let mut options = AppendOptions::new();
            if writers.is_some() {
                options = options.if_frontier(stream.tail);
            }
            if close {
                options = options.close();
            }
            let written = state.streams.append_with(&session, events, options).await;
            let appended = match written {
                Ok(appended) => appended,
                Err(e) if e.code() == ErrorCode::FrontierMoved => continue,
                Err(e) => return Err(closed_meanwhile(e)),
            };
            count(&state, data);
            tail = appended.events.last().map_or(tail, |e| e.event.index);
            if let Some(writers) = writers {
                state
                    .streams
                    .writers
                    .wrote(&session, writers, &appended.events);
            }
            // Once the writers' state holds this append.
            crate::routes::let_woken_run().await;
        }
        if close && !appends {
            tail = state.store.close_session(&session).await?.frontier();
        }
        // A producer's append is 200; a close without data is 204, as
        // every plain append.
        let status = if producer.is_some() && !closing_only {
            StatusCode::OK
        } else {
            StatusCode::NO_CONTENT
        };
        let mut response = written(
            status,
            &stream.offset(tail),
            &stream.config.content_type,
            close,
        );
        if let Some(p) = &producer {
            producer_echo(&mut response, p.epoch, p.seq);
        }
        return Ok(response);
    }
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "StoreUnavailable",
        format!("{MAX_TURNS} other writes of stream {session:?} came first; try again"),
    ))
}

/// How often a write is judged again after other writes came first.
const MAX_TURNS: usize = 64;

/// Refuses an append whose content type is missing or not the stream's.
fn check_type(headers: &HeaderMap, stream: &Stream) -> Result<(), ApiError> {
    // Most appends name the stream's own type as it was given at creation,
    // which was checked then.
    if headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|given| given.as_bytes() == stream.config.content_type.as_bytes())
    {
        return Ok(());
    }
    let Some(given) = content_type(headers) else {
        return Err(ApiError::invalid("an append needs a Content-Type"));
    };
    if !stream.config.accepts(given) {
        return Err(conflict(format!(
            "the stream is {}; the append is {given}",
            stream.config.content_type
        )));
    }
    Ok(())
}

/// The protocol's answer to a closed stream: `409` with `Stream-Closed`
/// and the final offset.
fn closed_refusal(session: &str, tail: &str) -> Response {
    let mut refused = conflict(format!("stream {session:?} is closed")).into_response();
    let h = refused.headers_mut();
    h.insert(CLOSED, HeaderValue::from_static("true"));
    h.insert(NEXT_OFFSET, header_value(tail));
    refused
}

/// The answer to a producer's write that is not appended, or `None` when
/// it is to be appended.
fn judged(stream: &Stream, p: &Producer, state: Option<(u64, u64)>) -> Option<Response> {
    use producers::Verdict;
    let response = match producers::judge(state, p) {
        Verdict::Accept => return None,
        Verdict::Duplicate { last_seq } => {
            let mut r = unchanged(StatusCode::NO_CONTENT, stream);
            producer_echo(&mut r, p.epoch, last_seq);
            r
        }
        Verdict::Stale { current } => {
            let mut r = ApiError::new(
                StatusCode::FORBIDDEN,
                "StaleProducerEpoch",
                format!("producer epoch {} is older than {current}", p.epoch),
            )
            .into_response();
            r.headers_mut()
                .insert(PRODUCER_EPOCH, header_value(&current.to_string()));
            r
        }
        Verdict::EpochNotAtZero => {
            ApiError::invalid("a new producer epoch starts at Producer-Seq 0").into_response()
        }
        Verdict::Gap { expected, received } => {
            let mut r = conflict(format!(
                "producer sequence gap: expected {expected}, received {received}"
            ))
            .into_response();
            let h = r.headers_mut();
            h.insert(EXPECTED_SEQ, header_value(&expected.to_string()));
            h.insert(RECEIVED_SEQ, header_value(&received.to_string()));
            r
        }
    };
    Some(response)
}

/// A session closed between the look-up and the append: the protocol's
/// `409` with `Stream-Closed`.
fn closed_meanwhile(error: a2_core::Error) -> ApiError {
    if error.code() == ErrorCode::SessionClosed {
        conflict(error.to_string())
    } else {
        error.into()
    }
}

#[utoipa::path(
    delete,
    path = "/v1/stream/{session}",
    params(StreamPath),
    security(("bearer" = ["admin"])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 410, description = "The stream was deleted and forks of it live on (StreamGone)", body = ErrorBody),
    )
)]
/// `DELETE`: deletes the stream (I4).
pub(crate) async fn delete(
    CanAdmin(state): CanAdmin,
    Path(StreamPath { session }): Path<StreamPath>,
) -> ApiResult<StatusCode> {
    config::require(&state.streams, &session).await?;
    state.streams.clear(&session).await?;
    Ok(StatusCode::NO_CONTENT)
}
