//! SPEC §3 `complete_attempt`: CO1, CO2, CO3, CO4, CO5, CO6.

use a2_core::{Cause, ClaimOutcome, CompleteOutcome, ErrorCode, FailKind};

use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

/// CO1: an index outside 1…frontier is `InvalidArgument`; nothing written.
pub async fn co1_index_outside_the_log_is_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    claimed(s, "s", "w", TTL, 2).await;
    let before = world(s, &["s", "empty"]).await;
    fx.clock.advance(1);
    for index in [0, 3, 1_000] {
        expect_code(
            complete(s, "s", index, 1, vec![ev_id("r")]).await,
            ErrorCode::InvalidArgument,
            "CO1",
        );
    }
    expect_code(
        complete(s, "empty", 1, 1, vec![]).await,
        ErrorCode::InvalidArgument,
        "CO1: unknown session",
    );
    assert_eq!(
        world(s, &["s", "empty"]).await,
        before,
        "CO1: nothing written"
    );
}

/// CO2: completing the current attempt marks the event processed, clears
/// its lease, and appends the returned events (lanes and `settled` kept)
/// with `cause = {index, attempt}`, returning them.
pub async fn co2_completion_marks_processed_and_appends_returned_events(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w", TTL, 1).await;
    fx.clock.advance(70);
    let now = START_MS + 70;
    let returned = vec![ev_id("r1").lane("l"), ev_id("r2").settled(), ev("r3")];
    let rows = completed(fx.peer.as_ref(), "s", 1, 1, returned).await;
    assert_eq!(
        indexes(&rows),
        [2, 3, 4],
        "CO2: appended after the frontier"
    );
    let cause = Some(Cause {
        index: 1,
        attempt: 1,
        batch_size: None,
    });
    assert!(
        rows.iter()
            .all(|r| r.event.cause == cause && r.event.created_at == now),
        "CO2: cause"
    );
    assert_eq!(rows[0].event.id, "r1");
    assert_eq!(rows[0].event.lane.as_deref(), Some("l"));
    assert!(rows[0].is_pending());
    assert_eq!(
        rows[1].processed_at,
        Some(now),
        "A8: a returned settled event"
    );
    assert!(rows[2].is_pending());
    let stored = read_all(s, "s").await;
    assert_eq!(
        stored[1..].to_vec(),
        rows,
        "CO2: read shows the returned events"
    );
    let done = &stored[0];
    assert_eq!(done.processed_at, Some(now), "CO2: processed_at");
    assert_eq!(done.processed_by_attempt, Some(1));
    assert_eq!(
        done.returned_event_ids,
        vec!["r1".to_owned(), "r2".into(), rows[2].event.id.clone()]
    );
    assert_eq!(done.claim_holder, None, "CO2: lease cleared");
    assert_eq!(done.claim_expires_at, None, "CO2: lease cleared");
    assert!(!done.is_pending());
    let next = claimed(s, "s", "w", TTL, 10).await;
    assert_eq!(
        indexes(&next),
        [2, 4],
        "CO2: returned pending events are claimable"
    );
}

/// CO2: completing the lane head lets the next event of the lane become ready.
pub async fn co2_completion_lets_the_next_lane_event_become_ready(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a").lane("l"), ev("b").lane("l")]).await;
    claimed(s, "s", "w", TTL, 10).await;
    assert!(matches!(
        claim(s, "s", "w", TTL, 10).await,
        ClaimOutcome::Busy { .. }
    ));
    completed(s, "s", 1, 1, vec![ev("c").lane("l")]).await;
    assert_eq!(
        indexes(&claimed(s, "s", "w", TTL, 10).await),
        [2],
        "CO2: the lane moves on, in order"
    );
}

/// CO2: an expired lease still completes while no newer claim exists.
pub async fn co2_expired_lease_completes_while_no_newer_claim_exists(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w", 100, 1).await;
    fx.clock.advance(10_000);
    completed(s, "s", 1, 1, vec![]).await;
    let done = row(s, "s", 1).await;
    assert_eq!(done.processed_by_attempt, Some(1));
    assert_eq!(claim(s, "s", "w", TTL, 1).await, ClaimOutcome::Settled);
}

