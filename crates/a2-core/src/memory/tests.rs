//! Unit tests of the memory store internals: lane readiness, the busy time,
//! counters, and races between concurrent callers.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::clock::{ManualClock, SequentialIds};

const T0: Millis = 1_000_000;

fn store() -> (MemoryStore, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    let options = StoreOptions::default()
        .with_clock(clock.clone())
        .with_ids(Arc::new(SequentialIds::new("e")));
    (MemoryStore::new(options), clock)
}

/// Checks every maintained structure of every session against its log.
fn check(store: &MemoryStore) {
    let state = store.inner.lock().unwrap();
    for (id, session) in &state.sessions {
        session.check_invariants();
        assert_eq!(state.pending.contains(id), session.has_pending());
        for rec in session.all() {
            let (owner, index) = &state.ids[&rec.ev.event.id];
            assert_eq!(owner, id);
            assert_eq!(*index, rec.ev.event.index);
        }
    }
    assert!(state.pending.iter().all(|s| state.sessions.contains_key(s)));
}

fn ev(t: &str) -> NewEvent {
    NewEvent::new(t, json!(null))
}

fn claim_req(session: &str, limit: usize) -> ClaimRequest {
    ClaimRequest {
        session: session.into(),
        holder: "w".into(),
        lease: Lease::Ttl(1_000),
        exclude_indexes: vec![],
        limit,
    }
}

fn claimed_indexes(outcome: ClaimOutcome) -> Vec<u64> {
    match outcome {
        ClaimOutcome::Claimed(events) => events.iter().map(|e| e.event.index).collect(),
        other => panic!("expected a claim, got {other:?}"),
    }
}

async fn complete(store: &MemoryStore, session: &str, index: u64, attempt: u32) {
    let outcome = store
        .complete_attempt(CompleteRequest {
            session: session.into(),
            index,
            attempt,
            events: vec![],
        })
        .await
        .unwrap();
    assert!(matches!(outcome, CompleteOutcome::Completed { .. }));
}

#[tokio::test]
async fn lane_head_only_is_ready_and_completion_advances_the_lane() {
    let (store, _) = store();
    store
        .append(
            "s",
            vec![
                ev("a").lane("L"),
                ev("b").lane("L"),
                ev("c"),
                ev("d").lane("M"),
            ],
        )
        .await
        .unwrap();
    check(&store);
    let first = claimed_indexes(store.claim_available(claim_req("s", 10)).await.unwrap());
    assert_eq!(first, vec![1, 3, 4]);
    check(&store);
    complete(&store, "s", 1, 1).await;
    check(&store);
    let next = claimed_indexes(store.claim_available(claim_req("s", 10)).await.unwrap());
    assert_eq!(next, vec![2]);
    check(&store);
}
