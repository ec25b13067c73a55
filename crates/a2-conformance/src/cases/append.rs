//! SPEC §2 `append`: A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11 (the limits
//! of A12 are in [`super::limits`]).

use a2_core::{Cause, ClaimOutcome, ErrorCode, NewEvent, SequentialIds, StoreOptions};
use serde_json::json;
use std::sync::Arc;

use crate::support::*;
use crate::{START_MS, SetupFn, fixture, fixture_with};

/// A1: a batch gets indexes frontier+1 … frontier+n, and the rows say what
/// was appended (id, type, payload, session, `created_at`).
pub async fn a1_batch_gets_dense_indexes_after_the_frontier(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let first = append(s, "s", vec![ev_id("a"), ev_id("b"), ev_id("c")]).await;
    assert_eq!(indexes(&first), [1, 2, 3]);
    fx.clock.advance(5);
    let second = append(s, "s", vec![ev_id("d"), ev_id("e")]).await;
    assert_eq!(indexes(&second), [4, 5]);
    for (row, id) in first.iter().chain(&second).zip(["a", "b", "c", "d", "e"]) {
        assert_eq!(row.event.id, id);
        assert_eq!(row.event.event_type, "test.event");
        assert_eq!(row.event.payload, json!({ "id": id }));
        assert_eq!(row.event.session_id, "s");
        assert_eq!(row.event.cause, None);
        assert_eq!(row.event.lane, None);
        assert_eq!(row.attempt_count, 0);
        assert_eq!(row.processed_at, None);
    }
    assert!(first.iter().all(|r| r.event.created_at == START_MS));
    assert!(second.iter().all(|r| r.event.created_at == START_MS + 5));
    let rows = read_all(s, "s").await;
    assert_eq!(
        rows,
        [first, second].concat(),
        "A1: read returns what append returned"
    );
}

/// A1, A7: a batch whose last event is bad (a cause naming a missing index)
/// writes none of its events; the next good batch continues at frontier+1.
pub async fn a1_a7_bad_event_late_in_batch_writes_nothing(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev_id("a")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let bad = vec![
        ev_id("b"),
        ev_id("c"),
        ev_id("d").caused_by(Cause {
            index: 9,
            attempt: 1,
            batch_size: None,
        }),
    ];
    expect_code(
        s.append("s", bad).await,
        ErrorCode::InvalidArgument,
        "A7 cause beyond the frontier",
    );
    assert_eq!(
        world(s, &["s"]).await,
        before,
        "A1: nothing of the batch is written"
    );
    let rows = append(s, "s", vec![ev_id("b"), ev_id("c")]).await;
    assert_eq!(
        indexes(&rows),
        [2, 3],
        "A1: the ids of the failed batch are free"
    );
}

/// A2: an empty batch writes nothing and returns `[]` with the session's
/// `has_pending`.
pub async fn a2_empty_batch_writes_nothing_and_reports_has_pending(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let before = world(s, &["s"]).await;
    let out = s
        .append("s", vec![])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.events.is_empty());
    assert!(!out.has_pending, "A2: a new session has nothing pending");
    assert_eq!(
        world(s, &["s"]).await,
        before,
        "A2: an empty batch does not create the session"
    );

    append(s, "s", vec![ev("x")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let out = s
        .append("s", vec![])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.events.is_empty());
    assert!(out.has_pending, "A2: the session has a pending event");
    assert_eq!(
        world(s, &["s"]).await,
        before,
        "A2: an empty batch writes nothing"
    );

    let rows = claimed(s, "s", "w", TTL, 10).await;
    completed(s, "s", 1, rows[0].attempt_count, vec![]).await;
    let out = s
        .append("s", vec![])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !out.has_pending,
        "A2: nothing pending after the only event is processed"
    );
}

