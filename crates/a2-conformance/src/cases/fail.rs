//! SPEC §3 `fail_attempt`: F1, F2, F3, F4, F5, F6.

use a2_core::{ClaimOutcome, ErrorCode, FailKind};

use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

/// F1: an index outside 1…frontier is `InvalidArgument`; nothing written.
pub async fn f1_index_outside_the_log_is_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    claimed(s, "s", "w", TTL, 2).await;
    let before = world(s, &["s", "empty"]).await;
    fx.clock.advance(1);
    for index in [0, 3, 1_000] {
        expect_code(
            fail(s, "s", index, 1, 3, None).await,
            ErrorCode::InvalidArgument,
            "F1",
        );
    }
    expect_code(
        fail(s, "empty", 1, 1, 3, None).await,
        ErrorCode::InvalidArgument,
        "F1: unknown session",
    );
    assert_eq!(
        world(s, &["s", "empty"]).await,
        before,
        "F1: nothing written"
    );
}

/// F2: a processed event, or an attempt that is not the current one →
/// `Superseded`; nothing written.
pub async fn f2_processed_or_stale_attempt_is_superseded(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 3).await;
    claimed(s, "s", "w", TTL, 1).await;
    completed(s, "s", 1, 1, vec![]).await;
    claimed(s, "s", "w", 100, 1).await;
    fx.clock.advance(200);
    claimed(s, "s", "w", TTL, 1).await; // 2 at attempt 2
    append(s, "s", vec![ev("settled").settled()]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    for (what, index, attempt) in [
        ("processed", 1, 1),
        ("older attempt", 2, 1),
        ("attempt not handed out", 2, 3),
    ] {
        let out = failed(s, "s", index, attempt, 1, None).await;
        assert_eq!(out.outcome, FailKind::Superseded, "F2: {what}");
    }
    let out = failed(s, "s", 4, 1, 1, None).await;
    assert_eq!(out.outcome, FailKind::Superseded, "F2/F5: a settled event");
    assert_eq!(world(s, &["s"]).await, before, "F2: nothing written");
}

/// F3: failing a dead-lettered event again → `DeadLettered`, count unchanged.
pub async fn f3_dead_lettered_event_stays_dead_lettered(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w", TTL, 1).await;
    let out = failed(s, "s", 1, 1, 1, None).await;
    assert_eq!(
        (out.outcome, out.failure_count),
        (FailKind::DeadLettered, 1)
    );
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let out = failed(fx.peer.as_ref(), "s", 1, 1, 1, None).await;
    assert_eq!(
        (out.outcome, out.failure_count),
        (FailKind::DeadLettered, 1),
        "F3: idempotent"
    );
    let out = failed(s, "s", 1, 1, 5, Some(START_MS)).await;
    assert_eq!(
        (out.outcome, out.failure_count),
        (FailKind::DeadLettered, 1),
        "F3: whatever max_failures"
    );
    assert_eq!(world(s, &["s"]).await, before, "F3: nothing written");
}

/// F4: the same failure again → `Failed` with the count unchanged.
pub async fn f4_same_failure_again_keeps_the_count(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w", TTL, 1).await;
    let out = failed(s, "s", 1, 1, 3, None).await;
    assert_eq!((out.outcome, out.failure_count), (FailKind::Failed, 1));
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let out = failed(s, "s", 1, 1, 3, None).await;
    assert_eq!(
        (out.outcome, out.failure_count),
        (FailKind::Failed, 1),
        "F4"
    );
    let out = failed(s, "s", 1, 1, 1, None).await;
    assert_eq!(
        (out.outcome, out.failure_count),
        (FailKind::Failed, 1),
        "F4: a repeat does not dead-letter"
    );
    assert_eq!(world(s, &["s"]).await, before, "F4: nothing written");
}

/// F5: an event never claimed → `Superseded`; nothing written.
pub async fn f5_never_claimed_is_superseded(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let out = failed(s, "s", 1, 1, 1, None).await;
    assert_eq!(
        (out.outcome, out.failure_count),
        (FailKind::Superseded, 0),
        "F5"
    );
    assert_eq!(world(s, &["s"]).await, before, "F5: nothing written");
}

