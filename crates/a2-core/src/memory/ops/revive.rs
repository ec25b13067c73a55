//! `revive` (RV1, RV2, RV3): the decision is [`rules::revive`]'s.

use super::super::*;

impl MemoryStore {
    pub(in crate::memory) fn revive_sync(
        &self,
        session_id: &str,
        index: u64,
    ) -> Result<ReviveOutcome> {
        // RV1.
        self.on_event(session_id, index, |session, pending, now| {
            let Some(record) = session.record(index) else {
                return Err(rules::read::missing(session_id, index));
            };
            // RV2; RV3 when it is not dead-lettered.
            if !rules::revive::revives(&record) {
                return Ok(ReviveOutcome::NotDeadLettered(rec_row(session, index)?));
            }
            session.revive(index, now);
            let row = rec_row(session, index)?;
            let _ = sync_pending(pending, session);
            // Announced even when other pending events kept the count above
            // zero: those wait behind this dead letter, and workers that found
            // nothing claimable there (C4) must look again (RV2).
            if self.inner.wakeups.receiver_count() > 0 {
                let _ = self.inner.wakeups.send(session.id.clone());
            }
            Ok(ReviveOutcome::Revived(row))
        })
    }
}
