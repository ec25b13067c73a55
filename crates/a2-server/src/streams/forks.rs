//! Which forks a stream has, so a deleted stream whose forks live on is
//! *gone* (410) rather than unknown (404), and its name is not taken again
//! while they live, as the protocol asks.
//!
//! An a2 fork is a copy (FK1, FK5): deleting or expiring its source takes
//! nothing from it. What the protocol adds is only the source's status. A
//! fork is registered, before it is made, as a settled event in the
//! session `__ds/forks/{source}`; a source that is not found is gone while
//! one of the registered forks still exists as a fork of it. Registering
//! twice is a replay (A5), a registered fork that was never made or was
//! deleted is not counted, and the register of a source with no living
//! fork left is deleted when it is found so.

use a2_core::{NewEvent, ReadEventsOptions};
use axum::http::StatusCode;
use serde_json::json;
use std::sync::Arc;

use super::{config, fnv};
use crate::error::ApiError;
use crate::streams::Engine;

const PREFIX: &str = "__ds/forks/";
const FORK: &str = "a2.stream.fork";

/// The session that registers the forks of `source`.
fn register_of(source: &str) -> String {
    let name = format!("{PREFIX}{source}");
    if name.len() <= a2_core::validate::MAX_SESSION_ID_BYTES {
        name
    } else {
        format!("{PREFIX}#{:016x}", fnv(source.as_bytes()))
    }
}

/// Registers `target` as a fork of `source`.
pub(crate) async fn register(
    state: &Arc<Engine>,
    source: &str,
    target: &str,
) -> Result<(), ApiError> {
    let event = NewEvent::new(FORK, json!({ "target": target }))
        .id(format!("{:016x}", fnv(target.as_bytes())))
        .settled();
    state
        .store
        .append(&register_of(source), vec![event])
        .await?;
    Ok(())
}

/// Whether a fork of `source` still exists — or was deleted while forks
/// of its own live on; when none does, the register goes.
pub(crate) async fn living(state: &Arc<Engine>, source: &str) -> Result<bool, ApiError> {
    living_at(state, source, 0).await
}

/// Forks of forks, this deep at most (a chain of deleted streams).
const DEPTH: usize = 32;

async fn living_at(state: &Arc<Engine>, source: &str, depth: usize) -> Result<bool, ApiError> {
    let register = register_of(source);
    let mut after = 0;
    let mut any = false;
    loop {
        let page = state
            .store
            .read_events(&register, ReadEventsOptions::new(1_000).after_index(after))
            .await?;
        for row in &page.events {
            after = row.event.index;
            let Some(target) = row.event.payload["target"].as_str() else {
                continue;
            };
            match config::load(state, target).await? {
                Some(fork) if fork.config.fork.as_ref().is_some_and(|f| f.from == source) => {
                    return Ok(true);
                }
                None if depth < DEPTH && Box::pin(living_at(state, target, depth + 1)).await? => {
                    return Ok(true);
                }
                _ => {}
            }
            any = true;
        }
        if page.events.is_empty() || after >= page.through_index {
            break;
        }
    }
    if any {
        state.store.clear(&register).await?;
    }
    Ok(false)
}

/// The answer for a stream that is not found: gone (410) while forks of it
/// live, else unknown (404).
pub(crate) async fn missing(state: &Arc<Engine>, session: &str) -> ApiError {
    match living(state, session).await {
        Ok(true) => ApiError::new(
            StatusCode::GONE,
            "StreamGone",
            format!("stream {session:?} was deleted; forks of it live on"),
        ),
        Ok(false) => ApiError::not_found(format!("no stream {session:?}")),
        Err(error) => error,
    }
}