/// A3: the same id twice in one batch is `PartialDuplicateBatch`; nothing written.
pub async fn a3_same_id_twice_in_batch_is_partial_duplicate(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev_id("a")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let batch = vec![ev_id("b"), ev_id("c"), ev_id("b")];
    expect_code(
        s.append("s", batch).await,
        ErrorCode::PartialDuplicateBatch,
        "A3",
    );
    assert_eq!(world(s, &["s"]).await, before, "A3: nothing written");
}

/// A4: an event id is unique within its session only. The same id in
/// another session names another event there: it is appended with that
/// session's next index, and each session reads back its own event; a
/// repeat in either session is a retry of that session's event (A5).
pub async fn a4_id_of_another_session_is_another_event(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "one", vec![ev_id("shared"), ev_id("mine")]).await;
    fx.clock.advance(1);
    let there = s
        .append("two", vec![NewEvent::new("other", json!(2)).id("shared")])
        .await
        .expect("A4: an id of another session is a new event");
    assert_eq!(indexes(&there.events), [1], "A4: the other session's index");
    let peer = fx
        .peer
        .append("three", vec![ev_id("mine"), ev_id("shared")])
        .await
        .expect("A4 through the peer");
    assert_eq!(indexes(&peer.events), [1, 2], "A4 through the peer");
    let one = read_all(s, "one").await;
    let two = read_all(s, "two").await;
    assert_eq!(one[0].event.id, "shared");
    assert_eq!(two[0].event.id, "shared");
    assert_eq!(
        two[0].event.event_type, "other",
        "A4: each session its own event"
    );
    assert_eq!(two[0].event.payload, json!(2));
    let retry = s
        .append("two", vec![NewEvent::new("other", json!(2)).id("shared")])
        .await
        .expect("A5 in the other session");
    assert_eq!(retry.events, two, "A5: a retry returns that session's row");
    assert_eq!(
        read_all(s, "one").await,
        one,
        "A4: the first session unchanged"
    );
}

/// A5: a batch whose ids all exist in this session (a retry whose
/// acknowledgement was lost) writes nothing and returns the original rows.
pub async fn a5_retry_returns_original_rows(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let batch = vec![ev_id("a"), ev_id("b").lane("l"), ev_id("c").settled()];
    let first = s
        .append("s", batch.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let before = world(s, &["s"]).await;
    fx.clock.advance(1_000);
    let retry = s
        .append("s", batch.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(retry.events, first.events, "A5: the original rows");
    assert!(
        retry.has_pending,
        "A10: the session still has pending events"
    );
    assert_eq!(world(s, &["s"]).await, before, "A5: nothing written");
    let again = fx
        .peer
        .append("s", batch)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.events, first.events, "A5: a retry through the peer");
    assert_eq!(world(s, &["s"]).await, before, "A5: nothing written");
}

/// A5: a retry of some of the ids, in another order, returns their rows in
/// index order, as stored now.
pub async fn a5_retry_of_a_subset_returns_rows_in_index_order(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev_id("a"), ev_id("b"), ev_id("c")]).await;
    let rows = claimed(s, "s", "w", TTL, 1).await;
    completed(s, "s", 1, rows[0].attempt_count, vec![]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let retry = s
        .append("s", vec![ev_id("c"), ev_id("a")])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let stored = read_all(s, "s").await;
    assert_eq!(
        retry.events,
        vec![stored[0].clone(), stored[2].clone()],
        "A5: rows in index order"
    );
    assert!(
        retry.events[0].processed_at.is_some(),
        "A5: the stored row, with its processing record"
    );
    assert_eq!(world(s, &["s"]).await, before, "A5: nothing written");
}

/// A5: a retry whose type or payload differs from the stored event is
/// `PartialDuplicateBatch`; nothing written.
pub async fn a5_retry_with_other_type_or_payload_is_partial_duplicate(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev_id("a"), ev_id("b")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let other_payload = NewEvent::new("test.event", json!({ "id": "changed" })).id("b");
    expect_code(
        s.append("s", vec![ev_id("a"), other_payload]).await,
        ErrorCode::PartialDuplicateBatch,
        "A5 other payload",
    );
    let other_type = NewEvent::new("other.type", json!({ "id": "a" })).id("a");
    expect_code(
        s.append("s", vec![other_type]).await,
        ErrorCode::PartialDuplicateBatch,
        "A5 other type",
    );
    assert_eq!(world(s, &["s"]).await, before, "A5: nothing written");
}

