//! SPEC §4 state: S1, S2.

use a2_core::{ErrorCode, Snapshot, SnapshotWrite, StateRead, Store};
use serde_json::{Value, json};

use crate::support::*;
use crate::{SetupFn, fixture};

pub(crate) fn snap(reducer: &str, index: u64, state: Value) -> SnapshotWrite {
    SnapshotWrite {
        reducer: reducer.into(),
        index,
        state,
    }
}

pub(crate) async fn put(store: &dyn Store, session: &str, snapshots: Vec<SnapshotWrite>) {
    if let Err(err) = store.put_snapshots(session, snapshots).await {
        panic!("put_snapshots to {session:?} failed: {err}");
    }
}

pub(crate) async fn state(store: &dyn Store, session: &str, reducer: &str) -> StateRead {
    match store.read_state(session, reducer).await {
        Ok(state) => state,
        Err(err) => panic!("read_state of {session:?}/{reducer:?} failed: {err}"),
    }
}

fn event_indexes(read: &StateRead) -> Vec<u64> {
    read.events.iter().map(|e| e.index).collect()
}

/// S1: the reducer's snapshot, if any, and every event after its index up
/// to the frontier.
pub async fn s1_read_state_returns_snapshot_and_newer_events(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let empty = state(s, "s", "count").await;
    assert_eq!(
        empty,
        StateRead {
            snapshot: None,
            events: vec![]
        },
        "S1: unknown session"
    );
    let rows = append_n(s, "s", 5).await;
    let read = state(s, "s", "count").await;
    assert_eq!(read.snapshot, None);
    let events: Vec<_> = rows.iter().map(|r| r.event.clone()).collect();
    assert_eq!(read.events, events, "S1: every event without a snapshot");
    put(s, "s", vec![snap("count", 3, json!({ "n": 3 }))]).await;
    let read = state(fx.peer.as_ref(), "s", "count").await;
    assert_eq!(
        read.snapshot,
        Some(Snapshot {
            index: 3,
            state: json!({ "n": 3 })
        }),
        "S1: the snapshot"
    );
    assert_eq!(read.events, events[3..].to_vec(), "S1: the events after it");
    append_n(s, "s", 2).await;
    assert_eq!(event_indexes(&state(s, "s", "count").await), [4, 5, 6, 7]);
    put(s, "s", vec![snap("count", 7, json!(7))]).await;
    let read = state(s, "s", "count").await;
    assert_eq!(read.snapshot.map(|x| x.index), Some(7));
    assert!(read.events.is_empty(), "S1: a snapshot at the frontier");
    assert_eq!(
        state(s, "s", "other").await.events.len(),
        7,
        "S1: another reducer has no snapshot"
    );
}

/// S2: a snapshot is stored only if newer than the stored one; several
/// reducers in one call.
pub async fn s2_snapshot_never_moves_backward(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 10).await;
    put(
        s,
        "s",
        vec![snap("a", 5, json!("a5")), snap("b", 2, json!("b2"))],
    )
    .await;
    put(
        s,
        "s",
        vec![snap("a", 3, json!("a3")), snap("b", 4, json!("b4"))],
    )
    .await;
    let a = state(s, "s", "a").await;
    assert_eq!(
        a.snapshot,
        Some(Snapshot {
            index: 5,
            state: json!("a5")
        }),
        "S2: never backward"
    );
    assert_eq!(event_indexes(&a), [6, 7, 8, 9, 10]);
    let b = state(s, "s", "b").await;
    assert_eq!(
        b.snapshot,
        Some(Snapshot {
            index: 4,
            state: json!("b4")
        }),
        "S2: forward"
    );
    put(s, "s", vec![snap("a", 9, json!("a9"))]).await;
    put(fx.peer.as_ref(), "s", vec![snap("a", 6, json!("a6"))]).await;
    assert_eq!(
        state(s, "s", "a").await.snapshot.map(|x| x.state),
        Some(json!("a9"))
    );
}

/// S2: a snapshot index beyond the frontier is `InvalidArgument`; nothing
/// written, not even the valid snapshots of the same call.
pub async fn s2_snapshot_beyond_the_frontier_is_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 3).await;
    let before = world(s, &["s", "empty"]).await;
    fx.clock.advance(1);
    expect_code(
        s.put_snapshots("s", vec![snap("ok", 2, json!(2)), snap("bad", 4, json!(4))])
            .await,
        ErrorCode::InvalidArgument,
        "S2: beyond the frontier",
    );
    expect_code(
        s.put_snapshots("empty", vec![snap("r", 1, json!(1))]).await,
        ErrorCode::InvalidArgument,
        "S2: unknown session",
    );
    assert_eq!(
        world(s, &["s", "empty"]).await,
        before,
        "S2: nothing written"
    );
}
