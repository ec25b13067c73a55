//! `fail_attempt` (F1, F2, F3, F4, F5, F6): the decisions are
//! [`rules::fail`]'s.

use super::super::*;
use crate::rules::fail::Failure;

impl MemoryStore {
    pub(in crate::memory) fn fail_sync(&self, request: FailRequest) -> Result<FailOutcome> {
        validate::fail_request(&request)?;
        let mut guard = self.inner.lock()?;
        let now = self.now();
        let State {
            sessions, pending, ..
        } = &mut *guard;
        let index = request.index;
        // F1.
        let session = super::worked_session(sessions, &request.session, index)?;
        let Some(record) = session.record(index) else {
            super::trimmed(session, &request.session, index)?;
            return Ok(FailOutcome {
                outcome: FailKind::Superseded,
                failure_count: 0,
            });
        };
        let decision = rules::fail::decide(&record, request.attempt, request.max_failures);
        let stored = record.failure_count;
        if let Failure::Record {
            failure_count,
            dead,
        } = decision
        {
            // F6.
            session.fail(
                index,
                request.attempt,
                request.error,
                (failure_count, dead),
                request.retry_at,
                now,
            );
            let _ = sync_pending(pending, session);
        }
        Ok(decision.outcome(stored))
    }
}
