//! SPEC §3 `renew_claims`: RN1, RN2, RN3.

use a2_core::{Claim, Lease, RenewOutcome, RenewRequest, Store};

use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

async fn renew(store: &dyn Store, holder: &str, claims: Vec<Claim>, lease: Lease) -> RenewOutcome {
    let request = RenewRequest {
        session: "s".into(),
        holder: holder.into(),
        claims,
        lease,
    };
    match store.renew_claims(request).await {
        Ok(out) => out,
        Err(err) => panic!("renew_claims failed: {err}"),
    }
}

/// RN1: a claim whose event has a newer attempt is `superseded`; its lease
/// (the newer holder's) does not move.
pub async fn rn1_newer_attempt_is_superseded(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w1", 100, 1).await;
    fx.clock.advance(200);
    claimed(s, "s", "w2", 1_000, 1).await;
    let out = renew(s, "w1", vec![at(1, 1)], Lease::Ttl(5_000)).await;
    assert_eq!(
        out,
        RenewOutcome {
            renewed: vec![],
            superseded: vec![1]
        },
        "RN1"
    );
    assert_eq!(
        row(s, "s", 1).await.claim_expires_at,
        Some(START_MS + 1_200)
    );
    let out = renew(s, "w2", vec![at(1, 1)], Lease::Ttl(5_000)).await;
    assert_eq!(out.superseded, [1], "RN1: whoever asks");
}

/// RN2: the holder's unexpired lease on a pending event moves to the new
/// expiry (ttl from now, or an absolute time).
pub async fn rn2_renew_moves_the_expiry(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    claimed(s, "s", "w", 1_000, 2).await;
    fx.clock.advance(900);
    let out = renew(
        fx.peer.as_ref(),
        "w",
        vec![at(1, 1), at(2, 1)],
        Lease::Ttl(1_000),
    )
    .await;
    assert_eq!(
        out,
        RenewOutcome {
            renewed: vec![1, 2],
            superseded: vec![]
        },
        "RN2"
    );
    let rows = read_all(s, "s").await;
    assert!(
        rows.iter()
            .all(|r| r.claim_expires_at == Some(START_MS + 1_900)),
        "RN2: the expiry moved"
    );
    assert!(
        rows.iter()
            .all(|r| r.attempt_count == 1 && r.claim_holder.as_deref() == Some("w"))
    );
    fx.clock.advance(500);
    assert!(
        matches!(
            claim(s, "s", "x", TTL, 5).await,
            a2_core::ClaimOutcome::Busy { .. }
        ),
        "RN2: still leased"
    );
    let out = renew(s, "w", vec![at(2, 1)], Lease::ExpiresAt(START_MS + 9_000)).await;
    assert_eq!(out.renewed, [2]);
    assert_eq!(
        row(s, "s", 2).await.claim_expires_at,
        Some(START_MS + 9_000)
    );
}

/// RN2: a new expiry that is not in the future renews nothing.
pub async fn rn2_expiry_in_the_past_is_not_renewed(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w", 1_000, 1).await;
    fx.clock.advance(100);
    let out = renew(s, "w", vec![at(1, 1)], Lease::ExpiresAt(START_MS + 50)).await;
    assert_eq!(
        out,
        RenewOutcome::default(),
        "RN2: the new expiry must be in the future"
    );
    assert_eq!(
        row(s, "s", 1).await.claim_expires_at,
        Some(START_MS + 1_000)
    );
}

/// RN3: an expired lease, another holder's lease, a failed attempt and a
/// completed attempt are in neither list, and nothing moves.
pub async fn rn3_other_claims_are_in_neither_list(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 4).await;
    claimed(s, "s", "w", 100, 1).await; // 1: will expire
    claimed(s, "s", "other", TTL, 1).await; // 2: another holder
    claimed(s, "s", "w", TTL, 2).await; // 3 fails, 4 completes
    failed(s, "s", 3, 1, 5, None).await;
    completed(s, "s", 4, 1, vec![]).await;
    fx.clock.advance(150);
    let before = world(s, &["s"]).await;
    let out = renew(
        s,
        "w",
        vec![at(1, 1), at(2, 1), at(3, 1), at(4, 1)],
        Lease::Ttl(TTL),
    )
    .await;
    assert_eq!(
        out,
        RenewOutcome::default(),
        "RN3: neither renewed nor superseded"
    );
    assert_eq!(world(s, &["s"]).await, before, "RN3: nothing moved");
}

/// RN3: both lists ascend, whatever the order of the request.
pub async fn rn3_lists_ascend(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 6).await;
    claimed(s, "s", "w", 100, 6).await;
    fx.clock.advance(200);
    claimed(s, "s", "v", TTL, 3).await; // 1, 2, 3 at attempt 2
    // 4, 5, 6 are expired for w; w claims them again at attempt 2.
    let again = claimed(s, "s", "w", TTL, 3).await;
    assert_eq!(claims_of(&again), [at(4, 2), at(5, 2), at(6, 2)]);
    let out = renew(
        s,
        "w",
        vec![at(6, 2), at(3, 1), at(4, 2), at(1, 1), at(5, 2), at(2, 1)],
        Lease::Ttl(TTL),
    )
    .await;
    assert_eq!(
        out,
        RenewOutcome {
            renewed: vec![4, 5, 6],
            superseded: vec![1, 2, 3]
        },
        "RN3: ascending"
    );
}
