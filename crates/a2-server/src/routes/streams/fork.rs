//! `PUT` with `Stream-Forked-From`: a stream forked from another at an
//! offset, and optionally some way into what follows it
//! (`Stream-Fork-Sub-Offset`: messages of a JSON stream, bytes of a byte
//! stream).
//!
//! The fork is the session's fork (FK1) at the last whole event the fork
//! takes, followed by the fork's own marker (its configuration, and what it
//! was forked from so a second `PUT` of the same fork is recognized) and,
//! when the sub-offset ends inside an event, a chunk with that event's
//! first bytes. Each step is idempotent (FK3, A5), so a `PUT` retried after
//! a failure between them completes the fork.

use a2_core::{ErrorCode, ForkOutcome, ReadEventsOptions};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;

use super::meta::{self, Config, ForkOf, Stream};
use super::write::{conflict, first_write, marker, written};
use super::{
    At, FORK_OFFSET, FORK_SUB_OFFSET, body, check_name, content_type, offset, parse_offset, text,
};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The ids of a fork's own events: unique along a chain of forks, whose
/// each fork takes its source's events (and their ids) up to `at`.
fn own_id(at: u64, what: &str) -> String {
    format!("a2.stream.forked.{at}{what}")
}

/// The fork `session` of `source`, as the headers ask.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn fork(
    state: &AppState,
    session: &str,
    source: &str,
    (headers, uri): (&HeaderMap, &Uri),
    ttl_seconds: Option<u64>,
    expires_at: Option<String>,
    closed: bool,
    body: &[u8],
) -> ApiResult<Response> {
    check_name(source)?;
    let sub = match text(headers, FORK_SUB_OFFSET) {
        Some(t) => super::whole_number(t, "Stream-Fork-Sub-Offset")?,
        None => 0,
    };
    let start = match text(headers, FORK_OFFSET) {
        None => None,
        Some(t) => Some(match parse_offset(t)? {
            At::After(index) => index,
            At::Now => u64::MAX,
        }),
    };
    let Some(origin) = meta::load(state, source).await? else {
        return Err(if super::forks::living(state, source).await? {
            conflict(format!("source stream {source:?} was deleted"))
        } else {
            ApiError::not_found(format!("no source stream {source:?}"))
        });
    };
    if let Some(given) = content_type(headers)
        && !origin.config.accepts(given)
    {
        return Err(conflict("a fork has its source's content type"));
    }
    let start = match start {
        None | Some(u64::MAX) => origin.tail,
        Some(s) => s,
    };
    if start > origin.tail {
        return Err(ApiError::invalid(format!(
            "the fork offset is past the source's tail {}",
            offset(origin.tail)
        )));
    }
    // Without its own lifetime a fork takes its source's.
    let (ttl_seconds, expires_at) = if ttl_seconds.is_none() && expires_at.is_none() {
        (origin.config.ttl_seconds, origin.config.expires_at.clone())
    } else {
        (ttl_seconds, expires_at)
    };
    let config = Config {
        content_type: origin.config.content_type.clone(),
        ttl_seconds,
        expires_at,
        fork: Some(ForkOf {
            from: source.to_owned(),
            offset: start,
            sub,
        }),
        work: origin.config.work,
    };
    if let Some(existing) = meta::load(state, session).await? {
        return if *existing.config == config && existing.closed == closed {
            Ok(written(
                StatusCode::OK,
                existing.tail,
                &existing.config.content_type,
                existing.closed,
            ))
        } else {
            Err(conflict(format!("stream {session:?} exists")))
        };
    }
    let (at, partial) = fork_point(state, source, &origin, start, sub).await?;
    // Registered first: a fork that exists is always known to its source.
    super::forks::register(state, source, session).await?;
    // The source's marker is at index 1: a fork at the start takes it.
    match state.store.fork(source, at.max(1), session).await {
        Ok(ForkOutcome::Forked { .. }) | Ok(ForkOutcome::AlreadyForked) => {}
        Err(e) if e.code() == ErrorCode::SessionExists => {
            return Err(conflict(format!("stream {session:?} exists")));
        }
        Err(e) => return Err(e.into()),
    }
    let at = at.max(1);
    let mut batch = vec![marker(&config, &own_id(at, ""))];
    if let Some(bytes) = partial {
        let mut pieces = body::events_of(&config, &bytes, true)?;
        for (k, piece) in pieces.drain(..).enumerate() {
            batch.push(piece.id(own_id(at, &format!(".sub.{k}"))));
        }
    }
    for (k, event) in body::events_of(&config, body, true)?
        .into_iter()
        .enumerate()
    {
        batch.push(event.id(own_id(at, &format!(".initial.{k}"))));
    }
    first_write(state, session, &config, batch, closed, (headers, uri)).await
}

/// Where a fork `sub` units after `start` ends: the last whole event it
/// takes, and the first bytes of the next one when it ends inside it.
async fn fork_point(
    state: &AppState,
    source: &str,
    origin: &Stream,
    start: u64,
    sub: u64,
) -> Result<(u64, Option<Vec<u8>>), ApiError> {
    if sub == 0 {
        return Ok((start, None));
    }
    let beyond = || {
        ApiError::invalid(format!(
            "the fork sub-offset {sub} is past the source's data"
        ))
    };
    let mut at = start;
    let mut left = sub;
    while at < origin.tail {
        let page = state
            .store
            .read_events(
                source,
                ReadEventsOptions::new(1_000)
                    .after_index(at)
                    .through_index(Some(origin.tail)),
            )
            .await?;
        if page.events.is_empty() {
            break;
        }
        for row in &page.events {
            let event = &row.event;
            if !body::visible(event) {
                at = event.index;
                continue;
            }
            if origin.config.is_json() {
                at = event.index;
                left -= 1;
            } else {
                let mut bytes = Vec::new();
                body::chunk_bytes(&event.payload, &mut bytes);
                let len = bytes.len() as u64;
                if left < len {
                    bytes.truncate(left as usize);
                    return Ok((at, Some(bytes)));
                }
                at = event.index;
                left -= len;
            }
            if left == 0 {
                return Ok((at, None));
            }
        }
    }
    Err(beyond())
}
