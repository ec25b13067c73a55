//! `release_claims` (RL1): the decision is [`rules::release`]'s.

use super::super::*;

impl MemoryStore {
    pub(in crate::memory) fn release_sync(&self, request: ReleaseRequest) -> Result<Vec<u64>> {
        validate::release_request(&request)?;
        let mut state = self.inner.lock()?;
        let now = self.now();
        let Some(session) = state.sessions.get_mut(request.session.as_str()) else {
            return Ok(Vec::new());
        };
        let mut released = BTreeSet::new();
        for claim in &request.claims {
            let Some(record) = session.record(claim.index) else {
                continue;
            };
            if rules::release::releases(&record, claim.attempt, &request.holder, now) {
                session.release(claim.index);
                released.insert(claim.index);
            }
        }
        // PS2: released events are claimable at once; workers of other
        // processes waiting for the leases' expiry look now.
        if !released.is_empty() && self.inner.wakeups.receiver_count() > 0 {
            let _ = self.inner.wakeups.send(session.id.clone());
        }
        Ok(released.into_iter().collect())
    }
}