/// A6: some ids exist and some do not: `PartialDuplicateBatch`; nothing written.
pub async fn a6_some_ids_existing_is_partial_duplicate(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev_id("a"), ev_id("b")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    expect_code(
        s.append("s", vec![ev_id("a"), ev_id("new")]).await,
        ErrorCode::PartialDuplicateBatch,
        "A6 first",
    );
    expect_code(
        s.append("s", vec![ev_id("new"), ev_id("b")]).await,
        ErrorCode::PartialDuplicateBatch,
        "A6 last",
    );
    expect_code(
        s.append("s", vec![ev_id("a"), ev("generated")]).await,
        ErrorCode::PartialDuplicateBatch,
        "A6 with a generated id",
    );
    // In long batches, where a store may write many rows at once: a known
    // id in the middle, or near the end, refuses the whole batch.
    for (at, label) in [(20, "A6 long, middle"), (37, "A6 long, near the end")] {
        let batch: Vec<NewEvent> = (0..40)
            .map(|n| {
                if n == at {
                    ev_id("b")
                } else {
                    ev_id(&format!("long-{n}"))
                }
            })
            .collect();
        expect_code(
            s.append("s", batch).await,
            ErrorCode::PartialDuplicateBatch,
            label,
        );
    }
    assert_eq!(world(s, &["s"]).await, before, "A6: nothing written");
    let rows = append(s, "s", vec![ev_id("new")]).await;
    assert_eq!(indexes(&rows), [3], "A6: the fresh id was not taken");
    let long: Vec<NewEvent> = (0..40).map(|n| ev_id(&format!("long-{n}"))).collect();
    let first = append(s, "s", long.clone()).await;
    assert_eq!(
        indexes(&first),
        (4..=43).collect::<Vec<u64>>(),
        "A6: long batch"
    );
    let again = append(s, "s", long).await;
    assert_eq!(again, first, "A5: a long batch's retry returns its rows");
}

/// A7: a cause must name an existing index of this session, else
/// `InvalidArgument`; nothing written.
pub async fn a7_cause_must_name_an_existing_index(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a")]).await;
    let rows = claimed(s, "s", "w", TTL, 1).await;
    assert_eq!(rows[0].attempt_count, 1);
    let before = world(s, &["s", "other"]).await;
    fx.clock.advance(1);
    let beyond = ev("p").caused_by(Cause {
        index: 2,
        attempt: 1,
        batch_size: None,
    });
    expect_code(
        s.append("s", vec![beyond]).await,
        ErrorCode::InvalidArgument,
        "A7 beyond the frontier",
    );
    let elsewhere = ev("p").caused_by(Cause {
        index: 1,
        attempt: 1,
        batch_size: None,
    });
    expect_code(
        s.append("other", vec![elsewhere]).await,
        ErrorCode::InvalidArgument,
        "A7 index of another session",
    );
    assert_eq!(
        world(s, &["s", "other"]).await,
        before,
        "A7: nothing written"
    );
}

