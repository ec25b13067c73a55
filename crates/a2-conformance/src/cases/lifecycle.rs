//! SPEC §10 lifecycle: expiry (EX1, EX2, EX3, EX4), closing (CL1, CL2,
//! CL3, CL4, CL5, CL6) and trimming (TR1, TR2, TR3, TR4, TR5). EX5 (freeing the
//! storage) is each store's own: its tests check it.

use a2_core::{
    AppendClaim, AppendOptions, Cause, CloseOutcome, CompleteOutcome, Error, ErrorCode, Expiry,
    FailKind, HistoryOptions, Lease, NewEvent, ReadEventsOptions, ReadRange, ReviveOutcome,
    SnapshotWrite, Store, StoredEvent,
};
use futures::StreamExt;
use serde_json::json;

use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

/// A settled event with this id (A8): what a trim may remove.
fn done(id: &str) -> NewEvent {
    NewEvent::new("done", json!({ "id": id })).id(id).settled()
}

/// Appends `n` settled events `s1…sn`.
async fn settled_n(store: &dyn Store, session: &str, n: usize) -> Vec<StoredEvent> {
    let events = (1..=n).map(|i| done(&format!("s{i}"))).collect();
    append(store, session, events).await
}

/// `close_session` that must succeed.
async fn closed(store: &dyn Store, session: &str) -> CloseOutcome {
    match store.close_session(session).await {
        Ok(outcome) => outcome,
        Err(err) => panic!("close of {session:?} failed: {err}"),
    }
}

/// `trim` that must succeed; returns the first retained index.
async fn trimmed(store: &dyn Store, session: &str, through: u64) -> u64 {
    match store.trim(session, through).await {
        Ok(outcome) => outcome.first_index,
        Err(err) => panic!("trim of {session:?} through {through} failed: {err}"),
    }
}

/// Asserts that `result` is `Trimmed` naming `first` as the first retained
/// index.
fn expect_trimmed<T: std::fmt::Debug>(result: a2_core::Result<T>, first: u64, what: &str) {
    match result {
        Err(Error::Trimmed { first_index, .. }) => {
            assert_eq!(first_index, first, "{what}: the first retained index")
        }
        other => panic!("{what}: expected Trimmed (first index {first}), got {other:?}"),
    }
}

/// CL1: closing records the frontier and the store time once; closing again
/// answers the first close, nothing written; a session without events (or
/// a bad id) is `InvalidArgument`; the listing shows `closed_at` (CL5).
pub async fn cl1_close_marks_the_session_closed_once(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 3).await;
    fx.clock.advance(5);
    let first = closed(s, "s").await;
    assert_eq!(
        first,
        CloseOutcome::Closed {
            frontier: 3,
            closed_at: START_MS + 5
        },
        "CL1"
    );
    assert_eq!(summary(s, "s").await.closed_at, Some(START_MS + 5), "CL5");
    let before = world(s, &["s", "empty"]).await;
    fx.clock.advance(5);
    assert_eq!(
        closed(fx.peer.as_ref(), "s").await,
        CloseOutcome::AlreadyClosed {
            frontier: 3,
            closed_at: START_MS + 5
        },
        "CL1: closing twice answers the first close"
    );
    expect_code(
        s.close_session("empty").await,
        ErrorCode::InvalidArgument,
        "CL1: nothing to close",
    );
    expect_code(
        s.close_session("").await,
        ErrorCode::InvalidArgument,
        "CL1: empty session id",
    );
    assert_eq!(
        world(s, &["s", "empty"]).await,
        before,
        "CL1: nothing written"
    );
}

