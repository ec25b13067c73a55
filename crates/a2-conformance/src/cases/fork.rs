//! SPEC §11 forks: the copy (FK1), the processing state it carries (FK2),
//! idempotency (FK3), bad input (FK4) and independence (FK5).

use std::sync::Arc;

use a2_core::{
    ClaimOutcome, Error, ErrorCode, Expiry, ForkOrigin, ForkOutcome, NewEvent, SnapshotWrite,
    Store, StoredEvent,
};
use serde_json::json;

use crate::support::*;
use crate::{START_MS, SetupFn, fixture, forked_rows};

/// `fork` that must succeed.
async fn forked(store: &dyn Store, source: &str, at: u64, target: &str) -> ForkOutcome {
    match store.fork(source, at, target).await {
        Ok(outcome) => outcome,
        Err(err) => panic!("fork of {source:?} at {at} onto {target:?} failed: {err}"),
    }
}

/// FK1: the fork's events 1..=at are the source's — ids, types, payloads,
/// times, causes, lanes, settled or not — and it goes on from at + 1 with
/// the source untouched; its listing names its origin (FK5).
pub async fn fk1_a_fork_copies_the_prefix_and_goes_on_from_it(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(
        s,
        "chat",
        vec![
            ev_id("u1"),
            NewEvent::new("note", json!({"text": "hi", "n": 1.5}))
                .id("n1")
                .lane("l")
                .settled(),
            NewEvent::new("ask", json!(["x", {"y": null}])).lane("l"),
        ],
    )
    .await;
    fx.clock.advance(3);
    claimed(s, "chat", "w", TTL, 1).await;
    completed(s, "chat", 1, 1, vec![ev_id("reply").lane("l")]).await;
    fx.clock.advance(3);
    append(s, "chat", vec![ev_id("later")]).await;
    let source = read_all(s, "chat").await;
    assert_eq!(source.len(), 5);
    fx.clock.advance(10);
    assert_eq!(
        forked(s, "chat", 4, "branch").await,
        ForkOutcome::Forked { first_index: 1 },
        "FK1"
    );
    let copy = read_all(fx.peer.as_ref(), "branch").await;
    let expected = forked_rows(&source[..4], "branch");
    assert_eq!(copy, expected, "FK1: the prefix, as it is in the source");
    let listed = summary(s, "branch").await;
    assert_eq!(
        listed.forked_from,
        Some(ForkOrigin {
            session: "chat".into(),
            index: 4
        }),
        "FK5: the origin is listed"
    );
    assert_eq!(listed.event_count, 4);
    assert_eq!(
        listed.first_event_at, START_MS,
        "FK2: the first copied event's time"
    );
    assert_eq!(listed.updated_at, START_MS + 16, "FK2: the fork is a write");
    assert_eq!(summary(s, "chat").await.forked_from, None);
    // The fork goes on from at + 1; the source is untouched (FK5).
    let next = append(s, "branch", vec![ev_id("later")]).await;
    assert_eq!(
        indexes(&next),
        vec![5],
        "FK1: the fork diverges after its prefix"
    );
    assert_eq!(
        read_all(s, "chat").await,
        source,
        "FK5: the source is untouched"
    );
}

