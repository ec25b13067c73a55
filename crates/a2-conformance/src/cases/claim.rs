//! SPEC §3 `claim_available`: C1, C2, C3, C4, C5, C7 (C6, atomicity, is in
//! [`super::races`]).

use std::time::Duration;

use a2_core::{ClaimOutcome, ClaimRequest, FailKind, Lease, Millis, ReleaseRequest, Store};

use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

/// C1: no pending event → `Settled`: an unknown session, only settled
/// events, everything processed.
pub async fn c1_nothing_pending_is_settled(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    assert_eq!(
        claim(s, "nobody", "w", TTL, 5).await,
        ClaimOutcome::Settled,
        "C1: unknown session"
    );
    append(s, "s", vec![ev("a").settled()]).await;
    assert_eq!(
        claim(s, "s", "w", TTL, 5).await,
        ClaimOutcome::Settled,
        "C1: only settled events"
    );
    append(s, "s", vec![ev("b")]).await;
    let rows = claimed(s, "s", "w", TTL, 5).await;
    completed(s, "s", rows[0].event.index, 1, vec![]).await;
    assert_eq!(
        claim(s, "s", "w", TTL, 5).await,
        ClaimOutcome::Settled,
        "C1: all processed"
    );
}

/// C2: claims ready events in index order up to `limit`, setting the attempt,
/// claim times, holder and expiry; the stored rows agree.
pub async fn c2_claims_ready_events_in_index_order_up_to_limit(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 5).await;
    fx.clock.advance(10);
    let now = START_MS + 10;
    let first = claimed(s, "s", "w1", 1_000, 2).await;
    assert_eq!(indexes(&first), [1, 2], "C2: index order, up to limit");
    for row in &first {
        assert_eq!(row.attempt_count, 1, "C2: first attempt");
        assert_eq!(row.first_claimed_at, Some(now));
        assert_eq!(row.last_claimed_at, Some(now));
        assert_eq!(row.claim_holder.as_deref(), Some("w1"));
        assert_eq!(row.claim_expires_at, Some(now + 1_000), "C2: now + ttl");
    }
    let stored = read_all(s, "s").await;
    assert_eq!(stored[..2].to_vec(), first, "C2: read shows the claim");
    assert!(
        stored[2..]
            .iter()
            .all(|r| r.attempt_count == 0 && r.claim_holder.is_none())
    );
    let rest = claimed(fx.peer.as_ref(), "s", "w2", 1_000, 10).await;
    assert_eq!(indexes(&rest), [3, 4, 5], "C2: leased events are skipped");
    assert!(rest.iter().all(|r| r.claim_holder.as_deref() == Some("w2")));
}

/// C2: a lease given as an absolute expiry is stored as is.
pub async fn c2_lease_with_absolute_expiry(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    let request = ClaimRequest {
        session: "s".into(),
        holder: "w".into(),
        lease: Lease::ExpiresAt(START_MS + 12_345),
        exclude_indexes: vec![],
        limit: 1,
    };
    let out = s
        .claim_available(request)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ClaimOutcome::Claimed { events: rows, .. } = out else {
        panic!("expected Claimed, got {out:?}")
    };
    assert_eq!(
        rows[0].claim_expires_at,
        Some(START_MS + 12_345),
        "C2: expires_at"
    );
    assert_eq!(
        row(s, "s", 1).await.claim_expires_at,
        Some(START_MS + 12_345)
    );
}

/// C2, C5: `first_claimed_at` is set once; a later claim moves
/// `last_claimed_at` and counts a new attempt.
pub async fn c2_first_claimed_at_is_set_once(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w1", 100, 1).await;
    fx.clock.advance(500);
    let again = claimed(s, "s", "w2", 100, 1).await;
    assert_eq!(again[0].attempt_count, 2, "C2: attempt_count += 1");
    assert_eq!(again[0].first_claimed_at, Some(START_MS), "C2: set once");
    assert_eq!(again[0].last_claimed_at, Some(START_MS + 500));
    assert_eq!(again[0].claim_holder.as_deref(), Some("w2"));
    assert_eq!(again[0].claim_expires_at, Some(START_MS + 600));
}

/// C2: excluded indexes are not claimed.
pub async fn c2_excluded_indexes_are_not_claimed(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 4).await;
    let mut request = claim_request("s", "w", TTL, 10);
    request.exclude_indexes = vec![1, 3];
    let out = s
        .claim_available(request)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ClaimOutcome::Claimed { events: rows, .. } = out else {
        panic!("expected Claimed, got {out:?}")
    };
    assert_eq!(indexes(&rows), [2, 4], "C2: not excluded");
    assert_eq!(row(s, "s", 1).await.attempt_count, 0);
}