/// CL2: appends to a closed session are `SessionClosed` and write nothing,
/// also with a claim or a cause; an identical replay of a stored batch
/// still returns its rows, and a partial duplicate is still A6's.
pub async fn cl2_appends_to_a_closed_session_are_refused_but_replays_return_their_rows(
    setup: SetupFn,
) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let rows = append(s, "s", vec![ev_id("a"), ev_id("b")]).await;
    claimed(s, "s", "w", TTL, 1).await;
    closed(s, "s").await;
    let before = world(s, &["s"]).await;
    expect_code(
        s.append("s", vec![ev("late")]).await,
        ErrorCode::SessionClosed,
        "CL2: append",
    );
    let claim = AppendClaim {
        holder: "w".into(),
        lease: Lease::Ttl(TTL),
        limit: 5,
    };
    expect_code(
        s.append_and_claim("s", vec![ev("late")], claim).await,
        ErrorCode::SessionClosed,
        "CL2: append_and_claim",
    );
    let progress = ev("progress").caused_by(Cause {
        index: 1,
        attempt: 1,
        batch_size: None,
    });
    expect_code(
        fx.peer.append("s", vec![progress]).await,
        ErrorCode::SessionClosed,
        "CL2: progress append",
    );
    expect_code(
        s.append("s", vec![ev_id("b"), ev_id("c")]).await,
        ErrorCode::PartialDuplicateBatch,
        "CL2: a partial duplicate is A6's",
    );
    assert_eq!(world(s, &["s"]).await, before, "CL2: nothing written");
    let replay = match s.append("s", vec![ev_id("a"), ev_id("b")]).await {
        Ok(outcome) => outcome.events,
        Err(err) => panic!("CL2: a replay of a stored batch failed: {err}"),
    };
    assert_eq!(indexes(&replay), indexes(&rows), "CL2: A5's rows");
    assert!(
        s.append("s", Vec::new())
            .await
            .is_ok_and(|o| o.events.is_empty()),
        "CL2: an empty batch writes nothing (A2)"
    );
}

/// CL3: a closed session's pending events are still claimed, failed,
/// revived and completed; a completion that returns events is
/// `SessionClosed` with nothing written, and the same attempt then completes
/// without events.
pub async fn cl3_pending_events_of_a_closed_session_still_settle(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    claimed(s, "s", "w", TTL, 1).await;
    let returned = completed(s, "s", 1, 1, vec![ev_id("before")]).await;
    closed(s, "s").await;
    // The completion stored before the close replays (CO3).
    let replay = completed(s, "s", 1, 1, vec![ev_id("before")]).await;
    assert_eq!(replay, returned, "CL3: CO3's replay");
    let rows = claimed(s, "s", "w", TTL, 5).await;
    assert_eq!(indexes(&rows), vec![2, 3], "CL3: still claimed");
    let before = world(s, &["s"]).await;
    expect_code(
        complete(s, "s", 2, 1, vec![ev("reply")]).await,
        ErrorCode::SessionClosed,
        "CL3: returned events",
    );
    assert_eq!(world(s, &["s"]).await, before, "CL3: nothing written");
    assert!(completed(s, "s", 2, 1, vec![]).await.is_empty());
    let out = failed(s, "s", 3, 1, 1, None).await;
    assert_eq!(out.outcome, FailKind::DeadLettered, "CL3: still failed");
    assert!(matches!(
        revive(s, "s", 3).await,
        Ok(ReviveOutcome::Revived(_))
    ));
    claimed(s, "s", "w", TTL, 1).await;
    completed(s, "s", 3, 2, vec![]).await;
    assert_eq!(counters(s, "s").await.1, 0, "CL3: every event settled");
    assert_eq!(read_all(s, "s").await.len(), 3, "CL3: the log stays final");
}

/// CL4: a live feed of a closed session delivers every event through the
/// close's frontier and then ends cleanly, whether it was open before the
/// close or opened after it; one opened at the frontier ends at once.
pub async fn cl4_feeds_of_a_closed_session_deliver_everything_then_end_cleanly(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    let mut early = s.stream("s", 0);
    assert_eq!(
        next_indexes(&mut early, 2, "CL4: before the close").await,
        [1, 2]
    );
    append_n(fx.peer.as_ref(), "s", 2).await;
    closed(fx.peer.as_ref(), "s").await;
    assert_eq!(next_indexes(&mut early, 2, "CL4: the rest").await, [3, 4]);
    let end = tokio::time::timeout(WAIT, early.next()).await;
    assert!(
        matches!(end, Ok(None)),
        "CL4: the feed ends cleanly after the last event, got {end:?}"
    );
    let mut late = s.stream("s", 1);
    assert_eq!(
        next_indexes(&mut late, 3, "CL4: opened after").await,
        [2, 3, 4]
    );
    assert!(matches!(
        tokio::time::timeout(WAIT, late.next()).await,
        Ok(None)
    ));
    let mut at_end = s.stream("s", 4);
    assert!(
        matches!(tokio::time::timeout(WAIT, at_end.next()).await, Ok(None)),
        "CL4: a feed at the frontier of a closed session ends at once"
    );
}

