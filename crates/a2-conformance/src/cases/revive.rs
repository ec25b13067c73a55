//! SPEC §3 `revive`: RV1, RV2, RV3.

use std::time::Duration;

use a2_core::{ClaimOutcome, CompleteOutcome, ErrorCode, FailKind, ReviveOutcome};
use futures::StreamExt;

use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

/// RV1: an index outside 1…frontier, an unknown session or an empty session
/// id is `InvalidArgument`; nothing written.
pub async fn rv1_index_outside_the_log_is_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    claimed(s, "s", "w", TTL, 1).await;
    failed(s, "s", 1, 1, 1, None).await;
    let before = world(s, &["s", "empty"]).await;
    fx.clock.advance(1);
    for index in [0, 3, 1_000, u64::MAX] {
        expect_code(
            revive(s, "s", index).await,
            ErrorCode::InvalidArgument,
            "RV1",
        );
    }
    expect_code(
        revive(s, "empty", 1).await,
        ErrorCode::InvalidArgument,
        "RV1: unknown session",
    );
    expect_code(
        revive(s, "", 1).await,
        ErrorCode::InvalidArgument,
        "RV1: empty session id",
    );
    assert_eq!(
        world(s, &["s", "empty"]).await,
        before,
        "RV1: nothing written"
    );
}

/// RV2: a revived dead letter is pending and ready at once, with
/// `failed_at` cleared and `failure_count` 0, so it gets `max_failures`
/// fresh tries; its attempt count keeps counting (the next claim is a new
/// attempt, the dead one stays superseded), its last error stays as
/// history, and the session's counters follow (I1).
pub async fn rv2_revived_dead_letter_is_claimable_with_a_fresh_failure_count(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    claimed(s, "s", "w", TTL, 1).await;
    failed(s, "s", 1, 1, 3, None).await;
    claimed(s, "s", "w", TTL, 1).await;
    fx.clock.advance(10);
    let out = failed(s, "s", 1, 2, 2, None).await;
    assert_eq!(out.outcome, FailKind::DeadLettered);
    assert_eq!(counters(s, "s").await, (2, 1, 1, 2, 2));
    fx.clock.advance(10);
    let row = revived(fx.peer.as_ref(), "s", 1).await;
    assert_eq!(row, self::row(s, "s", 1).await, "RV2: the row as stored");
    assert_eq!((row.failed_at, row.failure_count), (None, 0), "RV2");
    assert!(row.is_pending(), "RV2: pending again");
    assert_eq!(row.attempt_count, 2, "RV2: the attempts stay counted");
    assert_eq!(
        (
            row.claim_holder.as_deref(),
            row.claim_expires_at,
            row.retry_at
        ),
        (None, None, None),
        "RV2: no lease, no retry time"
    );
    assert_eq!(
        (row.last_failed_attempt, row.last_error.as_deref()),
        (Some(2), Some("attempt 2 of 1 failed")),
        "RV2: the last failure stays as history"
    );
    assert_eq!(
        counters(s, "s").await,
        (2, 2, 0, 2, 0),
        "RV2, I1: pending +1, failed -1, its failures gone"
    );
    // The dead attempt stays superseded.
    assert_eq!(
        complete(s, "s", 1, 2, vec![]).await.ok(),
        Some(CompleteOutcome::Superseded),
        "RV2, CO5: the dead attempt cannot complete"
    );
    let again = claimed(s, "s", "w", TTL, 1).await;
    assert_eq!(
        claims_of(&again),
        [at(1, 3)],
        "RV2: ready at once, a new attempt"
    );
    let out = failed(s, "s", 1, 3, 2, None).await;
    assert_eq!(
        (out.outcome, out.failure_count),
        (FailKind::Failed, 1),
        "RV2: the failures count from 0 again"
    );
    let again = claimed(s, "s", "w", TTL, 1).await;
    assert_eq!(claims_of(&again), [at(1, 4)]);
    completed(s, "s", 1, 4, vec![]).await;
    assert_eq!(counters(s, "s").await, (2, 1, 0, 4, 1));
}

