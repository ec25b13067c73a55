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
pub(super) mod read;
mod release;
mod renew;
mod revive;
mod sessions;
mod state;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::SessionState;
use crate::clock::Millis;
use crate::error::Result;
use crate::rules;

/// CO1, F1: the session of the event an attempt worked on; an unknown one
/// is out of range.
pub(super) fn worked_session<'s>(
    sessions: &'s mut BTreeMap<Arc<str>, SessionState>,
    session_id: &str,
    index: u64,
) -> Result<&'s mut SessionState> {
    sessions
        .get_mut(session_id)
        .ok_or_else(|| rules::read::out_of_range(session_id, index, 0))
}

/// CO1, F1 for an event `session` does not hold: a trimmed one was
/// settled before it went (TR3), so the attempt is superseded (`Ok`); any
/// other index is out of range.
pub(super) fn trimmed(session: &SessionState, session_id: &str, index: u64) -> Result<()> {
    if rules::lifecycle::is_trimmed(session.first_index(), index) {
        return Ok(());
    }
    Err(rules::read::out_of_range(
        session_id,
        index,
        session.frontier(),
    ))
}

impl super::MemoryStore {
    /// Runs `write` under the store lock on the session holding event
    /// `index` (CN4, RV1: an unknown session or index is out of range, a
    /// trimmed one `Trimmed`), with the set of sessions that have pending
    /// work and the store time.
    pub(super) fn on_event<T>(
        &self,
        session_id: &str,
        index: u64,
        write: impl FnOnce(&mut SessionState, &mut BTreeSet<Arc<str>>, Millis) -> Result<T>,
    ) -> Result<T> {
        let mut guard = self.inner.lock_for(session_id)?;
        let now = self.now();
        let super::State {
            sessions, pending, ..
        } = &mut *guard;
        let Some(session) = sessions.get_mut(session_id) else {
            return Err(rules::read::no_event(session_id, index, 1, 0));
        };
        if session.record(index).is_none() {
            let (first, frontier) = (session.first_index(), session.frontier());
            return Err(rules::read::no_event(session_id, index, first, frontier));
        }
        write(session, pending, now)
    }
}
