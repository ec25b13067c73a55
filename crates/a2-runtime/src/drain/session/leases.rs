//! What a drain does with the leases it holds: renewing them, handing
//! them back at shutdown, and stopping the attempts whose events were
//! cancelled (RT3, RT6, RT17).

use a2_core::{Claim, Lease, RenewRequest};

use super::*;

impl Drain {
    /// RT17: `attempt` of `index` was cancelled. A running handler is told
    /// and dropped after the grace period; a waiting event is forgotten.
    /// Returns whether this drain held it.
    pub(super) fn cancelled(&mut self, index: u64, attempt: u32) -> bool {
        if let Some(r) = self.running.get(&index).filter(|r| r.attempt == attempt) {
            r.stop.cancelled(self.app.options.cancel_grace);
            return true;
        }
        let before = self.waiting.len();
        self.waiting
            .retain(|(e, _)| !(e.event.index == index && e.attempt_count == attempt));
        if self.waiting.len() < before {
            Counters::add(&self.app.counters.cancelled, 1);
            self.places_freed();
            return true;
        }
        false
    }

    /// The leases this drain holds: running attempts and waiting events,
    /// ascending by index.
    pub(super) fn claims(&self) -> Vec<Claim> {
        let mut claims: Vec<Claim> = self
            .running
            .iter()
            .map(|(&index, r)| Claim {
                index,
                attempt: r.attempt,
            })
            .chain(self.waiting.iter().map(|(e, _)| Claim {
                index: e.event.index,
                attempt: e.attempt_count,
            }))
            .collect();
        claims.sort_by_key(|c| c.index);
        claims
    }

    /// Renews every running lease; cancels the attempts whose lease is gone.
    pub(super) async fn renew(&mut self) {
        let inner: &Shared = &self.app;
        let claims = self.claims();
        let request = RenewRequest {
            session: self.session.clone(),
            holder: inner.options.holder.clone(),
            claims: claims.clone(),
            lease: Lease::Ttl(millis(inner.options.lease_ttl).max(1)),
        };
        match inner.store.renew_claims(request).await {
            Ok(outcome) => {
                for claim in claims {
                    if outcome.renewed.binary_search(&claim.index).is_err() {
                        // Superseded, expired, or already finished: in every
                        // case this attempt may no longer write its result.
                        if let Some(r) = self.running.get(&claim.index) {
                            r.stop.drop.cancel();
                        }
                    }
                }
                // A waiting event whose lease is gone is no longer ours to run.
                self.waiting
                    .retain(|(e, _)| outcome.renewed.binary_search(&e.event.index).is_ok());
                self.places_freed();
            }
            Err(error) => {
                Counters::add(&inner.counters.store_errors, 1);
                tracing::warn!(session = %self.session, %error, "lease renewal failed");
            }
        }
    }

    /// Shutdown past its deadline: the attempts are cancelled (their tokens
    /// are children of `abort`); hand their leases back at once (RL1).
    pub(super) async fn release(&mut self) {
        let claims = self.claims();
        self.waiting.clear();
        self.places_freed();
        release_leases(&self.app, &self.session, claims).await;
    }
}
