//! `PUT` with `Stream-Forked-From`: a stream forked from another at an
//! offset, and optionally some way into what follows it
//! (`Stream-Fork-Sub-Offset`: messages of a JSON stream, bytes of a byte
//! stream).
//!
//! The fork is the session's fork (FK1) at the last whole event the fork
//! takes, followed by the fork's own marker (its configuration, and what it
//! was forked from so a second `PUT` of the same fork is recognized) and,
//! when the sub-offset ends inside an event, a chunk with that event's
//! first bytes. The marker and that chunk are listed in the configuration
//! as inserted events, which offsets count around (`super::offsets`): the
//! fork shares its source's offset space, its tail at creation is the
//! position it was forked at, and its appends go on from there. A fork at
//! the start takes nothing: one append makes it. Each step is idempotent
//! (FK3, A5), so a `PUT` retried after a failure between them completes the
//! fork.

use a2_core::{ErrorCode, ForkOutcome, ReadEventsOptions};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;

use super::write::{conflict, first_write, marker, unchanged};
use super::{FORK_OFFSET, FORK_SUB_OFFSET, content_type, text};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::streams::config::{self, Config, ForkOf, Stream};
use crate::streams::offsets::Inserted;
use crate::streams::{At, check_name, content, parse_offset};

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
        Some(t) => crate::streams::whole_number(t, "Stream-Fork-Sub-Offset")?,
        None => 0,
    };
    let given = match text(headers, FORK_OFFSET) {
        None => None,
        Some(t) => Some(parse_offset(t)?),
    };
    let Some(origin) = config::load(&state.streams, source).await? else {
        return Err(
            if crate::streams::forks::living(&state.streams, source).await? {
                conflict(format!("source stream {source:?} was deleted"))
            } else {
                ApiError::not_found(format!("no source stream {source:?}"))
            },
        );
    };
    if let Some(given) = content_type(headers)
        && !origin.config.accepts(given)
    {
        return Err(conflict("a fork has its source's content type"));
    }
    // The position forked at, in the source's offset space (§8), and the
    // last event of the source it takes whole.
    let (position, named) = match given {
        Some(At::After(position)) => (position, true),
        None | Some(At::Now) => (origin.position(origin.tail), false),
    };
    let start = origin.index_of(position);
    if start > origin.tail {
        return Err(ApiError::invalid(format!(
            "the fork offset is past the source's tail {}",
            origin.offset(origin.tail)
        )));
    }
    // Without its own lifetime a fork takes its source's.
    let (ttl_seconds, expires_at) = if ttl_seconds.is_none() && expires_at.is_none() {
        (origin.config.ttl_seconds, origin.config.expires_at.clone())
    } else {
        (ttl_seconds, expires_at)
    };
    let mut config = Config {
        content_type: origin.config.content_type.clone(),
        ttl_seconds,
        expires_at,
        fork: Some(ForkOf {
            from: source.to_owned(),
            offset: position.base,
            at_sub: position.sub,
            sub,
            given: named,
        }),
        work: origin.config.work,
        inserted: Vec::new(),
    };
    if let Some(existing) = config::load(&state.streams, session).await? {
        // A fork whose own events were never written (the server stopped
        // between the fork and them) has nothing past what it took: the
        // same PUT again finishes it, as a new fork would.
        let unfinished = existing.forked_at == Some(existing.tail);
        if !unfinished {
            return if existing.config.same_as(&config) && existing.closed == closed {
                Ok(unchanged(StatusCode::OK, &existing))
            } else {
                Err(conflict(format!("stream {session:?} exists")))
            };
        }
    }
    let (at, partial) = fork_point(state, source, &origin, start, sub).await?;
    // What the fork inserts among its source's events (the source's own
    // insertions up to the fork point come along): offsets count around
    // them, so the fork goes on in its source's offset space.
    config.inserted = origin
        .config
        .inserted
        .iter()
        .copied()
        .filter(|Inserted(index, _)| *index <= at)
        .collect();
    config.inserted.push(Inserted(at + 1, None));
    let mut batch = Vec::new();
    if let Some(bytes) = partial {
        let mut units = 0;
        for (k, piece) in content::events_of(&config, &bytes, true)?
            .into_iter()
            .enumerate()
        {
            let mut piece_bytes = Vec::new();
            content::chunk_bytes(&piece.payload, &mut piece_bytes);
            units += piece_bytes.len() as u64;
            config
                .inserted
                .push(Inserted(at + 2 + k as u64, Some(units)));
            batch.push(piece.id(own_id(at, &format!(".sub.{k}"))));
        }
    }
    batch.insert(0, marker(&config, &own_id(at, "")));
    for (k, event) in content::events_of(&config, body, true)?
        .into_iter()
        .enumerate()
    {
        batch.push(event.id(own_id(at, &format!(".initial.{k}"))));
    }
    // Registered first: a fork that exists is always known to its source.
    crate::streams::forks::register(&state.streams, source, session).await?;
    // A fork at the start takes nothing of its source: its first write
    // makes it (the store's fork needs an event to fork at).
    if at > 0 {
        match state.streams.fork(source, at, session).await {
            Ok(ForkOutcome::Forked { .. }) | Ok(ForkOutcome::AlreadyForked) => {}
            Err(e) if e.code() == ErrorCode::SessionExists => {
                return Err(conflict(format!("stream {session:?} exists")));
            }
            Err(e) => return Err(e.into()),
        }
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
            if !content::visible(event) {
                at = event.index;
                continue;
            }
            if origin.config.is_json() {
                at = event.index;
                left -= 1;
            } else {
                let mut bytes = Vec::new();
                content::chunk_bytes(&event.payload, &mut bytes);
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