/// FK2: processed events stay processed and dead letters dead; pending
/// events are pending in both branches, each processing its own: a lease
/// is released in the fork (the next claim there is a new attempt) and
/// kept in the source; retry times and lanes carry over; the counters are
/// the copied events'; snapshots at or below the index come along.
pub async fn fk2_a_fork_carries_processing_state_with_leases_released(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(
        s,
        "s",
        vec![
            ev_id("done"),
            ev_id("leased"),
            ev_id("dead"),
            ev_id("retry"),
            ev_id("fresh"),
            ev_id("l1").lane("q"),
            ev_id("l2").lane("q"),
            ev_id("past"),
        ],
    )
    .await;
    let rows = claimed(s, "s", "w", TTL, 6).await;
    assert_eq!(indexes(&rows), vec![1, 2, 3, 4, 5, 6]);
    completed(s, "s", 1, 1, vec![]).await;
    failed(s, "s", 3, 1, 1, None).await;
    failed(s, "s", 4, 1, 5, Some(START_MS + 60_000)).await;
    failed(s, "s", 5, 1, 5, None).await;
    completed(s, "s", 6, 1, vec![]).await;
    s.put_snapshots(
        "s",
        vec![
            SnapshotWrite {
                reducer: "low".into(),
                index: 3,
                state: json!({"n": 3}),
            },
            SnapshotWrite {
                reducer: "high".into(),
                index: 8,
                state: json!({"n": 8}),
            },
        ],
    )
    .await
    .expect("put_snapshots");
    let source = read_all(s, "s").await;
    forked(s, "s", 7, "f").await;
    let copy = read_all(s, "f").await;
    let expected = forked_rows(&source[..7], "f");
    assert_eq!(copy, expected, "FK2: records carried over, leases released");
    // Pending in the fork: 2 (its lease released), 5 (failed, ready) and
    // 7 (its lane's head now that 6 is processed); 4 waits for its retry
    // time, 3 is dead.
    let fork_claims = claimed(fx.peer.as_ref(), "f", "v", 120_000, 10).await;
    assert_eq!(
        claims_of(&fork_claims),
        vec![at(2, 2), at(5, 2), at(7, 1)],
        "FK2: the fork's pending events, each a new attempt"
    );
    assert_eq!(
        claim(s, "f", "v", TTL, 10).await,
        ClaimOutcome::Busy {
            retry_at: START_MS + 60_000
        },
        "FK2: the retry time carries over"
    );
    // The source's holder goes on in the source.
    completed(s, "s", 2, 1, vec![]).await;
    assert_eq!(row(s, "f", 2).await.processed_at, None, "FK5");
    let (events, pending, dead, attempts, failures) = counters(s, "f").await;
    assert_eq!(
        (events, pending, dead),
        (7, 4, 1),
        "FK2: pending 2, 4, 5, 7; dead 3"
    );
    assert_eq!(
        attempts,
        6 + 3,
        "FK2: the copied attempts and the fork's own"
    );
    assert_eq!(failures, 3, "FK2: the copied failures");
    assert!(all_pending(s).await.contains(&"f".to_owned()), "PS1");
    // Snapshots at or below the index come along (S1 reads from them).
    let snaps = s.list_snapshots("f").await.expect("list_snapshots");
    let names: Vec<(&str, u64)> = snaps
        .iter()
        .map(|x| (x.reducer.as_str(), x.index))
        .collect();
    assert_eq!(names, vec![("low", 3)], "FK2: snapshots up to the index");
    let state = s.read_state("f", "low").await.expect("read_state");
    assert_eq!(
        state.snapshot.map(|x| (x.index, x.state)),
        Some((3, json!({"n": 3})))
    );
    assert_eq!(
        state.events.iter().map(|e| e.index).collect::<Vec<_>>(),
        vec![4, 5, 6, 7],
        "S1: the fork folds from the inherited snapshot"
    );
}

/// FK2: a lease that ran out and was left among the ready events (a claim
/// took another event first) is released in the fork too, and a fork at an
/// earlier index leaves the later events, their leases and their lanes to
/// the source.
pub async fn fk2_a_fork_releases_expired_leases_and_leaves_later_ones_to_the_source(
    setup: SetupFn,
) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(
        s,
        "s",
        vec![
            ev_id("a"),
            ev_id("b"),
            ev_id("c").lane("q"),
            ev_id("d").lane("q"),
            ev_id("e"),
        ],
    )
    .await;
    claimed(s, "s", "w", 100, 2).await;
    fx.clock.advance(200);
    // 1 is claimed again; 2's lease ran out and it waits among the ready.
    let again = claimed(s, "s", "w", TTL, 1).await;
    assert_eq!(claims_of(&again), vec![at(1, 2)]);
    // 5 is leased too; the fork at 3 leaves it to the source.
    let mut request = claim_request("s", "w", TTL, 1);
    request.exclude_indexes = vec![2, 3];
    match s.claim_available(request).await {
        Ok(ClaimOutcome::Claimed { events: rows, .. }) => {
            assert_eq!(claims_of(&rows), vec![at(5, 1)])
        }
        other => panic!("claim of 5: {other:?}"),
    }
    let source = read_all(s, "s").await;
    forked(s, "s", 3, "f").await;
    let expected = forked_rows(&source[..3], "f");
    assert_eq!(
        read_all(s, "f").await,
        expected,
        "FK2: every lease released"
    );
    let rows = claimed(fx.peer.as_ref(), "f", "v", TTL, 10).await;
    assert_eq!(
        claims_of(&rows),
        vec![at(1, 3), at(2, 2), at(3, 1)],
        "FK2: the fork's events, each a new attempt; 4 and 5 are the source's"
    );
    let (events, pending, ..) = counters(s, "f").await;
    assert_eq!((events, pending), (3, 3));
    assert_eq!(
        counters(s, "s").await.1,
        5,
        "FK5: the source keeps its work"
    );
}

