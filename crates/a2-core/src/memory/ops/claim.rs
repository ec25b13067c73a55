//! `claim_available` (C1, C2, C3, C4, C5, C6).

use super::super::*;

impl MemoryStore {
    pub(in crate::memory) fn claim_sync(&self, request: ClaimRequest) -> Result<ClaimOutcome> {
        validate::claim_request(&request)?;
        let mut guard = self.inner.lock()?;
        let now = self.now();
        let expires_at = validate::claim_expiry(request.lease, now)?;
        let State {
            sessions, pending, ..
        } = &mut *guard;
        let Some(session) = sessions.get_mut(request.session.as_str()) else {
            return Ok(ClaimOutcome::Settled);
        };
        let exclude: HashSet<u64> = request.exclude_indexes.iter().copied().collect();
        let limit = validate::effective_limit(request.limit);
        let outcome = session.claim(now, &request.holder, expires_at, &exclude, limit);
        let _ = sync_pending(pending, session);
        outcome
    }
}