/// CL6: an append with `close` appends its batch and closes the session at
/// the frontier it reached in one atomic step: the close is recorded at the
/// append's time, a feed delivers the batch and ends cleanly (CL4), later
/// appends are refused (CL2), a replay returns its rows (A5), and the
/// leased events it claimed still settle (CL3). Whatever refuses the append
/// refuses the close too — a partial duplicate (A6), another frontier
/// (A13), an empty batch — with nothing written, and the session stays open.
pub async fn cl6_an_append_that_closes_its_session_is_one_atomic_step(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    let mut feed = s.stream("s", 0);
    assert_eq!(next_indexes(&mut feed, 1, "CL6: before").await, [1]);
    fx.clock.advance(5);
    let last = vec![ev_id("answer"), ev_id("done").settled()];
    let rows = match s
        .append_with("s", last.clone(), AppendOptions::new().close())
        .await
    {
        Ok(outcome) => outcome.events,
        Err(err) => panic!("CL6: append and close: {err}"),
    };
    assert_eq!(indexes(&rows), [2, 3], "CL6: appended");
    assert_eq!(
        summary(s, "s").await.closed_at,
        Some(START_MS + 5),
        "CL6: closed by the append"
    );
    assert_eq!(
        closed(fx.peer.as_ref(), "s").await,
        CloseOutcome::AlreadyClosed {
            frontier: 3,
            closed_at: START_MS + 5
        },
        "CL6: closed at the frontier the append reached"
    );
    assert_eq!(next_indexes(&mut feed, 2, "CL6: the batch").await, [2, 3]);
    let end = tokio::time::timeout(WAIT, feed.next()).await;
    assert!(
        matches!(end, Ok(None)),
        "CL4: the feed ends cleanly after the batch, got {end:?}"
    );
    expect_code(
        s.append("s", vec![ev("late")]).await,
        ErrorCode::SessionClosed,
        "CL2: after an append that closed",
    );
    let replayed = s
        .append_with("s", last, AppendOptions::new().close())
        .await
        .expect("A5: a replay of the closing append");
    assert_eq!(replayed.events, rows, "A5: the stored rows");

    // Refusals write nothing and leave the session open.
    append(s, "open", vec![ev_id("x")]).await;
    let before = world(s, &["open", "none"]).await;
    let close = || AppendOptions::new().close();
    expect_code(
        s.append_with("open", vec![ev_id("y"), ev_id("x")], close())
            .await,
        ErrorCode::PartialDuplicateBatch,
        "CL6: a partial duplicate (A6)",
    );
    expect_code(
        s.append_with("open", vec![ev_id("y")], close().if_frontier(5))
            .await,
        ErrorCode::FrontierMoved,
        "CL6: another frontier (A13)",
    );
    for session in ["open", "none"] {
        expect_code(
            s.append_with(session, vec![], close()).await,
            ErrorCode::InvalidArgument,
            "CL6: an empty batch closes nothing",
        );
    }
    assert_eq!(
        world(s, &["open", "none"]).await,
        before,
        "CL6: nothing written, nothing closed"
    );

    // At the expected frontier, with a claim: the claimed event of the
    // closed session still completes (CL3).
    let claim = AppendClaim::new("w", Lease::Ttl(TTL), 5);
    let outcome = s
        .append_with(
            "open",
            vec![ev_id("y")],
            close().if_frontier(1).claim(claim),
        )
        .await
        .expect("CL6: append, claim and close");
    assert_eq!(outcome.claimed, [2], "AC2: claimed at append");
    assert_eq!(
        closed(s, "open").await,
        CloseOutcome::AlreadyClosed {
            frontier: 2,
            closed_at: START_MS + 5
        },
        "CL6"
    );
    completed(s, "open", 2, 1, vec![]).await;
    assert!(
        row(s, "open", 2).await.processed_at.is_some(),
        "CL3: it settles"
    );
}

/// CL5: clearing a closed session deletes it like any other (I4); the id
/// then names a new, open session.
pub async fn cl5_clear_reopens_a_closed_session(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    closed(s, "s").await;
    s.clear("s").await.expect("clear");
    let rows = append_n(s, "s", 1).await;
    assert_eq!(indexes(&rows), vec![1], "CL5: a new log");
    assert_eq!(summary(s, "s").await.closed_at, None, "CL5: open again");
}

