//! `renew_claims` (RN1, RN2, RN3): the decisions are [`rules::renew`]'s.

use super::super::*;
use crate::rules::renew::Renewal;

impl MemoryStore {
    pub(in crate::memory) fn renew_sync(&self, request: RenewRequest) -> Result<RenewOutcome> {
        validate::renew_request(&request)?;
        let mut state = self.inner.lock()?;
        let now = self.now();
        let expires_at = request.lease.expires_at(now);
        let Some(session) = state.sessions.get_mut(request.session.as_str()) else {
            return Ok(RenewOutcome::default());
        };
        let mut renewed = BTreeSet::new();
        let mut superseded = BTreeSet::new();
        for claim in &request.claims {
            let Some(record) = session.record(claim.index) else {
                continue;
            };
            match rules::renew::decide(&record, claim.attempt, &request.holder, now, expires_at) {
                Renewal::Superseded => {
                    superseded.insert(claim.index);
                }
                Renewal::Renew => {
                    session.renew(claim.index, expires_at);
                    renewed.insert(claim.index);
                }
                Renewal::Neither => {}
            }
        }
        Ok(RenewOutcome {
            renewed: renewed.into_iter().collect(),
            superseded: superseded.into_iter().collect(),
        })
    }
}
