//! `cancel` (CN1, CN2, CN3, CN4, CN5): the decision is [`rules::cancel`]'s.

use super::super::*;
use crate::rules::cancel::Cancel;

impl MemoryStore {
    pub(in crate::memory) fn cancel_sync(
        &self,
        request: CancelRequest<'_>,
    ) -> Result<CancelOutcome> {
        let CancelRequest {
            session: session_id,
            index,
            reason,
        } = request;
        // CN4.
        self.on_event(session_id, index, |session, pending, now| {
            let Some(record) = session.record(index) else {
                return Err(rules::read::missing(session_id, index));
            };
            let decision = rules::cancel::decide(&record);
            if !decision.writes() {
                return Ok(CancelOutcome::NotPending(rec_row(session, index)?));
            }
            let running = rules::cancel::running_attempt(&record);
            session.cancel(index, reason, decision == Cancel::DeadLetter, now);
            let row = rec_row(session, index)?;
            let _ = sync_pending(pending, session);
            // The lane moved on: workers that found nothing claimable there
            // look again (PS2).
            if session.has_pending() && self.inner.wakeups.receiver_count() > 0 {
                let _ = self.inner.wakeups.send(session.id.clone());
            }
            // CN5: the worker running the attempt stops it.
            if let Some(attempt) = running
                && self.inner.cancels.receiver_count() > 0
            {
                let _ = self.inner.cancels.send(Cancellation {
                    session: session_id.to_owned(),
                    index,
                    attempt,
                });
            }
            Ok(CancelOutcome::Cancelled(row))
        })
    }
}