/// FK3: the same fork again answers `AlreadyForked` and writes nothing,
/// also after the fork grew; a target that is another fork or a session
/// of its own is `SessionExists`, nothing written.
pub async fn fk3_the_same_fork_again_writes_nothing_and_another_is_refused(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 4).await;
    append_n(s, "own", 1).await;
    assert!(matches!(
        forked(s, "s", 2, "f").await,
        ForkOutcome::Forked { .. }
    ));
    append(s, "f", vec![ev("mine")]).await;
    let before = world(s, &["s", "f", "own"]).await;
    fx.clock.advance(5);
    assert_eq!(
        forked(fx.peer.as_ref(), "s", 2, "f").await,
        ForkOutcome::AlreadyForked,
        "FK3: the same fork again"
    );
    expect_code(
        s.fork("s", 3, "f").await,
        ErrorCode::SessionExists,
        "FK3: another index",
    );
    expect_code(
        s.fork("own", 1, "f").await,
        ErrorCode::SessionExists,
        "FK3: another source",
    );
    expect_code(
        s.fork("s", 2, "own").await,
        ErrorCode::SessionExists,
        "FK3: a session of its own",
    );
    assert_eq!(
        world(s, &["s", "f", "own"]).await,
        before,
        "FK3: nothing written"
    );
}

/// FK4: an index of 0 or past the frontier, an unknown source, a target
/// equal to the source or a bad name is `InvalidArgument`; an index whose
/// events were trimmed away is `Trimmed`; nothing written.
pub async fn fk4_bad_forks_are_refused_and_write_nothing(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let settled: Vec<NewEvent> = (1..=4).map(|i| ev_id(&format!("d{i}")).settled()).collect();
    append(s, "s", settled).await;
    s.trim("s", 2).await.expect("trim");
    let long = "x".repeat(1025);
    let before = world(s, &["s", "t"]).await;
    let cases: [(&str, u64, &str, ErrorCode); 7] = [
        ("s", 0, "t", ErrorCode::InvalidArgument),
        ("s", 5, "t", ErrorCode::InvalidArgument),
        ("nobody", 1, "t", ErrorCode::InvalidArgument),
        ("s", 3, "s", ErrorCode::InvalidArgument),
        ("s", 3, "", ErrorCode::InvalidArgument),
        ("s", 3, &long, ErrorCode::InvalidArgument),
        ("s", 2, "t", ErrorCode::Trimmed),
    ];
    for (source, index, target, code) in cases {
        let what = format!(
            "FK4: fork of {source:?} at {index} onto a {}-byte name",
            target.len()
        );
        expect_code(s.fork(source, index, target).await, code, &what);
    }
    match s.fork("s", 1, "t").await {
        Err(Error::Trimmed { first_index, .. }) => assert_eq!(first_index, 3),
        other => panic!("FK4: expected Trimmed naming 3, got {other:?}"),
    }
    assert_eq!(world(s, &["s", "t"]).await, before, "FK4: nothing written");
    // A trimmed source forks from its first retained index.
    assert_eq!(
        forked(s, "s", 3, "t").await,
        ForkOutcome::Forked { first_index: 3 },
        "FK1: the source's first retained index"
    );
    assert_eq!(indexes(&read_all(s, "t").await), vec![3]);
    let (fork, source) = (summary(s, "t").await, summary(s, "s").await);
    assert_eq!(fork.first_index, 3, "TR5");
    assert_eq!(
        fork.first_event_at, source.first_event_at,
        "FK2: the source's first_event_at"
    );
}

