//! SPEC §7 inspection: I1, I2, I3, I4.

use a2_core::{ListSessionsOptions, ReadEventsOptions, SessionSummary, SnapshotInfo, Store};
use serde_json::json;

use super::presence::{entries, set};
use super::state::{put, snap, state};
use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

async fn list(
    store: &dyn Store,
    prefix: Option<&str>,
    cursor: Option<String>,
    limit: usize,
) -> (Vec<String>, Option<String>) {
    let options = ListSessionsOptions::new(limit)
        .prefix(prefix.map(str::to_owned))
        .cursor(cursor);
    match store.list_sessions(options).await {
        Ok(page) => {
            assert!(
                page.sessions.len() <= limit,
                "I1: a page longer than its limit"
            );
            (
                page.sessions.into_iter().map(|s| s.session_id).collect(),
                page.cursor,
            )
        }
        Err(err) => panic!("list_sessions failed: {err}"),
    }
}

async fn list_all(store: &dyn Store, prefix: Option<&str>, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..1_000 {
        let (ids, next) = list(store, prefix, cursor, limit).await;
        out.extend(ids);
        match next {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
    panic!("I1: list_sessions never returned a last page");
}

/// I1: each listed session's counters agree with its log: events, pending,
/// dead-lettered, attempts, failures, first event time and last write.
pub async fn i1_list_sessions_counts_match_the_log(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    fx.clock.advance(10);
    append(
        s,
        "s",
        vec![ev("a"), ev("b"), ev("c"), ev("d").settled(), ev("e")],
    )
    .await;
    claimed(s, "s", "w", 100, 3).await; // 1, 2, 3 at attempt 1
    fx.clock.advance(200);
    claimed(s, "s", "w", TTL, 1).await; // 1 at attempt 2
    completed(s, "s", 1, 2, vec![ev("r")]).await; // 6, pending
    failed(s, "s", 2, 1, 1, None).await; // 2 dead-lettered
    claimed(s, "s", "w", TTL, 1).await; // 3 at attempt 2
    failed(s, "s", 3, 2, 5, None).await; // 3 failed once, pending
    fx.clock.advance(30);
    append(s, "s", vec![ev("f").settled()]).await; // 7
    append(s, "t", vec![ev("x")]).await;
    let rows = read_all(s, "s").await;
    let summary = all_sessions(s)
        .await
        .into_iter()
        .find(|x| x.session_id == "s");
    let expected = SessionSummary {
        session_id: "s".into(),
        event_count: 7,
        pending_count: rows.iter().filter(|r| r.is_pending()).count() as u64,
        failed_count: 1,
        attempt_count: rows.iter().map(|r| u64::from(r.attempt_count)).sum(),
        failure_count: rows.iter().map(|r| u64::from(r.failure_count)).sum(),
        first_event_at: START_MS + 10,
        updated_at: START_MS + 240,
        first_index: 1,
        closed_at: None,
        deadline: None,
        forked_from: None,
    };
    assert_eq!(expected.pending_count, 3, "3, 5 and 6 are pending");
    assert_eq!(expected.attempt_count, 5);
    assert_eq!(expected.failure_count, 2);
    assert_eq!(summary, Some(expected), "I1: counters");
}

/// I1: sessions come in byte order of id, filtered by a literal prefix, a
/// page at a time, each exactly once.
pub async fn i1_list_sessions_byte_order_prefix_and_pages(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let mut ids = vec![
        "b", "a", "a:b", "ab", "é", "Z", "a b", "aa", "a\u{0}", "~", "😀",
    ];
    for id in &ids {
        append(s, id, vec![ev("x").settled()]).await;
    }
    ids.sort();
    for limit in [1, 2, 5, 100] {
        assert_eq!(
            list_all(s, None, limit).await,
            ids,
            "I1: byte order (limit {limit})"
        );
    }
    let with_a: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| id.starts_with('a'))
        .collect();
    assert_eq!(with_a.len(), 6);
    for limit in [1, 4, 100] {
        assert_eq!(
            list_all(s, Some("a"), limit).await,
            with_a,
            "I1: prefix a (limit {limit})"
        );
    }
    assert_eq!(list_all(s, Some("a:"), 10).await, ["a:b"]);
    assert_eq!(list_all(fx.peer.as_ref(), Some("é"), 10).await, ["é"]);
    assert!(list_all(s, Some("nothing"), 10).await.is_empty());
    let (first, cursor) = list(s, None, None, 3).await;
    assert_eq!(first, ids[..3].to_vec());
    assert!(cursor.is_some(), "I1: a cursor while more remain");
}

/// I2: `read_events` pages with a frontier frozen by the first page, so
/// events appended meanwhile do not shift the pages.
pub async fn i2_read_events_freezes_the_frontier(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let rows = append_n(s, "s", 5).await;
    let page = |after_index: u64, through_index: Option<u64>| async move {
        let options = ReadEventsOptions::new(2)
            .after_index(after_index)
            .through_index(through_index);
        match s.read_events("s", options).await {
            Ok(page) => page,
            Err(err) => panic!("read_events failed: {err}"),
        }
    };
    let first = page(0, None).await;
    assert_eq!(first.events, rows[..2].to_vec(), "I2: the first page");
    assert_eq!(first.through_index, 5, "I2: the frontier is frozen");
    append_n(s, "s", 3).await;
    let second = page(2, Some(first.through_index)).await;
    assert_eq!(indexes(&second.events), [3, 4]);
    assert_eq!(second.through_index, 5);
    let third = page(4, Some(5)).await;
    assert_eq!(
        indexes(&third.events),
        [5],
        "I2: stops at the frozen frontier"
    );
    assert!(page(5, Some(5)).await.events.is_empty());
    let fresh = page(5, None).await;
    assert_eq!(
        (indexes(&fresh.events), fresh.through_index),
        (vec![6, 7], 8)
    );
    let unknown = s
        .read_events("none", ReadEventsOptions::new(5))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(unknown.events.is_empty());
}

/// I3: `list_snapshots` lists a session's snapshots by reducer name with
/// their index and write time.
pub async fn i3_list_snapshots_by_reducer_name(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 5).await;
    assert!(
        s.list_snapshots("s")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_empty()
    );
    fx.clock.advance(1);
    put(
        s,
        "s",
        vec![snap("zeta", 2, json!(2)), snap("alpha", 1, json!(1))],
    )
    .await;
    fx.clock.advance(1);
    put(
        s,
        "s",
        vec![snap("mid", 5, json!(5)), snap("alpha", 4, json!(4))],
    )
    .await;
    fx.clock.advance(1);
    put(s, "s", vec![snap("zeta", 1, json!("older"))]).await;
    let listed = fx
        .peer
        .list_snapshots("s")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let info = |reducer: &str, index, updated_at| SnapshotInfo {
        reducer: reducer.into(),
        index,
        updated_at,
    };
    assert_eq!(
        listed,
        [
            info("alpha", 4, START_MS + 2),
            info("mid", 5, START_MS + 2),
            info("zeta", 2, START_MS + 1)
        ],
        "I3"
    );
    assert!(
        s.list_snapshots("other")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_empty()
    );
}