/// C2: events that became ready again (released, or excluded from an
/// earlier claim) and events appended since are claimed together, in index
/// order, whatever path made each one ready.
pub async fn c2_ready_again_and_new_events_are_claimed_in_index_order(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 3).await;
    let mut request = claim_request("s", "w", TTL, 10);
    request.exclude_indexes = vec![1];
    let out = s
        .claim_available(request)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ClaimOutcome::Claimed { events: first, .. } = out else {
        panic!("expected Claimed, got {out:?}")
    };
    assert_eq!(indexes(&first), [2, 3]);
    let released = s
        .release_claims(ReleaseRequest {
            session: "s".into(),
            holder: "w".into(),
            claims: claims_of(&first[..1]),
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(released, [2]);
    append_n(s, "s", 3).await;
    let mut request = claim_request("s", "w", TTL, 3);
    request.exclude_indexes = vec![4];
    let out = s
        .claim_available(request)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ClaimOutcome::Claimed { events: second, .. } = out else {
        panic!("expected Claimed, got {out:?}")
    };
    assert_eq!(
        indexes(&second),
        [1, 2, 5],
        "C2: index order across ready paths"
    );
    assert_eq!(indexes(&claimed(s, "s", "w", TTL, 10).await), [4, 6]);
    assert_eq!(
        claim(s, "s", "w", TTL, 10).await,
        ClaimOutcome::Busy {
            retry_at: START_MS + TTL as i64,
        },
        "C3: all leased"
    );
}

/// C3: nothing claimable but ready events leased → `Busy` with the earliest
/// lease expiry; after it, the event is claimable.
pub async fn c3_busy_reports_the_earliest_lease_expiry(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(
        s,
        "s",
        vec![ev("a"), ev("b"), ev("c").lane("l"), ev("d").lane("l")],
    )
    .await;
    assert_eq!(indexes(&claimed(s, "s", "w", 3_000, 1).await), [1]);
    assert_eq!(indexes(&claimed(s, "s", "w", 2_000, 1).await), [2]);
    assert_eq!(indexes(&claimed(s, "s", "w", 5_000, 1).await), [3]);
    let busy = claim(s, "s", "other", TTL, 10).await;
    assert_eq!(
        busy,
        ClaimOutcome::Busy {
            retry_at: START_MS + 2_000
        },
        "C3: earliest expiry"
    );
    fx.clock.advance(2_001);
    let rows = claimed(s, "s", "other", TTL, 10).await;
    assert_eq!(
        claims_of(&rows),
        [at(2, 2)],
        "C3: claimable after the expiry"
    );
}

/// C3, F6: an event waiting for its retry time makes the claim `Busy` until
/// then.
pub async fn c3_busy_reports_the_retry_time(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w", TTL, 1).await;
    let retry_at = START_MS + 5_000;
    let out = failed(s, "s", 1, 1, 5, Some(retry_at)).await;
    assert_eq!(out.outcome, FailKind::Failed);
    assert_eq!(
        claim(s, "s", "w", TTL, 1).await,
        ClaimOutcome::Busy { retry_at },
        "C3: the retry time"
    );
    fx.clock.advance(4_999);
    assert_eq!(
        claim(s, "s", "w", TTL, 1).await,
        ClaimOutcome::Busy { retry_at }
    );
    fx.clock.advance(2);
    assert_eq!(claims_of(&claimed(s, "s", "w", TTL, 1).await), [at(1, 2)]);
}

/// C4, F6: when all that is pending waits behind a dead-lettered lane head,
/// the claim is `Settled`.
pub async fn c4_settled_when_pending_events_wait_behind_a_dead_letter(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a").lane("l"), ev("b").lane("l")]).await;
    claimed(s, "s", "w", TTL, 1).await;
    assert_eq!(
        failed(s, "s", 1, 1, 1, None).await.outcome,
        FailKind::DeadLettered
    );
    assert_eq!(
        claim(s, "s", "w", TTL, 10).await,
        ClaimOutcome::Settled,
        "C4: blocked lane"
    );
    fx.clock.advance(1_000_000);
    assert_eq!(
        claim(s, "s", "w", TTL, 10).await,
        ClaimOutcome::Settled,
        "C4: blocked for good"
    );
    assert!(
        row(s, "s", 2).await.is_pending(),
        "C4: the blocked event is still pending"
    );
}

/// C4: when every ready, unleased event is excluded, the claim is `Settled`.
pub async fn c4_settled_when_every_ready_event_is_excluded(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a"), ev("b").lane("l"), ev("c").lane("l")]).await;
    let mut request = claim_request("s", "w", TTL, 10);
    request.exclude_indexes = vec![1, 2];
    let out = s
        .claim_available(request)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out, ClaimOutcome::Settled, "C4: excluded");
    assert!(read_all(s, "s").await.iter().all(|r| r.attempt_count == 0));
}