/// FK5: the branches share nothing: writes, clears and trims of one never
/// change the other; a fork of a fork names its own source; a feed
/// follows one branch; a feed opened on the target before the fork gets
/// the copied events; the fork takes the store's default expiry, never
/// the source's close.
pub async fn fk5_a_fork_and_its_source_are_independent(setup: SetupFn) {
    let options = a2_core::StoreOptions::default().with_default_expiry(Expiry::ttl(60_000));
    let fx = crate::fixture_with(setup, options).await;
    let s = fx.store.as_ref();
    let settled: Vec<NewEvent> = (1..=3).map(|i| ev_id(&format!("d{i}")).settled()).collect();
    append(s, "s", settled).await;
    s.close_session("s").await.expect("close");
    let mut early = fx.peer.stream("f", 0);
    forked(s, "s", 3, "f").await;
    assert_eq!(
        next_indexes(&mut early, 3, "FK5: a feed of the target").await,
        vec![1, 2, 3]
    );
    let listed = summary(s, "f").await;
    assert_eq!(listed.closed_at, None, "FK5: a fork is open");
    assert_eq!(listed.deadline, Some(START_MS + 60_000), "EX2: the default");
    append(s, "f", vec![ev_id("f4")]).await;
    assert_eq!(
        next_indexes(&mut early, 1, "FK5: the fork's own event").await,
        vec![4]
    );
    forked(s, "f", 4, "ff").await;
    assert_eq!(
        summary(s, "ff").await.forked_from,
        Some(ForkOrigin {
            session: "f".into(),
            index: 4
        }),
        "FK5: a fork of a fork names its own source"
    );
    let fork_rows = read_all(s, "f").await;
    s.trim("s", 3).await.expect("trim");
    s.clear("s").await.expect("clear");
    append(s, "s", vec![ev_id("new")]).await;
    assert_eq!(read_all(s, "f").await, fork_rows, "FK5: the source's clear");
    s.trim("ff", 3).await.expect("trim");
    assert_eq!(read_all(s, "f").await, fork_rows, "FK5: a fork's trim");
    let mut source_feed = s.stream("s", 0);
    assert_eq!(next_indexes(&mut source_feed, 1, "FK5").await, vec![1]);
    append(s, "f", vec![ev("f5")]).await;
    append(s, "s", vec![ev("s2")]).await;
    let next = next_item(&mut source_feed, "FK5: the source's feed")
        .await
        .expect("an event");
    assert_eq!(
        next.id,
        read_all(s, "s").await[1].event.id,
        "FK5: one branch"
    );
    drop(early);
}

/// FK1: forks racing onto one target create it once: of many concurrent
/// identical forks exactly one is `Forked` and the others `AlreadyForked`;
/// of forks at other indexes the losers are `SessionExists`; appends to
/// the source meanwhile never tear the copy.
pub async fn fk1_racing_forks_onto_one_target_create_it_once(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s: Arc<dyn Store> = fx.store.clone();
    append_n(s.as_ref(), "s", 50).await;
    let source: Vec<StoredEvent> = read_all(s.as_ref(), "s").await;
    let mut tasks = Vec::new();
    for k in 0..8u64 {
        let store = if k % 2 == 0 {
            fx.store.clone()
        } else {
            fx.peer.clone()
        };
        let at = if k < 6 { 40 } else { 30 };
        tasks.push(tokio::spawn(
            async move { (at, store.fork("s", at, "t").await) },
        ));
    }
    let writer = {
        let store = fx.store.clone();
        tokio::spawn(async move {
            for _ in 0..10 {
                store.append("s", vec![ev("more")]).await.expect("append");
            }
        })
    };
    let mut created = Vec::new();
    let mut outcomes = Vec::new();
    for task in tasks {
        let (at, result) = task.await.expect("a fork task");
        if let Ok(ForkOutcome::Forked { .. }) = result {
            created.push(at);
        }
        outcomes.push((at, result.map_err(|e| e.code())));
    }
    writer.await.expect("the writer");
    assert_eq!(created.len(), 1, "FK1: created once: {outcomes:?}");
    let winner = created[0];
    for (at, result) in outcomes {
        let expected = if at == winner {
            [
                Ok(ForkOutcome::Forked { first_index: 1 }),
                Ok(ForkOutcome::AlreadyForked),
            ]
            .contains(&result)
        } else {
            result == Err(ErrorCode::SessionExists)
        };
        assert!(
            expected,
            "FK3: fork at {at} answered {result:?}, {winner} won"
        );
    }
    let copy = read_all(s.as_ref(), "t").await;
    let expected = forked_rows(&source[..winner as usize], "t");
    assert_eq!(copy, expected, "FK1: the copy is whole");
}