/// F6: a failure counts, records the error, time and attempt, clears the
/// lease; below `max_failures` the event is ready again at once; reaching it
/// dead-letters the event (`failed_at`), never claimable again.
pub async fn f6_failure_is_recorded_and_retried_at_once(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w", TTL, 1).await;
    fx.clock.advance(10);
    let out = failed(s, "s", 1, 1, 2, None).await;
    assert_eq!(
        (out.outcome, out.failure_count),
        (FailKind::Failed, 1),
        "F6"
    );
    let r = row(s, "s", 1).await;
    assert_eq!(r.failure_count, 1);
    assert_eq!(r.last_error.as_deref(), Some("attempt 1 of 1 failed"));
    assert_eq!(r.last_failed_at, Some(START_MS + 10));
    assert_eq!(r.last_failed_attempt, Some(1));
    assert_eq!(
        (r.claim_holder.as_deref(), r.claim_expires_at),
        (None, None),
        "F6: lease cleared"
    );
    assert_eq!(r.failed_at, None);
    assert!(r.is_pending());
    let again = claimed(s, "s", "v", TTL, 1).await;
    assert_eq!(claims_of(&again), [at(1, 2)], "F6: ready again at once");
    fx.clock.advance(10);
    let out = failed(s, "s", 1, 2, 2, None).await;
    assert_eq!(
        (out.outcome, out.failure_count),
        (FailKind::DeadLettered, 2),
        "F6: max_failures reached"
    );
    let r = row(s, "s", 1).await;
    assert_eq!(r.failed_at, Some(START_MS + 20), "F6: failed_at = now");
    assert_eq!(r.last_failed_attempt, Some(2));
    assert_eq!(r.last_error.as_deref(), Some("attempt 2 of 1 failed"));
    assert!(!r.is_pending());
    fx.clock.advance(1_000_000);
    assert_eq!(
        claim(s, "s", "w", TTL, 1).await,
        ClaimOutcome::Settled,
        "F6: never claimable again"
    );
}

/// F6, C3: with `retry_at`, the event is claimable only from then.
pub async fn f6_retry_at_delays_the_next_claim(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    claimed(s, "s", "w", TTL, 1).await;
    let retry_at = START_MS + 1_000;
    let out = failed(s, "s", 1, 1, 3, Some(retry_at)).await;
    assert_eq!(out.outcome, FailKind::Failed);
    assert_eq!(
        row(s, "s", 1).await.retry_at,
        Some(retry_at),
        "F6: retry_at stored"
    );
    let other = claimed(s, "s", "w", TTL, 5).await;
    assert_eq!(indexes(&other), [2], "F6: 1 waits for its retry time");
    assert_eq!(
        claim(s, "s", "w", TTL, 5).await,
        ClaimOutcome::Busy {
            retry_at: START_MS + 1_000
        }
    );
    fx.clock.advance(1_001);
    assert_eq!(claims_of(&claimed(s, "s", "w", TTL, 5).await), [at(1, 2)]);
    // A retry time already past makes the event ready at once.
    let past = START_MS + 1_001 - 500;
    assert_eq!(
        failed(s, "s", 1, 2, 3, Some(past)).await.outcome,
        FailKind::Failed
    );
    assert_eq!(
        claims_of(&claimed(s, "s", "w", TTL, 5).await),
        [at(1, 3)],
        "F6: retry_at in the past"
    );
}

/// F6: a dead-lettered event blocks the rest of its lane, and only its lane.
pub async fn f6_dead_letter_blocks_its_lane_only(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(
        s,
        "s",
        vec![
            ev("a").lane("l"),
            ev("b").lane("l"),
            ev("c").lane("m"),
            ev("d"),
        ],
    )
    .await;
    let first = claimed(s, "s", "w", TTL, 10).await;
    assert_eq!(indexes(&first), [1, 3, 4]);
    assert_eq!(
        failed(s, "s", 1, 1, 1, None).await.outcome,
        FailKind::DeadLettered
    );
    completed(s, "s", 3, 1, vec![ev("e").lane("m"), ev("f").lane("l")]).await;
    let next = claimed(s, "s", "w", TTL, 10).await;
    assert_eq!(
        indexes(&next),
        [5],
        "F6: lane m moves on; lane l (2 and 6) is blocked"
    );
}