/// CO3: the same completion again returns the original rows and writes nothing.
pub async fn co3_same_completion_again_returns_original_rows(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    claimed(s, "s", "w", TTL, 2).await;
    let returned = vec![ev_id("r1"), ev_id("r2").lane("l")];
    let first = completed(s, "s", 1, 1, returned.clone()).await;
    let empty = completed(s, "s", 2, 1, vec![]).await;
    assert!(empty.is_empty());
    let before = world(s, &["s"]).await;
    fx.clock.advance(1_000);
    let again = completed(s, "s", 1, 1, returned.clone()).await;
    assert_eq!(again, first, "CO3: the original rows");
    let again = completed(fx.peer.as_ref(), "s", 1, 1, returned).await;
    assert_eq!(again, first, "CO3: through the peer");
    assert!(
        completed(s, "s", 2, 1, vec![]).await.is_empty(),
        "CO3: with no returned events"
    );
    assert_eq!(world(s, &["s"]).await, before, "CO3: nothing written");
}

/// CO4: an event processed by another attempt → `Superseded`.
pub async fn co4_processed_by_another_attempt_is_superseded(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w1", 100, 1).await;
    fx.clock.advance(200);
    claimed(s, "s", "w2", TTL, 1).await;
    completed(s, "s", 1, 2, vec![ev_id("by-2")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let late = complete(s, "s", 1, 1, vec![ev_id("by-1")])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(late, CompleteOutcome::Superseded, "CO4");
    let late = complete(s, "s", 1, 1, vec![ev_id("by-2")])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        late,
        CompleteOutcome::Superseded,
        "CO4: even with the same returned ids"
    );
    assert_eq!(world(s, &["s"]).await, before, "CO4: nothing written");
}

/// CO4: processed by this attempt with other returned ids →
/// `PartialDuplicateBatch`; nothing written.
pub async fn co4_same_attempt_with_other_returned_ids_is_partial_duplicate(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w", TTL, 1).await;
    completed(s, "s", 1, 1, vec![ev_id("r1"), ev_id("r2")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    for (what, events) in [
        ("other id", vec![ev_id("r1"), ev_id("r3")]),
        ("other order", vec![ev_id("r2"), ev_id("r1")]),
        ("fewer", vec![ev_id("r1")]),
        ("none", vec![]),
    ] {
        expect_code(
            complete(s, "s", 1, 1, events).await,
            ErrorCode::PartialDuplicateBatch,
            what,
        );
    }
    assert_eq!(world(s, &["s"]).await, before, "CO4: nothing written");
}

/// CO5: a newer attempt exists, this attempt failed, the event is
/// dead-lettered, or it was never claimed → `Superseded`; nothing written.
pub async fn co5_stale_failed_dead_or_unclaimed_attempt_is_superseded(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 4).await;
    // 1: attempt 1 superseded by attempt 2 (not yet finished).
    claimed(s, "s", "w", 100, 1).await;
    fx.clock.advance(200);
    claimed(s, "s", "w", TTL, 1).await;
    // 2: attempt 1 failed (will retry); 3: dead-lettered; 4: never claimed.
    let rows = claimed(s, "s", "w", TTL, 2).await;
    assert_eq!(claims_of(&rows), [at(2, 1), at(3, 1)]);
    assert_eq!(
        failed(s, "s", 2, 1, 5, None).await.outcome,
        FailKind::Failed
    );
    assert_eq!(
        failed(s, "s", 3, 1, 1, None).await.outcome,
        FailKind::DeadLettered
    );
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    for (what, index) in [
        ("newer attempt", 1),
        ("failed", 2),
        ("dead-lettered", 3),
        ("never claimed", 4),
    ] {
        let out = complete(s, "s", index, 1, vec![ev_id("late")])
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(out, CompleteOutcome::Superseded, "CO5: {what}");
    }
    assert_eq!(world(s, &["s"]).await, before, "CO5: nothing written");
}

/// CO6: a returned id that already exists in this session, or twice in the
/// returned batch → `PartialDuplicateBatch`; nothing written, and the
/// attempt can still complete. An id of another session is another event
/// (A4): returning it is fine.
pub async fn co6_returned_id_that_exists_is_partial_duplicate(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev_id("here")]).await;
    append(s, "t", vec![ev_id("there")]).await;
    claimed(s, "s", "w", TTL, 1).await;
    let before = world(s, &["s", "t"]).await;
    fx.clock.advance(1);
    for (what, events) in [
        ("this session", vec![ev_id("new"), ev_id("here")]),
        ("twice in the batch", vec![ev_id("new"), ev_id("new")]),
    ] {
        expect_code(
            complete(s, "s", 1, 1, events).await,
            ErrorCode::PartialDuplicateBatch,
            what,
        );
    }
    assert_eq!(world(s, &["s", "t"]).await, before, "CO6: nothing written");
    let rows = completed(s, "s", 1, 1, vec![ev_id("new"), ev_id("there")]).await;
    assert_eq!(
        indexes(&rows),
        [2, 3],
        "CO6: an id of another session is new here"
    );
}