/// TR1: a trim removes the settled prefix; every later event keeps its
/// index, id and record, and the next append continues the indexes. A trim
/// at or below an earlier one changes nothing.
pub async fn tr1_trim_removes_the_settled_prefix_and_keeps_later_indexes(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let rows = settled_n(s, "s", 5).await;
    fx.clock.advance(1);
    assert_eq!(trimmed(s, "s", 3).await, 4, "TR1: the first retained index");
    let kept = s
        .read(
            "s",
            ReadRange {
                after_index: 3,
                through_index: None,
            },
        )
        .await
        .expect("read after the trim point");
    assert_eq!(kept, rows[3..].to_vec(), "TR1: later events unchanged");
    assert_eq!(trimmed(fx.peer.as_ref(), "s", 2).await, 4, "TR1: below");
    assert_eq!(trimmed(s, "s", 3).await, 4, "TR1: at an earlier trim");
    assert_eq!(trimmed(s, "s", 0).await, 4, "TR1: through 0");
    let next = append(s, "s", vec![ev("next")]).await;
    assert_eq!(next[0].event.index, 6, "TR1: indexes keep counting");
    assert_eq!(trimmed(s, "s", 5).await, 6);
    assert_eq!(trimmed(s, "unknown", 0).await, 1, "TR1: an unknown session");
}

/// TR1: at most 10 000 events go in one trim (X1); the caller trims again
/// from the index it returned.
pub async fn tr1_a_large_trim_goes_ten_thousand_at_a_time(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    for part in 0..2 {
        let events = (1..=5_001)
            .map(|i| {
                NewEvent::new("d", json!(i))
                    .id(format!("{part}.{i}"))
                    .settled()
            })
            .collect();
        append(s, "s", events).await;
    }
    assert_eq!(trimmed(s, "s", 10_002).await, 10_001, "TR1: 10 000 at most");
    assert_eq!(trimmed(s, "s", 10_002).await, 10_003, "TR1: then the rest");
}

/// TR2: a trim beyond the frontier, or over a pending or dead-lettered
/// event, is `InvalidArgument` naming the first such index; nothing is
/// written.
pub async fn tr2_trimming_unsettled_events_or_beyond_the_frontier_is_refused(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![done("a"), ev_id("b"), done("c"), ev_id("d")]).await;
    claimed(s, "s", "w", TTL, 1).await;
    completed(s, "s", 2, 1, vec![]).await;
    claimed(s, "s", "w", TTL, 1).await;
    failed(s, "s", 4, 1, 1, None).await;
    append(s, "s", vec![ev_id("e")]).await;
    let before = world(s, &["s", "unknown"]).await;
    fx.clock.advance(1);
    for through in [4, 5] {
        match s.trim("s", through).await {
            Err(Error::InvalidArgument { message, index }) => assert!(
                message.contains("event 4")
                    && message.contains("dead-lettered")
                    && index == Some(4),
                "TR2: {message:?} ({index:?}) names the dead letter"
            ),
            other => panic!("TR2: trim through {through}: expected InvalidArgument, got {other:?}"),
        }
    }
    for through in [6, u64::MAX] {
        expect_code(
            s.trim("s", through).await,
            ErrorCode::InvalidArgument,
            "TR2: beyond the frontier",
        );
    }
    expect_code(
        s.trim("", 1).await,
        ErrorCode::InvalidArgument,
        "TR2: empty id",
    );
    expect_code(
        s.trim("unknown", 1).await,
        ErrorCode::InvalidArgument,
        "TR2: no events",
    );
    assert_eq!(
        world(s, &["s", "unknown"]).await,
        before,
        "TR2: nothing written"
    );
    revive(s, "s", 4).await.expect("revive");
    match s.trim("s", 5).await {
        Err(Error::InvalidArgument { message, index }) => assert!(
            message.contains("event 4") && message.contains("pending") && index == Some(4),
            "TR2: {message:?} ({index:?}) names the pending event"
        ),
        other => panic!("TR2: a pending event: expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(trimmed(s, "s", 3).await, 4, "TR2: the settled prefix goes");
}

/// TR3: reads that need trimmed events fail with `Trimmed` naming the first
/// retained index; history returns the retained part with `has_more`
/// false; a revive or a cause of a trimmed index is `Trimmed`, a completion
/// or failure of one `Superseded`.
pub async fn tr3_reads_before_the_trim_point_are_trimmed(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 4).await;
    claimed(s, "s", "w", TTL, 4).await;
    for index in 1..=3 {
        completed(s, "s", index, 1, vec![]).await;
    }
    assert_eq!(trimmed(s, "s", 2).await, 3);
    expect_trimmed(s.read("s", ReadRange::default()).await, 3, "TR3: read");
    expect_trimmed(
        s.read(
            "s",
            ReadRange {
                after_index: 1,
                through_index: Some(2),
            },
        )
        .await,
        3,
        "TR3: read of trimmed events only",
    );
    expect_trimmed(
        s.read_events("s", ReadEventsOptions::new(10)).await,
        3,
        "TR3: read_events",
    );
    let page = s
        .read_events("s", ReadEventsOptions::new(10).after_index(2))
        .await
        .expect("read_events from the trim point");
    assert_eq!(indexes(&page.events), vec![3, 4]);
    let history = s
        .read_history("s", HistoryOptions::new(10))
        .await
        .expect("read_history");
    assert_eq!(indexes(&history.events), vec![3, 4], "TR3: history");
    assert!(!history.has_more, "TR3: nothing older to load");
    assert_eq!(history.first_index, 3, "TR3: history says where it starts");
    let older = s
        .read_history("s", HistoryOptions::new(1).before_index(Some(5)))
        .await
        .expect("read_history");
    assert!(older.has_more && older.first_index == 3);
    expect_trimmed(revive(s, "s", 1).await, 3, "TR3: revive");
    let progress = ev("progress").caused_by(Cause {
        index: 1,
        attempt: 1,
        batch_size: None,
    });
    expect_trimmed(s.append("s", vec![progress]).await, 3, "TR3: cause");
    assert!(matches!(
        complete(s, "s", 2, 1, vec![]).await,
        Ok(CompleteOutcome::Superseded)
    ));
    assert_eq!(
        failed(s, "s", 1, 1, 3, None).await.outcome,
        FailKind::Superseded,
        "TR3: failure of a trimmed event"
    );
    assert_eq!(indexes(&read_all(s, "s").await), vec![3, 4]);
}