/// C5: an expired lease can be claimed by anyone; the older attempt is then
/// superseded (CO5, RN1).
pub async fn c5_expired_lease_can_be_claimed_by_anyone(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w1", 1_000, 1).await;
    fx.clock.advance(999);
    assert_eq!(
        claim(s, "s", "w2", TTL, 1).await,
        ClaimOutcome::Busy {
            retry_at: START_MS + 1_000
        }
    );
    fx.clock.advance(2);
    let rows = claimed(fx.peer.as_ref(), "s", "w2", TTL, 1).await;
    assert_eq!(claims_of(&rows), [at(1, 2)], "C5: a new attempt");
    assert_eq!(rows[0].claim_holder.as_deref(), Some("w2"));
    let late = complete(s, "s", 1, 1, vec![])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        late,
        a2_core::CompleteOutcome::Superseded,
        "C5: the old attempt is superseded"
    );
    completed(s, "s", 1, 2, vec![]).await;
}

/// A claim with `exclude`, which must hand out events: their (index,
/// attempt) pairs and the claim's `next_at` (C7).
async fn claim_next(
    store: &dyn Store,
    holder: &str,
    ttl: u64,
    exclude: &[u64],
) -> (Vec<a2_core::Claim>, Option<Millis>) {
    let mut request = claim_request("s", holder, ttl, 10);
    request.exclude_indexes = exclude.to_vec();
    match store.claim_available(request).await {
        Ok(ClaimOutcome::Claimed { events, next_at }) => (claims_of(&events), next_at),
        other => panic!("expected Claimed, got {other:?}"),
    }
}

/// C7: a claim that hands out events names the earliest lease expiry or
/// due time among the other ready events, leaving out the excluded ones
/// and those it handed out, or none; lane followers, which are not ready,
/// do not count.
pub async fn c7_a_claim_names_when_the_next_waiting_event_comes_due(setup: SetupFn) {
    let fx = fixture(setup).await;
    let (s, peer) = (fx.store.as_ref(), fx.peer.as_ref());
    append(
        s,
        "s",
        vec![
            ev("a"),
            ev("b").delay(Duration::from_millis(1_000)),
            ev("c").delay(Duration::from_millis(500)),
            ev("d").lane("l"),
            ev("e").lane("l").delay(Duration::from_millis(200)),
        ],
    )
    .await;
    // 1 and 4 are claimable; 2 and 3 wait for their times; 5 waits behind 4.
    let mut request = claim_request("s", "w", 20_000, 1);
    request.exclude_indexes = vec![4];
    match s.claim_available(request).await {
        Ok(ClaimOutcome::Claimed { events, next_at }) => {
            assert_eq!(claims_of(&events), [at(1, 1)], "C2");
            assert_eq!(next_at, Some(START_MS + 500), "C7: the earliest due time");
        }
        other => panic!("expected Claimed, got {other:?}"),
    }
    assert_eq!(
        claim_next(peer, "v", 10_000, &[]).await,
        (vec![at(4, 1)], Some(START_MS + 500)),
        "C7: the same from another instance; a lane follower does not count"
    );
    fx.clock.advance(500);
    assert_eq!(
        claim_next(s, "w", 10_000, &[]).await,
        (vec![at(3, 1)], Some(START_MS + 1_000)),
        "C7: the next due time, not the events just leased"
    );
    fx.clock.advance(500);
    assert_eq!(
        claim_next(peer, "w", 10_000, &[4]).await,
        (vec![at(2, 1)], Some(START_MS + 10_500)),
        "C7: the earliest lease not excluded (3's; 4's is excluded)"
    );
    completed(s, "s", 4, 1, vec![]).await;
    fx.clock.advance(200);
    assert_eq!(
        claim_next(s, "w", 10_000, &[1, 3]).await,
        (vec![at(5, 1)], Some(START_MS + 11_000)),
        "C7: a lane head come due is claimed; 2's lease comes next"
    );
    assert_eq!(
        claim(s, "s", "w", 10_000, 10).await,
        ClaimOutcome::Busy {
            retry_at: START_MS + 10_500
        },
        "C3 agrees"
    );
    append(s, "alone", vec![ev("x")]).await;
    match claim(peer, "alone", "w", TTL, 10).await {
        ClaimOutcome::Claimed { events, next_at } => {
            assert_eq!(claims_of(&events), [at(1, 1)]);
            assert_eq!(next_at, None, "C7: nothing else waits");
        }
        other => panic!("expected Claimed, got {other:?}"),
    }
}