/// CO6: returned events may not set `cause` (`InvalidArgument`); nothing
/// written.
pub async fn co6_returned_event_with_cause_is_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w", TTL, 1).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let with_cause = ev("r").caused_by(Cause {
        index: 1,
        attempt: 1,
        batch_size: None,
    });
    expect_code(
        complete(s, "s", 1, 1, vec![with_cause]).await,
        ErrorCode::InvalidArgument,
        "CO6",
    );
    assert_eq!(world(s, &["s"]).await, before, "CO6: nothing written");
}

/// B1, A7, CO2: a completion with a batch size gives its returned events the
/// cause `{index, attempt, batch_size}`; an append may carry such a cause
/// (progress of a batch); a batch size of 0 is `InvalidArgument`. Causes
/// without a batch size read back without one.
pub async fn b1_batch_size_is_carried_by_the_cause(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 3).await;
    let rows = claimed(s, "s", "w", TTL, 3).await;
    for row in &rows[..2] {
        completed(s, "s", row.event.index, row.attempt_count, vec![]).await;
    }
    let progress = ev("progress")
        .settled()
        .caused_by(Cause::new(3, 1).with_batch_size(3));
    let appended = append(s, "s", vec![progress]).await;
    assert_eq!(
        appended[0].event.cause,
        Some(Cause::new(3, 1).with_batch_size(3)),
        "B1: an appended cause keeps its batch size"
    );
    expect_code(
        s.append(
            "s",
            vec![ev("p").caused_by(Cause::new(3, 1).with_batch_size(0))],
        )
        .await,
        ErrorCode::InvalidArgument,
        "B1: batch size 0 on append",
    );
    let bad = s
        .complete_attempt(a2_core::CompleteRequest {
            session: "s".into(),
            index: 3,
            attempt: 1,
            events: vec![ev("reply")],
            batch_size: Some(0),
        })
        .await;
    expect_code(
        bad,
        ErrorCode::InvalidArgument,
        "B1: batch size 0 on complete",
    );
    let done = s
        .complete_attempt(a2_core::CompleteRequest {
            session: "s".into(),
            index: 3,
            attempt: 1,
            events: vec![ev("reply").settled()],
            batch_size: Some(3),
        })
        .await;
    let returned = match done {
        Ok(CompleteOutcome::Completed { events }) => events,
        other => panic!("B1: expected Completed, got {other:?}"),
    };
    let cause = Some(Cause::new(3, 1).with_batch_size(3));
    assert_eq!(
        returned[0].event.cause, cause,
        "B1: the returned event's cause"
    );
    let read = read_all(fx.peer.as_ref(), "s").await;
    assert_eq!(
        read[3].event.cause, appended[0].event.cause,
        "B1: read back (append)"
    );
    assert_eq!(read[4].event.cause, cause, "B1: read back (completion)");
    let single = append(s, "t", vec![ev("a")]).await;
    let claimed_t = claimed(s, "t", "w", TTL, 1).await;
    let plain = completed(
        s,
        "t",
        1,
        claimed_t[0].attempt_count,
        vec![ev("r").settled()],
    )
    .await;
    assert_eq!(single.len(), 1);
    assert_eq!(
        plain[0].event.cause,
        Some(Cause::new(1, 1)),
        "B1: no batch size when none was given"
    );
}