/// TR3: `read_state` folds from a snapshot at or after the trim point; a
/// reducer whose snapshot is older, or that has none, is `Trimmed`.
pub async fn tr3_read_state_needs_a_snapshot_at_or_after_the_trim_point(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    settled_n(s, "s", 5).await;
    let snap = |reducer: &str, index| SnapshotWrite {
        reducer: reducer.into(),
        index,
        state: json!({ "at": index }),
    };
    s.put_snapshots("s", vec![snap("fresh", 3), snap("stale", 1)])
        .await
        .expect("put_snapshots");
    trimmed(s, "s", 3).await;
    let state = s.read_state("s", "fresh").await.expect("read_state");
    assert_eq!(state.snapshot.map(|s| s.index), Some(3));
    let folded: Vec<u64> = state.events.iter().map(|e| e.index).collect();
    assert_eq!(folded, vec![4, 5], "TR3: the events after the snapshot");
    expect_trimmed(s.read_state("s", "stale").await, 4, "TR3: older snapshot");
    expect_trimmed(s.read_state("s", "none").await, 4, "TR3: no snapshot");
}

/// TR3: a feed whose next event was trimmed yields `Trimmed` once and ends;
/// a feed whose delivered event was trimmed while its next one is retained
/// goes on.
pub async fn tr3_a_feed_behind_the_trim_point_ends_with_trimmed(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    settled_n(s, "s", 2).await;
    let mut following = s.stream("s", 0);
    assert_eq!(next_indexes(&mut following, 2, "TR3: before").await, [1, 2]);
    // The event the feed delivered last goes; the next one is retained.
    trimmed(fx.peer.as_ref(), "s", 2).await;
    append(s, "s", vec![done("x")]).await;
    append(fx.peer.as_ref(), "s", vec![done("y")]).await;
    assert_eq!(
        next_indexes(&mut following, 2, "TR3: after the trim").await,
        [3, 4],
        "TR3: a feed past the trim point goes on"
    );
    let mut behind = s.stream("s", 0);
    expect_trimmed(
        next_item(&mut behind, "TR3: a feed from 0").await,
        3,
        "TR3: feed",
    );
    assert!(
        matches!(tokio::time::timeout(WAIT, behind.next()).await, Ok(None)),
        "TR3: the feed ends after Trimmed"
    );
    let mut from_trim_point = s.stream("s", 2);
    assert_eq!(
        next_indexes(&mut from_trim_point, 2, "TR3: from 2").await,
        [3, 4]
    );
}

/// TR4: a replay of a batch whose events are retained returns them; one
/// that straddles the trim point is `PartialDuplicateBatch`; one whose
/// events were all trimmed is appended again (the idempotency window is
/// the retained log).
pub async fn tr4_replays_of_trimmed_batches_are_recognised_while_retained(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![done("a"), done("b")]).await;
    let kept = append(s, "s", vec![done("c"), done("d")]).await;
    trimmed(s, "s", 2).await;
    let replay = append(s, "s", vec![done("c"), done("d")]).await;
    assert_eq!(replay, kept, "TR4: retained rows");
    expect_code(
        s.append("s", vec![done("b"), done("c")]).await,
        ErrorCode::PartialDuplicateBatch,
        "TR4: straddling the trim point",
    );
    let again = append(s, "s", vec![done("a"), done("b")]).await;
    assert_eq!(indexes(&again), vec![5, 6], "TR4: outside the window");
}

