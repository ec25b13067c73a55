//! `set_expiry` (EX1, EX2), `close_session` (CL1, CL4) and `trim` (TR1,
//! TR2): the decisions are [`rules::lifecycle`]'s.

use super::super::*;

impl MemoryStore {
    pub(in crate::memory) fn set_expiry_sync(
        &self,
        session_id: &str,
        expiry: Expiry,
    ) -> Result<ExpiryOutcome> {
        let mut state = self.inner.lock_for(session_id)?;
        let now = self.now();
        let expiry = validate::session_expiry(expiry, now)?;
        let Some(session) = state.sessions.get_mut(session_id) else {
            return Err(rules::lifecycle::no_session(session_id));
        };
        // EX1: setting it is activity.
        session.touch(now);
        state.set_expiry(session_id, Some(expiry));
        let deadline = state
            .sessions
            .get(session_id)
            .and_then(SessionState::deadline);
        Ok(ExpiryOutcome { deadline })
    }

    pub(in crate::memory) fn close_session_sync(&self, session_id: &str) -> Result<CloseOutcome> {
        let mut guard = self.inner.lock_for(session_id)?;
        let now = self.now();
        let State {
            sessions, feeds, ..
        } = &mut *guard;
        let session = sessions.get_mut(session_id);
        let frontier = session.as_ref().map_or(0, |s| s.frontier());
        let closed = session.as_ref().and_then(|s| s.closed);
        let outcome = rules::lifecycle::close(session_id, frontier, closed, now)?;
        let mut wake = FeedWake::default();
        if let (
            CloseOutcome::Closed {
                frontier,
                closed_at,
            },
            Some(session),
        ) = (outcome, session)
        {
            session.closed = Some((frontier, closed_at));
            session.touch(now);
            // CL4: the feeds read again, find the log final and end.
            wake = FeedWake::of(feeds, session);
        }
        drop(guard);
        wake.send();
        Ok(outcome)
    }

    pub(in crate::memory) fn trim_sync(
        &self,
        session_id: &str,
        through: u64,
    ) -> Result<TrimOutcome> {
        let mut guard = self.inner.lock_for(session_id)?;
        let now = self.now();
        let Some(session) = guard.sessions.get_mut(session_id) else {
            rules::lifecycle::trim_range(session_id, 0, 1, through)?;
            return Ok(TrimOutcome { first_index: 1 });
        };
        let first = session.first_index();
        let Some((from, last)) =
            rules::lifecycle::trim_range(session_id, session.frontier(), first, through)?
        else {
            return Ok(TrimOutcome { first_index: first });
        };
        // TR2: every event of the range is checked before any goes.
        for index in from..=last {
            let record = session
                .record(index)
                .ok_or_else(|| rules::read::missing(session_id, index))?;
            rules::lifecycle::check_trimmable(session_id, index, &record)?;
        }
        session.trim(last);
        session.touch(now);
        Ok(TrimOutcome {
            first_index: session.first_index(),
        })
    }
}