/// I4: `clear` deletes the session entirely (events, processing records,
/// snapshots, presence of its namespace, its ids, its listing) and nothing
/// of any other session.
pub async fn i4_clear_deletes_the_session_entirely(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    for session in ["s", "t", "s:t"] {
        append(
            s,
            session,
            vec![
                ev_id(&format!("{session}-1")),
                ev_id(&format!("{session}-2")).lane("l"),
            ],
        )
        .await;
        claimed(s, session, "w", TTL, 1).await;
        put(s, session, vec![snap("r", 1, json!(session))]).await;
        set(s, session, "ann", &[("here", json!(session))], 1, 60_000).await;
    }
    let keep = world(s, &["t", "s:t"]).await.without("s");
    fx.peer.clear("s").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(read_all(s, "s").await.is_empty(), "I4: events");
    assert!(
        s.list_snapshots("s")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_empty(),
        "I4: snapshots"
    );
    assert_eq!(state(s, "s", "r").await.snapshot, None, "I4: snapshots");
    assert!(entries(s, "s").await.is_empty(), "I4: presence");
    assert!(
        !all_sessions(s).await.iter().any(|x| x.session_id == "s"),
        "I4: listing"
    );
    assert!(
        !all_pending(s).await.iter().any(|x| x == "s"),
        "I4: pending listing"
    );
    assert_eq!(
        world(s, &["t", "s:t"]).await,
        keep,
        "I4: other sessions untouched"
    );
    // Its ids are free again, in any session; its indexes start over.
    let reused = append(s, "u", vec![ev_id("s-1")]).await;
    assert_eq!(indexes(&reused), [1], "I4: ids removed from the id index");
    let again = append(s, "s", vec![ev_id("s-2")]).await;
    assert_eq!(indexes(&again), [1], "I4: the session starts over");
    assert_eq!(
        again[0].attempt_count, 0,
        "I4: no processing record survives"
    );
    assert_eq!(
        claims_of(&claimed(s, "s", "w", TTL, 5).await),
        [at(1, 1)],
        "I4: no lane state survives"
    );
    fx.peer
        .clear("never-existed")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