/// TR5: a trim leaves the counters (only settled events go) and the
/// snapshots; the listing reports the first retained index and keeps
/// `event_count` at the frontier.
pub async fn tr5_trim_keeps_counters_and_snapshots(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    settled_n(s, "s", 3).await;
    append_n(s, "s", 2).await;
    claimed(s, "s", "w", TTL, 1).await;
    s.put_snapshots(
        "s",
        vec![SnapshotWrite {
            reducer: "r".into(),
            index: 2,
            state: json!(2),
        }],
    )
    .await
    .expect("put_snapshots");
    let listed = summary(s, "s").await;
    let snapshots = s.list_snapshots("s").await.expect("list_snapshots");
    trimmed(s, "s", 3).await;
    let after = summary(s, "s").await;
    assert_eq!(after.first_index, 4, "TR5: first_index");
    assert_eq!(after.event_count, 5, "TR5: event_count is the frontier");
    assert_eq!(
        (after.pending_count, after.attempt_count, after.failed_count),
        (
            listed.pending_count,
            listed.attempt_count,
            listed.failed_count
        ),
        "TR5: counters unchanged"
    );
    assert_eq!(listed.first_index, 1);
    assert_eq!(
        s.list_snapshots("s").await.expect("list_snapshots"),
        snapshots,
        "TR5: snapshots stay"
    );
}

/// `append_with` that must succeed.
async fn append_expiring(
    store: &dyn Store,
    session: &str,
    events: Vec<NewEvent>,
    expiry: Expiry,
) -> Vec<StoredEvent> {
    match store
        .append_with(session, events, AppendOptions::new().expiry(expiry))
        .await
    {
        Ok(outcome) => outcome.events,
        Err(err) => panic!("append_with to {session:?} failed: {err}"),
    }
}

/// Whether `session` is gone: no rows, not listed, not pending (EX3).
async fn gone(store: &dyn Store, session: &str) -> bool {
    read_all(store, session).await.is_empty()
        && !all_sessions(store)
            .await
            .iter()
            .any(|s| s.session_id == session)
        && !all_pending(store).await.iter().any(|s| s == session)
}

/// EX1: a sliding ttl expires the session that long after its last
/// activity (an append, a claim, a completion …); the listing says when.
pub async fn ex1_a_session_expires_its_ttl_after_its_last_activity(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_expiring(s, "s", vec![ev("a")], Expiry::ttl(1_000)).await;
    assert_eq!(summary(s, "s").await.deadline, Some(START_MS + 1_000));
    fx.clock.advance(600);
    claimed(s, "s", "w", TTL, 1).await;
    fx.clock.advance(600);
    assert!(!gone(s, "s").await, "EX1: the claim was activity");
    completed(fx.peer.as_ref(), "s", 1, 1, vec![]).await;
    let deadline = START_MS + 1_200 + 1_000;
    assert_eq!(summary(s, "s").await.deadline, Some(deadline), "EX1");
    fx.clock.set(deadline - 1);
    // Reads are no activity.
    assert_eq!(read_all(s, "s").await.len(), 1);
    fx.clock.set(deadline);
    assert!(gone(s, "s").await, "EX3: gone at its deadline");
    assert!(gone(fx.peer.as_ref(), "s").await, "EX3: for every instance");
}

/// EX1: an `expires_at` ends the session then, whatever its activity; with
/// a ttl too, the earlier of the two wins.
pub async fn ex1_expires_at_ends_the_session_whatever_its_activity(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let at = START_MS + 1_000;
    append_expiring(s, "s", vec![ev("a")], Expiry::ttl(600).until(at)).await;
    fx.clock.advance(500);
    append(s, "s", vec![ev("b")]).await;
    assert_eq!(summary(s, "s").await.deadline, Some(at), "EX1: the earlier");
    fx.clock.advance(499);
    append(s, "s", vec![ev("c")]).await;
    assert!(!gone(s, "s").await);
    fx.clock.set(at);
    assert!(gone(s, "s").await, "EX1: at expires_at");
}

