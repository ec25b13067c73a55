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
        ClaimOutcome::Claimed { events, .. } => events.iter().map(|e| e.event.index).collect(),
        other => panic!("expected a claim, got {other:?}"),
    }
}

async fn complete(store: &MemoryStore, session: &str, index: u64, attempt: u32) {
    let outcome = store
        .complete_attempt(CompleteRequest::new(session, index, attempt))
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

async fn fail(
    store: &MemoryStore,
    index: u64,
    attempt: u32,
    max_failures: u32,
    retry_at: Option<Millis>,
) -> FailOutcome {
    store
        .fail_attempt(FailRequest {
            session: "s".into(),
            index,
            attempt,
            error: "boom".into(),
            max_failures,
            retry_at,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn settled_events_are_never_ready_and_do_not_block_their_lane() {
    let (store, _) = store();
    let out = store
        .append("s", vec![ev("a").lane("L").settled(), ev("b").lane("L")])
        .await
        .unwrap();
    assert_eq!(out.events[0].processed_at, Some(T0));
    assert_eq!(out.events[0].processed_by_attempt, None);
    assert!(out.has_pending);
    check(&store);
    let claimed = claimed_indexes(store.claim_available(claim_req("s", 10)).await.unwrap());
    assert_eq!(claimed, vec![2]);
}

#[tokio::test]
async fn dead_lettered_head_blocks_its_lane_but_not_others() {
    let (store, _) = store();
    store
        .append("s", vec![ev("a").lane("L"), ev("b").lane("L"), ev("c")])
        .await
        .unwrap();
    assert_eq!(
        claimed_indexes(store.claim_available(claim_req("s", 1)).await.unwrap()),
        vec![1]
    );
    let out = fail(&store, 1, 1, 1, None).await;
    assert_eq!(out.outcome, FailKind::DeadLettered);
    check(&store);
    assert_eq!(
        claimed_indexes(store.claim_available(claim_req("s", 10)).await.unwrap()),
        vec![3]
    );
    complete(&store, "s", 3, 1).await;
    // Only event 2 is pending, behind the dead-lettered head: C4.
    assert_eq!(
        store.claim_available(claim_req("s", 10)).await.unwrap(),
        ClaimOutcome::Settled
    );
    let list = store
        .list_sessions(ListSessionsOptions {
            prefix: None,
            cursor: None,
            limit: 10,
        })
        .await
        .unwrap();
    let summary = &list.sessions[0];
    assert_eq!(
        (
            summary.event_count,
            summary.pending_count,
            summary.failed_count,
            summary.attempt_count,
            summary.failure_count
        ),
        (3, 1, 1, 2, 1)
    );
    check(&store);
}

/// RV2 on the internals: a revived dead head is ready again, its lane
/// follows it, and every counter and ready set agrees with the log.
#[tokio::test]
async fn revived_head_is_ready_again_and_its_lane_follows() {
    let (store, _) = store();
    store
        .append("s", vec![ev("a").lane("L"), ev("b").lane("L"), ev("c")])
        .await
        .unwrap();
    claimed_indexes(store.claim_available(claim_req("s", 1)).await.unwrap());
    fail(&store, 1, 1, 1, None).await;
    check(&store);
    let revived = store.revive("s", 1).await.unwrap();
    let ReviveOutcome::Revived(row) = revived else {
        panic!("expected Revived, got {revived:?}");
    };
    assert_eq!((row.failed_at, row.failure_count), (None, 0));
    check(&store);
    assert_eq!(
        claimed_indexes(store.claim_available(claim_req("s", 10)).await.unwrap()),
        vec![1, 3]
    );
    check(&store);
    complete(&store, "s", 1, 2).await;
    check(&store);
    assert_eq!(
        claimed_indexes(store.claim_available(claim_req("s", 10)).await.unwrap()),
        vec![2]
    );
    assert!(matches!(
        store.revive("s", 1).await.unwrap(),
        ReviveOutcome::NotDeadLettered(_)
    ));
    check(&store);
}

#[tokio::test]
async fn busy_reports_the_earliest_lease_or_retry_time_ignoring_excluded() {
    let (store, clock) = store();
    store
        .append("s", vec![ev("a"), ev("b"), ev("c")])
        .await
        .unwrap();
    // 1 leased until T0+1000, 2 leased until T0+500, 3 failed with retry at T0+200.
    let mut req = claim_req("s", 1);
    claimed_indexes(store.claim_available(req.clone()).await.unwrap());
    req.lease = Lease::Ttl(500);
    claimed_indexes(store.claim_available(req.clone()).await.unwrap());
    claimed_indexes(store.claim_available(claim_req("s", 1)).await.unwrap());
    fail(&store, 3, 1, 5, Some(T0 + 200)).await;
    check(&store);
    assert_eq!(
        store.claim_available(claim_req("s", 10)).await.unwrap(),
        ClaimOutcome::Busy { retry_at: T0 + 200 }
    );
    let mut excluding = claim_req("s", 10);
    excluding.exclude_indexes = vec![3];
    assert_eq!(
        store.claim_available(excluding.clone()).await.unwrap(),
        ClaimOutcome::Busy { retry_at: T0 + 500 }
    );
    excluding.exclude_indexes = vec![1, 2, 3];
    assert_eq!(
        store.claim_available(excluding).await.unwrap(),
        ClaimOutcome::Settled
    );
    // The retry time comes: 3 is claimable again, as attempt 2.
    clock.advance(200);
    let ClaimOutcome::Claimed { events: rows, .. } =
        store.claim_available(claim_req("s", 10)).await.unwrap()
    else {
        panic!("expected a claim");
    };
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].event.index, rows[0].attempt_count), (3, 2));
    assert_eq!(rows[0].retry_at, None);
    // The leases expire: anyone may claim 1 and 2 (C5).
    clock.advance(1_000);
    assert_eq!(
        claimed_indexes(store.claim_available(claim_req("s", 10)).await.unwrap()),
        vec![1, 2, 3]
    );
    check(&store);
}

#[tokio::test]
async fn a_clock_moved_backward_never_brings_back_a_lease_that_ran_out() {
    let (store, clock) = store();
    store.append("s", vec![ev("a")]).await.unwrap();
    claimed_indexes(store.claim_available(claim_req("s", 1)).await.unwrap());
    clock.advance(5_000);
    // A claim at T0+5000 frees the expired lease...
    let mut other = claim_req("s", 1);
    other.exclude_indexes = vec![1];
    store.claim_available(other).await.unwrap();
    check(&store);
    // ...and back at T0 the store still reads T0+5000 (EX3): the lease
    // (until T0+1000) stays run out and the new claim is stamped then.
    clock.set(T0);
    let ClaimOutcome::Claimed { events: rows, .. } =
        store.claim_available(claim_req("s", 1)).await.unwrap()
    else {
        panic!("expected a claim");
    };
    assert_eq!(
        (rows[0].attempt_count, rows[0].last_claimed_at),
        (2, Some(T0 + 5_000))
    );
    assert_eq!(rows[0].claim_expires_at, Some(T0 + 6_000));
    check(&store);
}

#[tokio::test]
async fn renew_and_release_keep_the_ready_sets_exact() {
    let (store, clock) = store();
    store.append("s", vec![ev("a"), ev("b")]).await.unwrap();
    claimed_indexes(store.claim_available(claim_req("s", 10)).await.unwrap());
    let claims = vec![
        Claim {
            index: 2,
            attempt: 1,
        },
        Claim {
            index: 1,
            attempt: 1,
        },
    ];
    let renewed = store
        .renew_claims(RenewRequest {
            session: "s".into(),
            holder: "w".into(),
            claims: claims.clone(),
            lease: Lease::Ttl(10_000),
        })
        .await
        .unwrap();
    assert_eq!(renewed.renewed, vec![1, 2]);
    check(&store);
    clock.advance(5_000);
    assert_eq!(
        store.claim_available(claim_req("s", 10)).await.unwrap(),
        ClaimOutcome::Busy {
            retry_at: T0 + 10_000
        }
    );
    let released = store
        .release_claims(ReleaseRequest {
            session: "s".into(),
            holder: "w".into(),
            claims: vec![claims[0]],
        })
        .await
        .unwrap();
    assert_eq!(released, vec![2]);
    check(&store);
    let ClaimOutcome::Claimed { events: rows, .. } =
        store.claim_available(claim_req("s", 10)).await.unwrap()
    else {
        panic!("expected a claim");
    };
    assert_eq!((rows[0].event.index, rows[0].attempt_count), (2, 2));
    // The released attempt can no longer complete.
    let late = store
        .complete_attempt(CompleteRequest::new("s", 2, 1))
        .await
        .unwrap();
    assert_eq!(late, CompleteOutcome::Superseded);
    check(&store);
}

#[tokio::test]
async fn counters_follow_every_write_and_pending_sessions_follow_pending_counts() {
    let (store, clock) = store();
    store.append("a", vec![ev("x")]).await.unwrap();
    clock.advance(10);
    store.append("b", vec![ev("x").settled()]).await.unwrap();
    store.append("c", vec![ev("x"), ev("y")]).await.unwrap();
    let page = store
        .pending_sessions(PageRequest {
            cursor: None,
            limit: 1,
        })
        .await
        .unwrap();
    assert_eq!(page.sessions, vec!["a".to_string()]);
    let page = store
        .pending_sessions(PageRequest {
            cursor: page.cursor,
            limit: 1,
        })
        .await
        .unwrap();
    assert_eq!(page.sessions, vec!["c".to_string()]);
    assert_eq!(page.cursor, None);
    clock.advance(10);
    claimed_indexes(store.claim_available(claim_req("a", 1)).await.unwrap());
    complete(&store, "a", 1, 1).await;
    check(&store);
    let list = store
        .list_sessions(ListSessionsOptions {
            prefix: None,
            cursor: None,
            limit: 2,
        })
        .await
        .unwrap();
    assert_eq!(list.cursor.as_deref(), Some("b"));
    let a = &list.sessions[0];
    assert_eq!((a.event_count, a.pending_count, a.attempt_count), (1, 0, 1));
    assert_eq!((a.first_event_at, a.updated_at), (T0, T0 + 20));
    let page = store
        .pending_sessions(PageRequest {
            cursor: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(page.sessions, vec!["c".to_string()]);
    store.clear("c").await.unwrap();
    check(&store);
    let page = store
        .pending_sessions(PageRequest {
            cursor: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert!(page.sessions.is_empty());
    // The cleared ids are free again.
    store.append("d", vec![ev("x").id("e3")]).await.unwrap();
    check(&store);
}

#[tokio::test]
async fn retries_and_partial_duplicates() {
    let (store, _) = store();
    let first = store
        .append("s", vec![ev("a").id("x"), ev("b").id("y")])
        .await
        .unwrap();
    let again = store
        .append("s", vec![ev("b").id("y"), ev("a").id("x")])
        .await
        .unwrap();
    assert_eq!(again.events, first.events);
    let changed = store
        .append("s", vec![NewEvent::new("a", json!(1)).id("x")])
        .await
        .unwrap_err();
    assert_eq!(changed.code(), crate::ErrorCode::PartialDuplicateBatch);
    let partial = store
        .append("s", vec![ev("a").id("x"), ev("c").id("z")])
        .await
        .unwrap_err();
    assert_eq!(partial.code(), crate::ErrorCode::PartialDuplicateBatch);
    // An id of another session names another event there (A4).
    let other = store.append("t", vec![ev("a").id("x")]).await.unwrap();
    assert_eq!(other.events[0].event.index, 1);
    assert_eq!(
        store.read("s", ReadRange::default()).await.unwrap().len(),
        2
    );
    assert_eq!(
        store.read("t", ReadRange::default()).await.unwrap().len(),
        1
    );
    check(&store);
}

#[tokio::test]
async fn a_retry_compares_payloads_as_values_not_as_stored_text() {
    let (store, _) = store();
    let first = store
        .append("s", vec![NewEvent::new("a", json!({"x": 0.0})).id("x")])
        .await
        .unwrap();
    // -0.0 == 0.0 as a value, though their JSON texts differ.
    let again = store
        .append("s", vec![NewEvent::new("a", json!({"x": -0.0})).id("x")])
        .await
        .unwrap();
    assert_eq!(again.events, first.events);
    let other = store
        .append("s", vec![NewEvent::new("a", json!({"x": 0})).id("x")])
        .await
        .unwrap_err();
    assert_eq!(other.code(), crate::ErrorCode::PartialDuplicateBatch);
    check(&store);
}

#[tokio::test]
async fn the_reply_and_every_read_give_the_payload_appended() {
    let (store, _) = store();
    let payload = json!({
        "float": 0.1, "neg": -0.0, "big": u64::MAX, "small": i64::MIN, "exp": 1e300,
        "text": "quote \" backslash \\ newline \n nul \u{0} é 🦀",
        "nested": [[[{}]], [], null, true],
    });
    let appended = store
        .append("s", vec![NewEvent::new("a", payload.clone())])
        .await
        .unwrap();
    assert_eq!(appended.events[0].event.payload, payload);
    let read = store.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(read, appended.events);
    let state = store.read_state("s", "r").await.unwrap();
    assert_eq!(state.events[0].payload, payload);
    let mut feed = store.stream("s", 0);
    assert_eq!(next(&mut feed).await.unwrap().payload, payload);
}

#[tokio::test]
async fn eight_tasks_appending_get_dense_indexes() {
    let (store, _) = store();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut indexes = Vec::new();
                for _ in 0..200 {
                    let out = store.append("race", vec![ev("x")]).await.unwrap();
                    indexes.push(out.events[0].event.index);
                }
                indexes
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort_unstable();
    assert_eq!(all, (1..=1600).collect::<Vec<u64>>());
    check(&store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_tasks_claiming_never_share_an_attempt() {
    let (store, clock) = store();
    for _ in 0..10 {
        let batch = (0..40)
            .map(|i| ev("x").lane(format!("l{}", i % 7)))
            .collect();
        store.append("race", batch).await.unwrap();
    }
    let tasks: Vec<_> = (0..8)
        .map(|worker| {
            let store = store.clone();
            let clock = clock.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                for round in 0..400 {
                    let mut req = claim_req("race", 3);
                    req.holder = format!("w{worker}");
                    req.lease = Lease::Ttl(50);
                    if let ClaimOutcome::Claimed { events: rows, .. } =
                        store.claim_available(req).await.unwrap()
                    {
                        for row in rows {
                            got.push((row.event.index, row.attempt_count));
                            // Complete some, abandon others to expire.
                            if (row.event.index + round) % 3 != 0 {
                                let _ = store
                                    .complete_attempt(CompleteRequest::new(
                                        "race",
                                        row.event.index,
                                        row.attempt_count,
                                    ))
                                    .await
                                    .unwrap();
                            }
                        }
                    }
                    clock.advance(7);
                    tokio::task::yield_now().await;
                }
                got
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let unique: HashSet<_> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "an attempt was handed out twice");
    assert!(!all.is_empty());
    check(&store);
}

use futures::StreamExt;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

async fn next<T>(stream: &mut futures::stream::BoxStream<'static, Result<T>>) -> Result<T> {
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("the feed did not yield in time")
        .expect("the feed ended")
}

async fn follow_catches_up_then_goes_live() {
    let (store, _) = store();
    let backlog: Vec<_> = (0..600).map(|_| ev("x")).collect();
    store.append("s", backlog).await.unwrap();
    let mut feed = store.stream("s", 100);
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for _ in 0..300 {
                store.append("s", vec![ev("y")]).await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    for expected in 101..=900 {
        assert_eq!(next(&mut feed).await.unwrap().index, expected);
    }
    writer.await.unwrap();
    drop(feed);
    // The session's shared reader stops once its last follower is gone.
    let deadline = tokio::time::Instant::now() + WAIT;
    while !store.inner.lock().unwrap().feeds.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the shared reader kept its feed"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(store.feed_stats().readers, 0);
    assert_eq!(store.feed_stats().followers, 0);
}

#[tokio::test]
async fn a_feed_is_exact_on_a_current_thread_runtime() {
    follow_catches_up_then_goes_live().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_is_exact_on_a_multi_thread_runtime() {
    follow_catches_up_then_goes_live().await;
}

#[tokio::test]
async fn close_ends_feeds_and_later_calls() {
    let (store, _) = store();
    store.append("s", vec![ev("x")]).await.unwrap();
    let mut feed = store.stream("s", 0);
    let mut presence = store.presence_subscribe("s").await.unwrap();
    assert_eq!(next(&mut feed).await.unwrap().index, 1);
    let waiting = tokio::spawn(async move {
        let result = next(&mut feed).await;
        (result, feed.next().await.is_none())
    });
    tokio::task::yield_now().await;
    store.close().await;
    let (result, ended) = waiting.await.unwrap();
    assert_eq!(result.unwrap_err().code(), crate::ErrorCode::StoreClosed);
    assert!(ended);
    assert_eq!(
        next(&mut presence).await.unwrap_err().code(),
        crate::ErrorCode::StoreClosed
    );
    let later = store.append("s", vec![ev("x")]).await.unwrap_err();
    assert_eq!(later.code(), crate::ErrorCode::StoreClosed);
    let mut late_feed = store.stream("s", 0);
    assert_eq!(
        next(&mut late_feed).await.unwrap_err().code(),
        crate::ErrorCode::StoreClosed
    );
    let Err(late_presence) = store.presence_subscribe("s").await else {
        panic!("a presence subscription of a closed store");
    };
    assert_eq!(late_presence.code(), crate::ErrorCode::StoreClosed);
}

#[tokio::test]
async fn a_presence_subscription_to_an_invalid_namespace_is_refused() {
    let (store, _) = store();
    let Err(error) = store.presence_subscribe("").await else {
        panic!("a presence subscription to the empty namespace");
    };
    assert_eq!(error.code(), crate::ErrorCode::InvalidArgument);
}

#[tokio::test]
async fn a_feed_for_an_invalid_session_fails_once() {
    let (store, _) = store();
    let mut feed = store.stream("", 0);
    assert_eq!(
        next(&mut feed).await.unwrap_err().code(),
        crate::ErrorCode::InvalidArgument
    );
    assert!(feed.next().await.is_none());
}

fn meta(at: Millis) -> PresenceMeta {
    PresenceMeta {
        seen: 7,
        at,
        ttl_ms: 1_000,
    }
}

fn values(pairs: &[(&str, Option<Value>)]) -> BTreeMap<String, Option<Value>> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}

#[tokio::test]
async fn presence_is_last_writer_wins_per_field_and_expires_on_the_store_clock() {
    let (store, clock) = store();
    let applied = store
        .presence_set(
            "ns",
            "p",
            values(&[("a", Some(json!(1))), ("b", Some(json!(1)))]),
            meta(50),
        )
        .await
        .unwrap();
    assert_eq!(applied.unwrap().values.len(), 2);
    // Older for both: nothing applies.
    let stale = store
        .presence_set("ns", "p", values(&[("a", Some(json!(2)))]), meta(40))
        .await
        .unwrap();
    assert_eq!(stale, None);
    // A tie goes to the incoming write; null deletes.
    let tie = store
        .presence_set(
            "ns",
            "p",
            values(&[("a", Some(json!(3))), ("b", None)]),
            meta(50),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tie.values, values(&[("a", Some(json!(3))), ("b", None)]));
    store
        .presence_set("ns", "o", values(&[("z", Some(json!(0)))]), meta(1))
        .await
        .unwrap();
    let rows = store.presence_read("ns").await.unwrap();
    let keys: Vec<_> = rows
        .iter()
        .map(|r| (r.participant.as_str(), r.field.as_str(), r.expires_at))
        .collect();
    assert_eq!(keys, vec![("o", "z", T0 + 1_000), ("p", "a", T0 + 1_000)]);
    clock.advance(1_000);
    assert!(store.presence_read("ns").await.unwrap().is_empty());
    assert!(store.inner.lock().unwrap().presence.is_empty());
}

#[tokio::test]
async fn a_lagging_presence_subscriber_recovers_the_current_state() {
    let (store, _) = store();
    store
        .presence_set("ns", "p", values(&[("gone", Some(json!(0)))]), meta(1))
        .await
        .unwrap();
    let mut sub = store.presence_subscribe("ns").await.unwrap();
    for i in 0..(feed::PRESENCE_BUFFER as i64 + 10) {
        store
            .presence_set("ns", "p", values(&[("n", Some(json!(i)))]), meta(10 + i))
            .await
            .unwrap();
    }
    store
        .presence_set("ns", "p", values(&[("gone", None)]), meta(10_000))
        .await
        .unwrap();
    let patch = next(&mut sub).await.unwrap();
    let last = feed::PRESENCE_BUFFER as i64 + 9;
    assert_eq!(
        patch.values,
        values(&[("gone", None), ("n", Some(json!(last)))])
    );
    store
        .presence_set("ns", "q", values(&[("x", Some(json!(1)))]), meta(1))
        .await
        .unwrap();
    assert_eq!(next(&mut sub).await.unwrap().participant, "q");
}

/// Random operation sequences, with the clock moving both ways: after every
/// operation the maintained sets agree with the log, and every claim's
/// outcome equals the one computed naively by scanning the session's rows.
mod model {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Append(Vec<(Option<u8>, bool)>),
        Claim {
            limit: usize,
            exclude: Vec<u64>,
            ttl: u64,
        },
        Complete {
            index: u64,
            attempt_delta: u8,
        },
        Fail {
            index: u64,
            max: u32,
            retry: Option<i64>,
        },
        Renew {
            index: u64,
            ttl: u64,
        },
        Release {
            index: u64,
        },
        Revive {
            index: u64,
        },
        Clock(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => prop::collection::vec((prop::option::of(0u8..3), prop::bool::weighted(0.15)), 1..4)
                .prop_map(Op::Append),
            4 => (1usize..4, prop::collection::vec(1u64..12, 0..3), 1u64..300)
                .prop_map(|(limit, exclude, ttl)| Op::Claim { limit, exclude, ttl }),
            3 => (1u64..12, 0u8..3).prop_map(|(index, attempt_delta)| Op::Complete { index, attempt_delta }),
            2 => (1u64..12, 1u32..4, prop::option::of(-50i64..300))
                .prop_map(|(index, max, retry)| Op::Fail { index, max, retry }),
            1 => (1u64..12, 1u64..300).prop_map(|(index, ttl)| Op::Renew { index, ttl }),
            1 => (1u64..12).prop_map(|index| Op::Release { index }),
            1 => (1u64..12).prop_map(|index| Op::Revive { index }),
            2 => (-150i64..300).prop_map(Op::Clock),
        ]
    }

    /// C1, C2, C3, C4 computed from the rows alone.
    fn expected_claim(
        rows: &[StoredEvent],
        now: Millis,
        exclude: &[u64],
        limit: usize,
    ) -> ClaimOutcome {
        if !rows.iter().any(StoredEvent::is_pending) {
            return ClaimOutcome::Settled;
        }
        let mut heads: HashMap<&str, u64> = HashMap::default();
        for row in rows {
            if let (None, Some(lane)) = (row.processed_at, row.event.lane.as_deref()) {
                heads.entry(lane).or_insert(row.event.index);
            }
        }
        let mut claimable = Vec::new();
        let mut earliest: Option<Millis> = None;
        for row in rows {
            let index = row.event.index;
            let ready = row.is_pending()
                && row
                    .event
                    .lane
                    .as_deref()
                    .is_none_or(|lane| heads[lane] == index);
            if !ready || exclude.contains(&index) {
                continue;
            }
            let wait = match (
                row.claim_holder.as_ref(),
                row.claim_expires_at,
                row.retry_at,
            ) {
                (Some(_), Some(at), _) if at > now => Some(at),
                (_, _, Some(at)) if row.claim_holder.is_none() && at > now => Some(at),
                _ => None,
            };
            match wait {
                Some(at) => earliest = Some(earliest.map_or(at, |e| e.min(at))),
                None => claimable.push(index),
            }
        }
        if !claimable.is_empty() {
            claimable.truncate(limit);
            // Only the indexes are compared.
            return ClaimOutcome::Claimed {
                events: claimable
                    .iter()
                    .map(|&i| rows[(i - 1) as usize].clone())
                    .collect(),
                next_at: None,
            };
        }
        match earliest {
            Some(retry_at) => ClaimOutcome::Busy { retry_at },
            None => ClaimOutcome::Settled,
        }
    }

    fn indexes(outcome: &ClaimOutcome) -> Result<Vec<u64>, String> {
        match outcome {
            ClaimOutcome::Claimed { events: rows, .. } => {
                Ok(rows.iter().map(|r| r.event.index).collect())
            }
            other => Err(format!("{other:?}")),
        }
    }

    fn run(ops: Vec<Op>) -> std::result::Result<(), TestCaseError> {
        let manual = Arc::new(ManualClock::new(T0));
        // The model reads time as the store does, never backward (EX3):
        // through one monotonic clock that the store reads too, so the
        // latest time either of them read is the store's now.
        let clock = Arc::new(crate::MonotonicClock::new(manual.clone()));
        let store = MemoryStore::new(
            StoreOptions::default()
                .with_clock(clock.clone())
                .with_ids(Arc::new(SequentialIds::new("e"))),
        );
        for op in ops {
            let now = clock.now_ms();
            let rows = store.read_sync("s", ReadRange::default()).unwrap();
            let attempt_of = |index: u64| {
                rows.get((index as usize).wrapping_sub(1))
                    .map_or(1, |r| r.attempt_count)
            };
            match op {
                Op::Append(events) => {
                    let batch = events
                        .into_iter()
                        .map(|(lane, settled)| {
                            let mut e = ev("t");
                            if let Some(lane) = lane {
                                e = e.lane(format!("lane{lane}"));
                            }
                            if settled {
                                e = e.settled();
                            }
                            e
                        })
                        .collect();
                    store
                        .append_sync("s", batch, None, None, None, false)
                        .unwrap();
                }
                Op::Claim {
                    limit,
                    exclude,
                    ttl,
                } => {
                    let expected = expected_claim(&rows, now, &exclude, limit);
                    let actual = store
                        .claim_sync(ClaimRequest {
                            session: "s".into(),
                            holder: "w".into(),
                            lease: Lease::Ttl(ttl),
                            exclude_indexes: exclude,
                            limit,
                        })
                        .unwrap();
                    prop_assert_eq!(indexes(&actual), indexes(&expected));
                }
                Op::Complete {
                    index,
                    attempt_delta,
                } => {
                    let attempt = attempt_of(index).saturating_sub(u32::from(attempt_delta));
                    let _ = store.complete_sync(CompleteRequest::new("s", index, attempt));
                }
                Op::Fail { index, max, retry } => {
                    let _ = store.fail_sync(FailRequest {
                        session: "s".into(),
                        index,
                        attempt: attempt_of(index),
                        error: "e".into(),
                        max_failures: max,
                        retry_at: retry.map(|d| now + d),
                    });
                }
                Op::Renew { index, ttl } => {
                    store
                        .renew_sync(RenewRequest {
                            session: "s".into(),
                            holder: "w".into(),
                            claims: vec![Claim {
                                index,
                                attempt: attempt_of(index),
                            }],
                            lease: Lease::Ttl(ttl),
                        })
                        .unwrap();
                }
                Op::Release { index } => {
                    store
                        .release_sync(ReleaseRequest {
                            session: "s".into(),
                            holder: "w".into(),
                            claims: vec![Claim {
                                index,
                                attempt: attempt_of(index),
                            }],
                        })
                        .unwrap();
                }
                Op::Revive { index } => {
                    let _ = store.revive_sync("s", index);
                }
                Op::Clock(delta) => manual.advance(delta),
            }
            check(&store);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn ready_sets_match_a_scan_of_the_log(ops in prop::collection::vec(op(), 1..60)) {
            run(ops)?;
        }
    }
}
