//! SPEC §12 `cancel`: CN1, CN2, CN3, CN4, CN5.

use std::time::Duration;

use a2_core::{
    CancelOutcome, Claim, ClaimOutcome, CompleteOutcome, ErrorCode, FailKind, Lease,
    ReleaseRequest, RenewRequest, Store, StoredEvent,
};
use futures::StreamExt;

use crate::support::*;
use crate::{SetupFn, fixture};

async fn cancelled(store: &dyn Store, session: &str, index: u64, reason: &str) -> StoredEvent {
    match store.cancel(session, index, Some(reason.to_owned())).await {
        Ok(CancelOutcome::Cancelled(row)) => row,
        other => panic!("expected Cancelled for {session:?} {index}, got {other:?}"),
    }
}

/// CN1: a pending event is settled as cancelled at store now, with its
/// reason, no lease and no retry time; its lane moves on at once and the
/// counters follow (pending − 1, I1); `updated_at` moves (EX1).
pub async fn cn1_cancel_settles_a_pending_event_and_its_lane_moves_on(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a").lane("L"), ev("b").lane("L"), ev("c")]).await;
    assert_eq!(counters(s, "s").await.1, 3);
    fx.clock.advance(7);
    let now = a2_core::Clock::now_ms(fx.clock.as_ref());
    let row = cancelled(fx.peer.as_ref(), "s", 1, "the user pressed stop").await;
    assert_eq!(row, self::row(s, "s", 1).await, "CN1: the row as stored");
    assert_eq!(
        (row.cancelled_at, row.processed_at, row.processed_by_attempt),
        (Some(now), Some(now), None),
        "CN1: cancelled now, settled now, by no attempt"
    );
    assert_eq!(row.cancel_reason.as_deref(), Some("the user pressed stop"));
    assert!(!row.is_pending(), "CN1: no longer pending");
    assert_eq!(row.state(), a2_core::EventState::Cancelled);
    assert_eq!(counters(s, "s").await.1, 2, "CN1: pending − 1");
    assert_eq!(
        summary(s, "s").await.updated_at,
        now,
        "CN1: a cancel is activity"
    );
    // The lane's next event is ready at once, beside the lane-less one.
    let rows = claimed(s, "s", "w", TTL, 10).await;
    assert_eq!(indexes(&rows), vec![2, 3], "CN1: the lane moved on");
}

/// CN1: a dead letter can be cancelled too (an operator gives up on it):
/// it is no longer dead-lettered (`failed_at` cleared, dead-lettered − 1),
/// its failures stay as history, and the lane it blocked moves on.
pub async fn cn1_cancelling_a_dead_letter_unblocks_its_lane(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a").lane("L"), ev("b").lane("L")]).await;
    claimed(s, "s", "w", TTL, 1).await;
    let out = failed(s, "s", 1, 1, 1, None).await;
    assert_eq!(out.outcome, FailKind::DeadLettered);
    assert_eq!(claim(s, "s", "w", TTL, 10).await, ClaimOutcome::Settled);
    assert_eq!(counters(s, "s").await, (2, 1, 1, 1, 1));
    fx.clock.advance(3);
    let row = cancelled(s, "s", 1, "given up").await;
    assert_eq!(row.failed_at, None, "CN1: no longer dead-lettered");
    assert_eq!(
        (
            row.failure_count,
            row.last_error.is_some(),
            row.attempt_count
        ),
        (1, true, 1),
        "CN1: failures and attempts stay as history"
    );
    assert_eq!(
        counters(s, "s").await,
        (2, 1, 0, 1, 1),
        "CN1: dead-lettered − 1"
    );
    let rows = claimed(s, "s", "w", TTL, 10).await;
    assert_eq!(indexes(&rows), vec![2], "CN1: the lane moved on");
}

/// CN2: a cancel supersedes the leased attempt at once: its completion and
/// failure are `Superseded`, a renewal lists it as superseded, a release
/// does not list it, and a progress append naming it is
/// `SupersededAttempt`; nothing of the attempt is recorded.
pub async fn cn2_a_cancelled_attempt_is_superseded_at_once(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    let rows = claimed(s, "s", "w", TTL, 2).await;
    assert_eq!(rows[0].attempt_count, 1);
    fx.clock.advance(5);
    cancelled(fx.peer.as_ref(), "s", 1, "stop").await;
    cancelled(fx.peer.as_ref(), "s", 2, "stop").await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(5);
    let renewed = s
        .renew_claims(RenewRequest {
            session: "s".into(),
            holder: "w".into(),
            claims: vec![at(1, 1), at(2, 1)],
            lease: Lease::Ttl(TTL),
        })
        .await
        .unwrap();
    assert_eq!(
        (renewed.renewed, renewed.superseded),
        (vec![], vec![1, 2]),
        "CN2: renewals list cancelled attempts as superseded"
    );
    assert_eq!(
        complete(s, "s", 1, 1, vec![ev("reply")]).await.unwrap(),
        CompleteOutcome::Superseded,
        "CN2: completion"
    );
    assert_eq!(
        fail(s, "s", 2, 1, 5, None).await.unwrap().outcome,
        FailKind::Superseded,
        "CN2: failure"
    );
    let released = s
        .release_claims(ReleaseRequest {
            session: "s".into(),
            holder: "w".into(),
            claims: vec![Claim {
                index: 1,
                attempt: 1,
            }],
        })
        .await
        .unwrap();
    assert!(released.is_empty(), "CN2: nothing to release");
    expect_code(
        s.append(
            "s",
            vec![ev("progress").caused_by(a2_core::Cause::new(1, 1))],
        )
        .await,
        ErrorCode::SupersededAttempt,
        "CN2: progress of a cancelled attempt",
    );
    assert_eq!(world(s, &["s"]).await, before, "CN2: nothing recorded");
}

