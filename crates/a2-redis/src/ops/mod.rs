//! One module per operation, each beside its script in `lua/` (the style
//! of mini-redis's one file per command): a typed request encoder that
//! names every argument it pushes, and a typed reply enum decoded in one
//! place, so `store/` never matches on a script's string tags.
//!
//! A unit test per script checks that the names its header gives
//! `ARGV[n]` are the names its encoder pushes, in order.

pub(crate) mod append;
pub(crate) mod batch;
pub(crate) mod cancel;
pub(crate) mod claim;
pub(crate) mod clear;
pub(crate) mod complete;
pub(crate) mod config;
pub(crate) mod fail;
pub(crate) mod follow;
pub(crate) mod fork;
#[cfg(test)]
mod headers;
pub(crate) mod lifecycle;
pub(crate) mod presence;
pub(crate) mod read;
pub(crate) mod read_state;
pub(crate) mod release;
pub(crate) mod renew;
pub(crate) mod revive;
pub(crate) mod sessions;
pub(crate) mod snapshots;

/// Every session script, for the batch script (`lua::batch`).
pub(crate) static ALL: [&crate::lua::SessionScript; 20] = [
    &append::SCRIPT,
    &claim::SCRIPT,
    &complete::SCRIPT,
    &fail::SCRIPT,
    &renew::SCRIPT,
    &release::SCRIPT,
    &read::SCRIPT,
    &read_state::SCRIPT,
    &snapshots::SCRIPT,
    &clear::SCRIPT,
    &presence::SET,
    &presence::READ,
    &revive::SCRIPT,
    &lifecycle::CLOSE,
    &lifecycle::TRIM,
    &lifecycle::SET_EXPIRY,
    &fork::READ,
    &fork::STAGE,
    &fork::PUBLISH,
    &cancel::SCRIPT,
];

/// The batch script, built on first use.
pub(crate) static BATCH: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();

/// The batch and every session script as a function library, built on
/// first use.
pub(crate) static LIBRARY: std::sync::OnceLock<crate::lua::Library> = std::sync::OnceLock::new();

/// The same library publishing on sharded channels, for a cluster.
pub(crate) static SHARDED_LIBRARY: std::sync::OnceLock<crate::lua::Library> =
    std::sync::OnceLock::new();

pub(crate) use crate::args::Args;

/// The next element of a reply, or a "reply too short" error.
pub(crate) fn next(items: &mut std::vec::IntoIter<redis::Value>) -> a2_core::Result<redis::Value> {
    items
        .next()
        .ok_or_else(|| crate::codec::broken("reply too short"))
}

/// A tag a script may answer about an event, and the outcome it makes of
/// the event's row.
pub(crate) type EventOutcome<T> = (&'static str, fn(a2_core::StoredEvent) -> T);

/// Decodes the answer of a script that acts on event `index` of `session`
/// by its index (`event_at` in `lua/helpers.lua`: cancel, revive): the
/// script's own tag with the event's row, or one of the refusals every such
/// script shares as its error — an index outside 1…frontier
/// (`InvalidArgument`, CN4, RV1), a trimmed event (`Trimmed`, TR3), a
/// missing log entry (`Corrupted`, E1).
///
/// Any other tag must be one of `outcomes`, whose constructor gets the
/// event's row; `op` names the script in the error an unknown tag is.
pub(crate) fn event_reply<T>(
    op: &str,
    session: &str,
    index: u64,
    reply: redis::Value,
    outcomes: [EventOutcome<T>; 2],
) -> a2_core::Result<T> {
    let (tag, mut items) = crate::codec::tagged(reply)?;
    match tag.as_str() {
        "invalid" => Err(a2_core::Error::invalid(format!(
            "index {index} does not exist in session {session:?}"
        ))),
        "trimmed" => Err(a2_core::Error::trimmed(
            session,
            crate::codec::uint(next(&mut items)?)?,
        )),
        "corrupted" => Err(a2_core::rules::read::missing(session, index)),
        _ => {
            let Some((_, outcome)) = outcomes.into_iter().find(|(name, _)| *name == tag) else {
                return Err(crate::codec::broken(format!("{op}: {tag}")));
            };
            Ok(outcome(crate::codec::row(session, next(&mut items)?)?))
        }
    }
}

/// Limits and counts go to Lua as doubles: larger values than this are
/// no different to a session (no session holds 2^31 events at once) and
/// stay exact.
pub(crate) fn lua_count(n: usize) -> usize {
    n.min(i32::MAX as usize)
}