/// RV2: a revived lane head moves its lane again, in index order: the
/// events behind it wait until it is processed; other lanes are untouched.
pub async fn rv2_revive_unblocks_the_lane_in_order(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(
        s,
        "s",
        vec![
            ev("a").lane("l"),
            ev("b").lane("l"),
            ev("c").lane("l"),
            ev("d").lane("m"),
        ],
    )
    .await;
    assert_eq!(indexes(&claimed(s, "s", "w", TTL, 10).await), [1, 4]);
    failed(s, "s", 1, 1, 1, None).await;
    completed(s, "s", 4, 1, vec![ev("e").lane("m")]).await;
    assert_eq!(indexes(&claimed(s, "s", "w", TTL, 10).await), [5]);
    completed(s, "s", 5, 1, vec![]).await;
    assert_eq!(
        claim(s, "s", "w", TTL, 10).await,
        ClaimOutcome::Settled,
        "C4: lane l waits behind its dead head"
    );
    revived(s, "s", 1).await;
    let first = claimed(s, "s", "w", TTL, 10).await;
    assert_eq!(
        claims_of(&first),
        [at(1, 2)],
        "RV2: the head first, its lane behind it"
    );
    completed(s, "s", 1, 2, vec![]).await;
    assert_eq!(indexes(&claimed(s, "s", "w", TTL, 10).await), [2]);
    completed(s, "s", 2, 1, vec![]).await;
    assert_eq!(indexes(&claimed(s, "s", "w", TTL, 10).await), [3]);
    completed(s, "s", 3, 1, vec![]).await;
    assert_eq!(claim(s, "s", "w", TTL, 10).await, ClaimOutcome::Settled);
    assert_eq!(counters(s, "s").await, (5, 0, 0, 6, 0));
}

/// RV3: an event that is not dead-lettered (never claimed, leased, failed
/// and waiting for its retry, processed, settled) is `NotDeadLettered`
/// with its row as stored; nothing written.
pub async fn rv3_events_that_are_not_dead_lettered_are_refused(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 4).await;
    append(s, "s", vec![ev("settled").settled()]).await;
    claimed(s, "s", "w", TTL, 3).await;
    completed(s, "s", 1, 1, vec![]).await;
    failed(s, "s", 2, 1, 3, Some(START_MS + 60_000)).await;
    // 1 processed, 2 failed and waiting, 3 leased, 4 never claimed, 5 settled.
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    for index in 1..=5 {
        match revive(s, "s", index).await {
            Ok(ReviveOutcome::NotDeadLettered(row)) => {
                assert_eq!(
                    row,
                    self::row(s, "s", index).await,
                    "RV3: the row as stored"
                );
            }
            other => panic!("RV3: event {index}: expected NotDeadLettered, got {other:?}"),
        }
    }
    assert_eq!(world(s, &["s"]).await, before, "RV3: nothing written");
}

/// RV3: a second revive of the same event (a retry whose reply was lost,
/// or another operator) is `NotDeadLettered` and writes nothing.
pub async fn rv3_reviving_twice_revives_once(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w", TTL, 1).await;
    failed(s, "s", 1, 1, 1, None).await;
    let row = revived(s, "s", 1).await;
    let after = world(s, &["s"]).await;
    fx.clock.advance(1);
    match revive(fx.peer.as_ref(), "s", 1).await {
        Ok(ReviveOutcome::NotDeadLettered(again)) => assert_eq!(again, row, "RV3"),
        other => panic!("RV3: expected NotDeadLettered, got {other:?}"),
    }
    assert_eq!(world(s, &["s"]).await, after, "RV3: nothing written");
    assert_eq!(counters(s, "s").await, (1, 1, 0, 1, 0));
}

/// RV2, PS1, PS2: a session whose only unsettled event is dead-lettered has
/// no pending work; reviving it lists the session again (through either
/// handle) and, on a store with push, wakes workers on the other handle. So
/// does reviving a dead head whose lane kept its session pending.
pub async fn rv2_revive_lists_the_session_and_wakes_workers(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "dead", 1).await;
    claimed(s, "dead", "w", TTL, 1).await;
    failed(s, "dead", 1, 1, 1, None).await;
    append(s, "blocked", vec![ev("a").lane("l"), ev("b").lane("l")]).await;
    claimed(s, "blocked", "w", TTL, 1).await;
    failed(s, "blocked", 1, 1, 1, None).await;
    assert_eq!(
        all_pending(s).await,
        ["blocked"],
        "PS1: a dead letter is no work; the event behind one is"
    );
    let mut wakeups = live_wakeups(fx.peer.as_ref()).await;
    revived(s, "dead", 1).await;
    revived(s, "blocked", 1).await;
    for handle in [fx.store.as_ref(), fx.peer.as_ref()] {
        let pending = all_pending(handle).await;
        for session in ["blocked", "dead"] {
            assert!(
                pending.contains(&session.to_owned()),
                "RV2, PS1: the revived session {session} is listed"
            );
        }
    }
    if fx.caps.pending_wakeups {
        let mut woken = Vec::new();
        while woken.len() < 2 {
            match next_item(&mut wakeups, "RV2, PS2: wake-ups for the revived sessions").await {
                Ok(session) if !session.starts_with("probe-") => woken.push(session),
                Ok(_) => {}
                Err(err) => panic!("PS2: the wake-up stream failed: {err}"),
            }
        }
        // Two partitions' channels may deliver in either order.
        woken.sort();
        assert_eq!(
            woken,
            ["blocked", "dead"],
            "RV2, PS2: each revive announced"
        );
    } else {
        let woken = tokio::time::timeout(Duration::from_millis(200), wakeups.next()).await;
        assert!(
            woken.is_err(),
            "PS2: a store without push yields no wake-up"
        );
    }
}