/// EX1: a ttl of 0, an `expires_at` not after now or more than 100 years
/// ahead are `InvalidArgument`, nothing written; a ttl above 100 years
/// counts as 100 years (X2).
pub async fn ex1_bad_expiries_are_invalid_and_write_nothing(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    let before = world(s, &["s", "new"]).await;
    let century = 3_153_600_000_000;
    for bad in [
        Expiry::ttl(0),
        Expiry::at(START_MS),
        Expiry::at(START_MS - 1),
        Expiry::at(i64::MIN),
        Expiry::at(START_MS + century + 1),
        Expiry::at(i64::MAX),
        Expiry::ttl(5).until(START_MS),
    ] {
        expect_code(
            s.append_with("new", vec![ev("a")], AppendOptions::new().expiry(bad))
                .await,
            ErrorCode::InvalidArgument,
            "EX1: append_with",
        );
        expect_code(
            s.set_expiry("s", bad).await,
            ErrorCode::InvalidArgument,
            "EX1: set_expiry",
        );
    }
    assert_eq!(
        world(s, &["s", "new"]).await,
        before,
        "EX1: nothing written"
    );
    append_expiring(s, "long", vec![ev("a")], Expiry::ttl(u64::MAX)).await;
    assert_eq!(
        summary(s, "long").await.deadline,
        Some(START_MS + century),
        "X2: 100 years at most"
    );
    append_expiring(s, "edge", vec![ev("a")], Expiry::at(START_MS + century)).await;
}

/// EX2: `set_expiry` replaces the expiry and answers the deadline; none
/// keeps the session until cleared; a session without events is
/// `InvalidArgument`.
pub async fn ex2_set_expiry_replaces_or_removes_the_expiry(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_expiring(s, "s", vec![ev("a")], Expiry::ttl(100)).await;
    fx.clock.advance(50);
    let out = s
        .set_expiry("s", Expiry::ttl(1_000))
        .await
        .expect("set_expiry");
    assert_eq!(out.deadline, Some(START_MS + 1_050), "EX2: from now");
    fx.clock.advance(500);
    let out = fx
        .peer
        .set_expiry("s", Expiry::none())
        .await
        .expect("set_expiry");
    assert_eq!(out.deadline, None);
    assert_eq!(summary(s, "s").await.deadline, None);
    fx.clock.advance(1_000_000);
    assert!(!gone(s, "s").await, "EX2: kept until cleared");
    expect_code(
        s.set_expiry("unknown", Expiry::ttl(5)).await,
        ErrorCode::InvalidArgument,
        "EX2: no events",
    );
    // An append may set it too, on a session that exists already.
    append_expiring(s, "s", vec![ev("b")], Expiry::ttl(10)).await;
    fx.clock.advance(10);
    assert!(gone(s, "s").await);
    expect_code(
        s.set_expiry("s", Expiry::ttl(5)).await,
        ErrorCode::InvalidArgument,
        "EX2: an expired session has no expiry to set",
    );
}

/// EX2: the store's default expiry goes to every session created without
/// one, not to one created with its own; a replay sets nothing.
pub async fn ex2_the_default_expiry_applies_to_new_sessions(setup: SetupFn) {
    let options = a2_core::StoreOptions::default().with_default_expiry(Expiry::ttl(500));
    let fx = crate::fixture_with(setup, options).await;
    let s = fx.store.as_ref();
    append(s, "plain", vec![ev_id("p")]).await;
    append_expiring(s, "own", vec![ev("a")], Expiry::ttl(5_000)).await;
    assert_eq!(summary(s, "plain").await.deadline, Some(START_MS + 500));
    assert_eq!(summary(s, "own").await.deadline, Some(START_MS + 5_000));
    fx.clock.advance(400);
    // A replay is no activity: nothing written (A5).
    append(s, "plain", vec![ev_id("p")]).await;
    fx.clock.advance(100);
    assert!(gone(s, "plain").await, "EX2: the default ttl");
    assert!(!gone(s, "own").await);
}

