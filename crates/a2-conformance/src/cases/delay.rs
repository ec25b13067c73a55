//! SPEC §12 delayed events: DL1, DL2, DL3.

use std::time::Duration;

use a2_core::{AppendClaim, CancelOutcome, ClaimOutcome, ErrorCode, Lease, NewEvent};

use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

/// 100 years in ms: X2's bound.
const CENTURY_MS: u64 = 3_153_600_000_000;

/// DL1, DL3: a delayed event is appended at once (index, id, read) with
/// its due time as `retry_at`; a claim before the due time is `Busy` with
/// it, and from the due time on the event is claimed as attempt 1. A
/// `not_before` works the same way as a `delay_ms`.
pub async fn dl1_a_delayed_event_is_appended_at_once_and_claimable_at_its_due_time(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let rows = append(
        s,
        "s",
        vec![
            ev("later").delay(Duration::from_millis(1_000)),
            ev("at").not_before(START_MS + 2_000),
        ],
    )
    .await;
    assert_eq!(indexes(&rows), vec![1, 2], "DL1: appended at once");
    assert_eq!(rows[0].retry_at, Some(START_MS + 1_000), "DL1: due time");
    assert_eq!(rows[1].retry_at, Some(START_MS + 2_000), "DL1: not_before");
    assert_eq!(rows, read_all(s, "s").await, "DL1: the rows as stored");
    assert_eq!(
        rows[0].state(),
        a2_core::EventState::Delayed,
        "DL1: delayed"
    );
    assert_eq!(counters(s, "s").await.1, 2, "DL1: pending");
    fx.clock.advance(999);
    assert_eq!(
        claim(fx.peer.as_ref(), "s", "w", TTL, 10).await,
        ClaimOutcome::Busy {
            retry_at: START_MS + 1_000
        },
        "DL3: Busy until the due time"
    );
    fx.clock.advance(1);
    let got = claimed(fx.peer.as_ref(), "s", "w", TTL, 10).await;
    assert_eq!(
        claims_of(&got),
        [at(1, 1)],
        "DL1: claimable at its due time"
    );
    assert_eq!(got[0].retry_at, None, "DL1: the claim consumed the wait");
    assert_eq!(
        claim(s, "s", "w", TTL, 10).await,
        ClaimOutcome::Busy {
            retry_at: START_MS + 2_000
        }
    );
    fx.clock.advance(1_000);
    assert_eq!(claims_of(&claimed(s, "s", "w", TTL, 10).await), [at(2, 1)]);
}

/// DL1: a due time at or before store now is ready at once; both fields, a
/// delayed settled event, a delay over 100 years or a `not_before` more
/// than 100 years ahead is `InvalidArgument`, nothing written.
pub async fn dl1_bad_delays_are_refused_and_a_past_not_before_is_ready_at_once(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    let before = world(s, &["s", "new"]).await;
    let mut both = ev("x").delay(Duration::from_millis(5));
    both.not_before = Some(START_MS + 10);
    let bad: Vec<(&str, NewEvent)> = vec![
        ("both fields", both),
        ("settled", ev("x").settled().delay(Duration::from_millis(5))),
        (
            "delay over 100 years",
            ev("x").delay(Duration::from_millis(CENTURY_MS + 1)),
        ),
        (
            "not_before over 100 years ahead",
            ev("x").not_before(START_MS + CENTURY_MS as i64 + 1),
        ),
    ];
    for (what, event) in bad {
        for session in ["s", "new"] {
            expect_code(
                s.append(session, vec![ev("ok"), event.clone()]).await,
                ErrorCode::InvalidArgument,
                what,
            );
        }
    }
    assert_eq!(
        world(s, &["s", "new"]).await,
        before,
        "DL1: nothing written"
    );
    let rows = append(
        s,
        "s",
        vec![
            ev("past").not_before(START_MS - 5),
            ev("now").not_before(START_MS),
            ev("zero").delay(Duration::ZERO),
            ev("edge").delay(Duration::from_millis(CENTURY_MS)),
        ],
    )
    .await;
    let due: Vec<_> = rows.iter().map(|r| r.retry_at).collect();
    assert_eq!(
        due,
        vec![None, None, None, Some(START_MS + CENTURY_MS as i64)],
        "DL1: past and present due times are ready at once"
    );
    let got = claimed(s, "s", "w", TTL, 10).await;
    assert_eq!(indexes(&got), vec![1, 2, 3, 4], "DL1: ready at once");
}