/// CN3: an event settled already (processed, settled at append, cancelled)
/// is `NotPending` with its row as stored, nothing written; a second
/// cancel of one event is `NotPending`.
pub async fn cn3_cancelling_a_settled_event_writes_nothing(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a"), ev("b").settled(), ev("c")]).await;
    let rows = claimed(s, "s", "w", TTL, 1).await;
    completed(s, "s", 1, rows[0].attempt_count, vec![]).await;
    cancelled(s, "s", 3, "first").await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(9);
    for index in [1, 2, 3] {
        match s.cancel("s", index, Some("again".into())).await {
            Ok(CancelOutcome::NotPending(row)) => {
                assert_eq!(
                    row,
                    self::row(s, "s", index).await,
                    "CN3: the row as stored"
                );
            }
            other => panic!("CN3: expected NotPending for {index}, got {other:?}"),
        }
    }
    let row = self::row(s, "s", 3).await;
    assert_eq!(
        row.cancel_reason.as_deref(),
        Some("first"),
        "CN3: the first cancel stands"
    );
    assert_eq!(world(s, &["s"]).await, before, "CN3: nothing written");
}

/// CN4: an index outside 1…frontier, an unknown session, an empty session
/// id or a reason over 1 024 bytes is `InvalidArgument`; a trimmed index
/// is `Trimmed`; nothing written. A reason of exactly 1 024 bytes is kept.
pub async fn cn4_bad_cancels_are_refused_and_write_nothing(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a").settled(), ev("b"), ev("c")]).await;
    s.trim("s", 1).await.unwrap();
    let before = world(s, &["s", "unknown"]).await;
    fx.clock.advance(1);
    for index in [0, 4, u64::MAX] {
        expect_code(
            s.cancel("s", index, None).await,
            ErrorCode::InvalidArgument,
            "CN4",
        );
    }
    expect_code(
        s.cancel("unknown", 1, None).await,
        ErrorCode::InvalidArgument,
        "CN4: unknown session",
    );
    expect_code(
        s.cancel("", 1, None).await,
        ErrorCode::InvalidArgument,
        "CN4: empty id",
    );
    expect_code(
        s.cancel("s", 2, Some("x".repeat(1025))).await,
        ErrorCode::InvalidArgument,
        "CN4: reason over 1 024 bytes",
    );
    expect_code(
        s.cancel("s", 1, None).await,
        ErrorCode::Trimmed,
        "CN4: trimmed",
    );
    assert_eq!(
        world(s, &["s", "unknown"]).await,
        before,
        "CN4: nothing written"
    );
    let row = cancelled(s, "s", 2, &"r".repeat(1024)).await;
    assert_eq!(row.cancel_reason.map(|r| r.len()), Some(1024));
    // An absent or empty reason is none.
    match s.cancel("s", 3, Some(String::new())).await.unwrap() {
        CancelOutcome::Cancelled(row) => assert_eq!(row.cancel_reason, None, "CN1"),
        other => panic!("CN1: expected Cancelled, got {other:?}"),
    }
}

/// CN5: `cancellations()` on one handle, live once the call returned,
/// hears the very first cancel of a leased attempt made through the other,
/// with session, index and attempt; a cancel of an event nobody holds is
/// not announced. A store without push yields nothing.
pub async fn cn5_cancels_of_leased_attempts_reach_other_instances(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let mut stream = live_cancellations(fx.peer.as_ref()).await;
    append_n(s, "s", 60).await;
    if !fx.caps.cancellations {
        claimed(s, "s", "w", TTL, 1).await;
        cancelled(s, "s", 1, "stop").await;
        let heard = tokio::time::timeout(Duration::from_millis(200), stream.next()).await;
        assert!(heard.is_err(), "CN5: a store without push yields nothing");
        return;
    }
    // Live when the call returned: the first cancel is heard, with no try
    // before it.
    let rows = claimed(s, "s", "w", TTL, 1).await;
    assert_eq!(rows[0].event.index, 1);
    cancelled(s, "s", 1, "stop").await;
    let cancel = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("CN5: the first cancel after the subscription is heard")
        .expect("CN5: the stream goes on")
        .expect("CN5: a cancel, not an error");
    assert_eq!(
        (cancel.session.as_str(), cancel.index, cancel.attempt),
        ("s", 1, 1),
        "CN5: the cancelled attempt"
    );
    // A pending event nobody holds is cancelled without an announcement,
    // and the next leased one is heard.
    cancelled(s, "s", 60, "not leased").await;
    let rows = claimed(s, "s", "w", TTL, 1).await;
    let next = rows[0].event.index;
    cancelled(s, "s", next, "stop").await;
    let cancel = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("CN5: the cancel is heard")
        .expect("CN5: the stream goes on")
        .expect("CN5: a cancel, not an error");
    assert_eq!(
        (cancel.session.as_str(), cancel.index, cancel.attempt),
        ("s", next, 1),
        "CN5: only leased attempts are announced"
    );
}