/// EX3: a store instance never reads time backward: a session found
/// expired stays gone when the clock then moves back before its deadline —
/// on every store, whether it freed the session's storage yet or not — and
/// a lease that ran out stays run out, so another holder claims it; the
/// instance's times go on from the latest one it read.
pub async fn ex3_a_session_found_expired_stays_gone_when_the_clock_moves_back(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_expiring(s, "s", vec![ev_id("a")], Expiry::ttl(1_000)).await;
    append_n(s, "leased", 1).await;
    claimed(s, "leased", "w1", 500, 1).await;
    fx.clock.advance(1_500);
    assert!(gone(s, "s").await, "EX3: at its deadline");
    fx.clock.advance(-1_000);
    assert!(
        gone(s, "s").await,
        "EX3: the clock moved back before the deadline, the session stays gone"
    );
    let rows = claimed(s, "leased", "w2", 500, 1).await;
    assert_eq!(
        rows[0].last_claimed_at,
        Some(START_MS + 1_500),
        "C5: the lease stayed run out, and the claim is stamped with the latest time"
    );
    let fresh = append(s, "s", vec![ev_id("a")]).await;
    assert_eq!(
        (fresh[0].event.index, fresh[0].event.created_at),
        (1, START_MS + 1_500),
        "EX3: a new session, at the latest time the store read"
    );
}

/// EX3: an expired session is gone as after `clear`: its work is no
/// longer claimable, listed or completable, its snapshots are gone, and the
/// next append starts a new session at index 1 whose ids are new.
pub async fn ex3_an_expired_session_is_gone_and_starts_anew(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_expiring(s, "s", vec![ev_id("a"), ev_id("b")], Expiry::ttl(1_000)).await;
    claimed(s, "s", "w", TTL, 1).await;
    s.put_snapshots(
        "s",
        vec![SnapshotWrite {
            reducer: "r".into(),
            index: 1,
            state: json!(1),
        }],
    )
    .await
    .expect("put_snapshots");
    fx.clock.advance(1_000);
    assert!(gone(s, "s").await, "EX3");
    assert!(matches!(
        s.claim_available(claim_request("s", "w", TTL, 5)).await,
        Ok(a2_core::ClaimOutcome::Settled)
    ));
    expect_code(
        complete(s, "s", 1, 1, vec![]).await,
        ErrorCode::InvalidArgument,
        "EX3: CO1",
    );
    expect_code(
        fail(s, "s", 1, 1, 3, None).await,
        ErrorCode::InvalidArgument,
        "EX3: F1",
    );
    assert!(
        s.list_snapshots("s")
            .await
            .expect("list_snapshots")
            .is_empty()
    );
    let state = s.read_state("s", "r").await.expect("read_state");
    assert!(state.snapshot.is_none() && state.events.is_empty());
    let history = s
        .read_history("s", HistoryOptions::new(10))
        .await
        .expect("history");
    assert!(history.events.is_empty() && !history.has_more);
    let again = append(s, "s", vec![ev_id("a")]).await;
    assert_eq!(indexes(&again), vec![1], "EX3: a new session at index 1");
    assert!(again[0].is_pending() && again[0].attempt_count == 0);
    let listed = summary(s, "s").await;
    assert_eq!(
        (
            listed.event_count,
            listed.pending_count,
            listed.attempt_count,
            listed.deadline
        ),
        (1, 1, 0, None),
        "EX3: new counters, no expiry"
    );
}

/// EX4: a feed of a session that expires yields `SessionExpired` once and
/// ends, also when nobody writes to the session again (it wakes at the
/// deadline it read).
pub async fn ex4_a_feed_of_an_expired_session_ends_with_session_expired(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_expiring(s, "s", vec![ev("a"), ev("b")], Expiry::ttl(300)).await;
    let mut feed = s.stream("s", 0);
    assert_eq!(next_indexes(&mut feed, 2, "EX4: before").await, [1, 2]);
    fx.clock.advance(1_000);
    match next_item(&mut feed, "EX4: the expiry").await {
        Err(Error::SessionExpired { session }) => assert_eq!(session, "s"),
        other => panic!("EX4: expected SessionExpired, got {other:?}"),
    }
    assert!(
        matches!(tokio::time::timeout(WAIT, feed.next()).await, Ok(None)),
        "EX4: the feed ends"
    );
}

/// EX4: a feed that finds another log in place of its expired session
/// reports `SessionExpired`, not `SessionCleared` (ST6).
pub async fn ex4_a_new_log_after_the_expiry_is_reported_as_expired(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_expiring(s, "s", vec![ev("a")], Expiry::ttl(60_000)).await;
    let mut feed = s.stream("s", 0);
    assert_eq!(next_indexes(&mut feed, 1, "EX4: before").await, [1]);
    fx.clock.advance(60_000);
    append_n(fx.peer.as_ref(), "s", 2).await;
    match next_item(&mut feed, "EX4: the new log").await {
        Err(Error::SessionExpired { .. }) => {}
        other => panic!("EX4: expected SessionExpired, got {other:?}"),
    }
}