/// A7: a cause whose attempt is not the event's latest is
/// `SupersededAttempt`; nothing written; the latest attempt may write.
pub async fn a7_cause_of_a_stale_attempt_is_superseded(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a"), ev("b")]).await;
    claimed(s, "s", "w1", 100, 1).await;
    fx.clock.advance(1_000);
    let second = claimed(s, "s", "w2", TTL, 1).await;
    assert_eq!(claims_of(&second), [at(1, 2)]);
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let stale = ev("progress").caused_by(Cause {
        index: 1,
        attempt: 1,
        batch_size: None,
    });
    expect_code(
        s.append("s", vec![stale]).await,
        ErrorCode::SupersededAttempt,
        "A7 older attempt",
    );
    let future = ev("progress").caused_by(Cause {
        index: 1,
        attempt: 3,
        batch_size: None,
    });
    expect_code(
        s.append("s", vec![future]).await,
        ErrorCode::SupersededAttempt,
        "A7 attempt not handed out",
    );
    let unclaimed = ev("progress").caused_by(Cause {
        index: 2,
        attempt: 1,
        batch_size: None,
    });
    expect_code(
        s.append("s", vec![unclaimed]).await,
        ErrorCode::SupersededAttempt,
        "A7 never claimed",
    );
    assert_eq!(world(s, &["s"]).await, before, "A7: nothing written");
    let current = append(
        s,
        "s",
        vec![ev("progress").caused_by(Cause {
            index: 1,
            attempt: 2,
            batch_size: None,
        })],
    )
    .await;
    assert_eq!(current[0].event.cause, Some(Cause::new(1, 2)));
}

/// A7: a cause naming a dead-lettered event is `SupersededAttempt`.
pub async fn a7_cause_of_a_dead_lettered_event_is_superseded(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a")]).await;
    claimed(s, "s", "w", TTL, 1).await;
    let out = failed(s, "s", 1, 1, 1, None).await;
    assert_eq!(out.outcome, a2_core::FailKind::DeadLettered);
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let late = ev("progress").caused_by(Cause {
        index: 1,
        attempt: 1,
        batch_size: None,
    });
    expect_code(
        s.append("s", vec![late]).await,
        ErrorCode::SupersededAttempt,
        "A7 dead-lettered",
    );
    assert_eq!(world(s, &["s"]).await, before, "A7: nothing written");
}

/// A7: a handler streams progress events caused by its current attempt,
/// through either handle; they are stored with that cause.
pub async fn a7_progress_events_carry_their_cause(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("job")]).await;
    claimed(s, "s", "w", TTL, 1).await;
    let cause = Cause {
        index: 1,
        attempt: 1,
        batch_size: None,
    };
    let p1 = append(s, "s", vec![ev("progress").caused_by(cause).settled()]).await;
    let p2 = append(
        fx.peer.as_ref(),
        "s",
        vec![ev("progress").caused_by(cause).lane("ui")],
    )
    .await;
    assert_eq!(indexes(&p1), [2]);
    assert_eq!(indexes(&p2), [3]);
    let rows = read_all(s, "s").await;
    assert_eq!(rows[1].event.cause, Some(cause));
    assert_eq!(rows[2].event.cause, Some(cause));
    assert_eq!(rows[2].event.lane.as_deref(), Some("ui"));
    assert!(
        rows[1].processed_at.is_some(),
        "A8: a settled progress event is processed"
    );
}

/// A8: a settled event is processed at append (`processed_at = created_at`,
/// no attempt) and is never claimable.
pub async fn a8_settled_event_is_processed_at_append(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let out = s
        .append("s", vec![ev("a").settled(), ev("b").settled().lane("l")])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.has_pending, "A8/A10: settled events are not pending");
    for row in &out.events {
        assert_eq!(
            row.processed_at,
            Some(START_MS),
            "A8: processed_at = created_at"
        );
        assert_eq!(row.processed_by_attempt, None);
        assert_eq!(row.attempt_count, 0);
        assert!(!row.is_pending());
    }
    assert_eq!(read_all(s, "s").await, out.events);
    assert_eq!(
        claim(s, "s", "w", TTL, 10).await,
        ClaimOutcome::Settled,
        "A8: never claimable"
    );
    fx.clock.advance(1_000_000);
    assert_eq!(
        claim(s, "s", "w", TTL, 10).await,
        ClaimOutcome::Settled,
        "A8: never claimable"
    );
    // A settled event in a lane does not block the lane.
    append(s, "s", vec![ev("c").lane("l")]).await;
    assert_eq!(indexes(&claimed(s, "s", "w", TTL, 10).await), [3]);
}

