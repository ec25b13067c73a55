//! SPEC §3 `release_claims`: RL1.

use a2_core::{Claim, ClaimOutcome, ReleaseRequest, Store};

use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

async fn release(store: &dyn Store, holder: &str, claims: Vec<Claim>) -> Vec<u64> {
    let request = ReleaseRequest {
        session: "s".into(),
        holder: holder.into(),
        claims,
    };
    match store.release_claims(request).await {
        Ok(released) => released,
        Err(err) => panic!("release_claims failed: {err}"),
    }
}

/// RL1: releasing ends the holder's lease at once: another worker claims the
/// event without waiting, as a new attempt; the released attempt stays
/// counted.
pub async fn rl1_release_ends_the_lease_at_once(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 3).await;
    claimed(s, "s", "w", TTL, 3).await;
    let released = release(fx.peer.as_ref(), "w", vec![at(3, 1), at(1, 1)]).await;
    assert_eq!(released, [1, 3], "RL1: the released indexes, ascending");
    let r = row(s, "s", 1).await;
    assert_eq!(r.attempt_count, 1, "RL1: the attempt stays counted");
    assert!(r.is_pending());
    let next = claimed(s, "s", "v", TTL, 10).await;
    assert_eq!(
        claims_of(&next),
        [at(1, 2), at(3, 2)],
        "RL1: claimable at once, as new attempts"
    );
    assert_eq!(next[0].claim_holder.as_deref(), Some("v"));
    assert_eq!(next[0].claim_expires_at, Some(START_MS + TTL as i64));
    assert_eq!(
        row(s, "s", 2).await.claim_holder.as_deref(),
        Some("w"),
        "RL1: 2 was not released"
    );
}

/// RL1: only this holder's unexpired leases of the named attempts are
/// released; others are left alone and not listed.
pub async fn rl1_only_this_holders_unexpired_leases_are_released(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 4).await;
    claimed(s, "s", "w", 100, 1).await; // 1: expires
    claimed(s, "s", "other", TTL, 1).await; // 2: another holder
    claimed(s, "s", "w", TTL, 1).await; // 3: completed
    completed(s, "s", 3, 1, vec![]).await;
    claimed(s, "s", "w", TTL, 1).await; // 4: held, but the request names attempt 2
    fx.clock.advance(200);
    let before = world(s, &["s"]).await;
    let released = release(s, "w", vec![at(1, 1), at(2, 1), at(3, 1), at(4, 2)]).await;
    assert!(
        released.is_empty(),
        "RL1: nothing of this holder's live leases named: {released:?}"
    );
    assert_eq!(world(s, &["s"]).await, before, "RL1: nothing written");
    assert!(
        matches!(claim(s, "s", "x", TTL, 10).await, ClaimOutcome::Claimed { events: rows, .. } if indexes(&rows) == [1])
    );
}
