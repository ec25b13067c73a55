//! The memory store's operations, one file each: each loads what its rule
//! in [`crate::rules`] needs from the state under the lock, calls it, and
//! writes what it decides.

mod append;
mod cancel;
mod claim;
mod complete;
mod fail;
mod fork;
mod lifecycle;
mod presence;
mod read;
mod release;
mod renew;
mod revive;
mod sessions;
mod state;

use std::collections::BTreeMap;
use std::sync::Arc;

use super::SessionState;
use crate::error::Result;
use crate::rules;

/// The session holding event `index` (CN4, RV1): an unknown session or
/// index is out of range, a trimmed one `Trimmed`.
pub(super) fn event_holder<'s>(
    sessions: &'s mut BTreeMap<Arc<str>, SessionState>,
    session_id: &str,
    index: u64,
) -> Result<&'s mut SessionState> {
    let Some(session) = sessions.get_mut(session_id) else {
        return Err(rules::read::no_event(session_id, index, 1, 0));
    };
    if session.record(index).is_none() {
        let (first, frontier) = (session.first_index(), session.frontier());
        return Err(rules::read::no_event(session_id, index, first, frontier));
    }
    Ok(session)
}