/// A9 (§1 readiness): unsettled events become pending; a lane-less event is
/// ready at once, a lane event only after every earlier event of its lane
/// is processed.
pub async fn a9_unsettled_events_are_pending_and_lanes_are_fifo(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let out = s
        .append(
            "s",
            vec![
                ev("x").lane("l"),
                ev("y").lane("l"),
                ev("z"),
                ev("w").lane("l"),
            ],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.has_pending);
    assert!(out.events.iter().all(|r| r.is_pending()), "A9: pending");
    let first = claimed(s, "s", "w", TTL, 10).await;
    assert_eq!(
        indexes(&first),
        [1, 3],
        "A9: lane head and lane-less event are ready"
    );
    completed(s, "s", 3, 1, vec![]).await;
    assert!(
        matches!(claim(s, "s", "w", TTL, 10).await, ClaimOutcome::Busy { .. }),
        "A9: 2 waits behind leased 1"
    );
    completed(s, "s", 1, 1, vec![]).await;
    assert_eq!(
        indexes(&claimed(s, "s", "w", TTL, 10).await),
        [2],
        "A9: 4 waits behind 2"
    );
    completed(s, "s", 2, 1, vec![]).await;
    assert_eq!(indexes(&claimed(s, "s", "w", TTL, 10).await), [4]);
}

/// A9: different lanes do not wait for each other.
pub async fn a9_lanes_are_independent(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(
        s,
        "s",
        vec![
            ev("a1").lane("a"),
            ev("b1").lane("b"),
            ev("a2").lane("a"),
            ev("b2").lane("b"),
        ],
    )
    .await;
    assert_eq!(
        indexes(&claimed(s, "s", "w", TTL, 10).await),
        [1, 2],
        "A9: one head per lane"
    );
    completed(s, "s", 2, 1, vec![]).await;
    assert_eq!(
        indexes(&claimed(s, "s", "w", TTL, 10).await),
        [4],
        "A9: lane b moves on while a waits"
    );
}

/// A10: `has_pending` says whether the session has any pending event after
/// the write.
pub async fn a10_has_pending_reflects_the_session_after_the_write(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let out = s
        .append("s", vec![ev("a").settled()])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.has_pending, "A10: only settled events");
    let out = s
        .append("s", vec![ev("b")])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.has_pending, "A10: a pending event");
    let out = s
        .append("s", vec![ev("c").settled()])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.has_pending, "A10: an earlier event is still pending");
    claimed(s, "s", "w", TTL, 10).await;
    let out = s
        .append("s", vec![ev("d").settled()])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.has_pending, "A10: a leased event is still pending");
    failed(s, "s", 2, 1, 1, None).await;
    let out = s
        .append("s", vec![ev("e").settled()])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !out.has_pending,
        "A10: a dead-lettered event is not pending"
    );
}

/// A11: ids left out come from the id source, `created_at` from the store
/// clock, and the session is listed (I1) from its first append.
pub async fn a11_ids_come_from_the_id_source_and_time_from_the_clock(setup: SetupFn) {
    let options = StoreOptions::default().with_ids(Arc::new(SequentialIds::new("gen-")));
    let fx = fixture_with(setup, options).await;
    let s = fx.store.as_ref();
    assert!(all_sessions(s).await.is_empty());
    fx.clock.advance(42);
    let rows = append(s, "s", vec![ev("a"), ev_id("mine"), ev("b")]).await;
    let ids: Vec<&str> = rows.iter().map(|r| r.event.id.as_str()).collect();
    assert_eq!(
        ids,
        ["gen-1", "mine", "gen-2"],
        "A11: generated ids fill the gaps, in order"
    );
    assert!(
        rows.iter().all(|r| r.event.created_at == START_MS + 42),
        "A11: created_at from the clock"
    );
    let listed = all_sessions(s).await;
    assert_eq!(listed.len(), 1, "A11: listed after its first append");
    assert_eq!(listed[0].session_id, "s");
    assert_eq!(listed[0].first_event_at, START_MS + 42);
}