/// DL2: a delayed lane event heads its lane until it settles: later events
/// of the lane wait behind it however early they are due, while lane-less
/// and other lanes' events go ahead.
pub async fn dl2_a_delayed_lane_head_holds_its_lane(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(
        s,
        "s",
        vec![
            ev("a").lane("L").delay(Duration::from_millis(500)),
            ev("b").lane("L"),
            ev("c"),
            ev("d").lane("M"),
            // Behind a ready head: waits for the head, then for its own time.
            ev("e").lane("M").delay(Duration::from_millis(100)),
        ],
    )
    .await;
    let got = claimed(s, "s", "w", TTL, 10).await;
    assert_eq!(indexes(&got), vec![3, 4], "DL2: the delayed head holds L");
    completed(s, "s", 3, 1, vec![]).await;
    completed(s, "s", 4, 1, vec![]).await;
    assert_eq!(
        claim(s, "s", "w", TTL, 10).await,
        ClaimOutcome::Busy {
            retry_at: START_MS + 100
        },
        "DL2: M's next head waits for its own time"
    );
    fx.clock.advance(100);
    assert_eq!(indexes(&claimed(s, "s", "w", TTL, 10).await), vec![5]);
    fx.clock.advance(400);
    let got = claimed(s, "s", "w", TTL, 10).await;
    assert_eq!(indexes(&got), vec![1], "DL2: the head at its time, alone");
    completed(s, "s", 1, 1, vec![]).await;
    assert_eq!(indexes(&claimed(s, "s", "w", TTL, 10).await), vec![2]);
}

/// DL3: `append_and_claim` leaves delayed events to a later claim; events
/// returned by a completion may be delayed; cancelling a delayed event
/// withdraws it (CN1), and a fork keeps due times (FK2).
pub async fn dl3_delays_with_append_and_claim_completions_cancels_and_forks(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let out = s
        .append_and_claim(
            "s",
            vec![ev("now"), ev("later").delay(Duration::from_millis(50))],
            AppendClaim::new("w", Lease::Ttl(TTL), 10),
        )
        .await
        .unwrap();
    assert_eq!(
        out.claimed,
        vec![1],
        "DL3: the delayed event is not claimed"
    );
    let returned = completed(
        s,
        "s",
        1,
        1,
        vec![ev("follow-up").delay(Duration::from_millis(30))],
    )
    .await;
    assert_eq!(
        returned[0].retry_at,
        Some(START_MS + 30),
        "DL3: returned and delayed"
    );
    s.fork("s", 3, "f").await.unwrap();
    assert_eq!(
        row(s, "f", 3).await.retry_at,
        Some(START_MS + 30),
        "DL3: a fork keeps the due time"
    );
    match s
        .cancel("s", 2, Some("no longer needed".into()))
        .await
        .unwrap()
    {
        CancelOutcome::Cancelled(row) => assert_eq!(row.retry_at, None, "CN1: withdrawn"),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert_eq!(
        claim(s, "s", "w", TTL, 10).await,
        ClaimOutcome::Busy {
            retry_at: START_MS + 30
        }
    );
    fx.clock.advance(100);
    assert_eq!(
        indexes(&claimed(s, "s", "w", TTL, 10).await),
        vec![3],
        "DL3: the cancelled delayed event never runs"
    );
    assert_eq!(indexes(&claimed(s, "f", "w", TTL, 10).await), vec![2, 3]);
}
