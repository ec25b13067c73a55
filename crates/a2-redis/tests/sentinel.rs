//! Redis Sentinel (`redis+sentinel://`): a store finds the master through
//! real `redis-sentinel` processes and follows it through a failover
//! (`SENTINEL FAILOVER`) in the middle of a work cycle and a live feed.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2_core::*;
use a2_redis::testing::sentinel::RedisSentinels;
use a2_redis::testing::unique_prefix;
use a2_redis::{RedisOptions, RedisStore};
use futures::StreamExt;
use serde_json::json;

const SESSIONS: usize = 4;
const PER_SESSION: u64 = 120;

/// Retries a call that failed with `StoreUnavailable` (the master moving).
async fn retrying<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match call().await {
            Ok(value) => return value,
            Err(error) if error.code() == ErrorCode::StoreUnavailable => {
                assert!(Instant::now() < deadline, "{what}: {error:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("{what}: {error}"),
        }
    }
}

/// A feed of `session` from 0, opened again from its last index whenever
/// it ends with `StoreUnavailable` (ST5), until it delivered as many events
/// as `want` says (`None`: not known yet). Returns the ids it delivered.
async fn follow(
    store: Arc<RedisStore>,
    session: String,
    mut want: tokio::sync::watch::Receiver<Option<usize>>,
) -> Vec<String> {
    let mut got: Vec<Event> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    'open: loop {
        let mut feed = store.stream(&session, last_index(&got));
        loop {
            if want.borrow_and_update().is_some_and(|n| got.len() >= n) {
                return got.into_iter().map(|e| e.id).collect();
            }
            assert!(
                Instant::now() < deadline,
                "feed of {session} stalled at {}",
                got.len()
            );
            tokio::select! {
                next = feed.next() => match next {
                    Some(Ok(event)) => {
                        assert_eq!(event.index, last_index(&got) + 1, "ST1: in order, no gap");
                        got.push(event);
                    }
                    Some(Err(error)) if error.code() == ErrorCode::StoreUnavailable => {
                        continue 'open;
                    }
                    other => panic!("feed of {session}: {other:?}"),
                },
                _ = want.changed() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}

fn last_index(got: &[Event]) -> u64 {
    got.last().map_or(0, |e| e.index)
}

/// Claims and completes whatever is pending until `done` is set and
/// nothing is left; returns how many attempts it completed.
async fn work(store: Arc<RedisStore>, done: Arc<AtomicBool>) -> usize {
    let mut completed = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "the work cycle did not finish");
        let page = retrying("pending_sessions", || {
            store.pending_sessions(PageRequest {
                cursor: None,
                limit: 100,
            })
        })
        .await;
        if page.sessions.is_empty() {
            if done.load(Ordering::SeqCst) {
                return completed;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        for session in page.sessions {
            let claimed = retrying("claim_available", || {
                store.claim_available(ClaimRequest {
                    session: session.clone(),
                    holder: "worker".into(),
                    lease: Lease::Ttl(2_000),
                    exclude_indexes: vec![],
                    limit: 50,
                })
            })
            .await;
            let ClaimOutcome::Claimed { events: rows, .. } = claimed else {
                continue;
            };
            for row in rows {
                let request = CompleteRequest {
                    session: session.clone(),
                    index: row.event.index,
                    attempt: row.attempt_count,
                    events: vec![],
                    batch_size: None,
                };
                // A completion whose lease lapsed while the master moved is
                // fenced; the event is claimed again.
                let outcome = retrying("complete_attempt", || {
                    store.complete_attempt(request.clone())
                })
                .await;
                if matches!(outcome, CompleteOutcome::Completed { .. }) {
                    completed += 1;
                }
            }
        }
    }
}

/// A work cycle (appends from one task, claims and completions from
/// another) and a live feed of a second store instance run while the
/// Sentinels fail the master over to its replica. The store follows the
/// new master: appends go on, every event of every log is processed, the
/// logs are dense with each id once, and the feed (opened again after a
/// `StoreUnavailable`) delivers every index in order. Writes acknowledged
/// after the failover settled are all there; one just before it may be
/// lost to asynchronous replication, as on any Redis without `WAIT` (the
/// feed may have delivered it before it was lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_during_a_work_cycle_and_a_live_feed() {
    let deployment = Arc::new(RedisSentinels::start());
    let url = deployment.url();
    let prefix = unique_prefix("sentinel");
    let options = || RedisOptions::default().prefix(prefix.clone());
    let store = Arc::new(RedisStore::connect(&url, options()).await.unwrap());
    let reader = Arc::new(RedisStore::connect(&url, options()).await.unwrap());
    let old_master = deployment.master_port();
    let sessions: Vec<String> = (0..SESSIONS).map(|k| format!("s{k}")).collect();

    let (length, want) = tokio::sync::watch::channel(None);
    let feed = tokio::spawn(follow(reader.clone(), sessions[0].clone(), want));
    let done = Arc::new(AtomicBool::new(false));
    let worker = tokio::spawn(work(store.clone(), done.clone()));
    let appended = Arc::new(AtomicUsize::new(0));
    let after_failover = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let settled = Arc::new(AtomicBool::new(false));
    let (failed_over, mut once_failed_over) = tokio::sync::watch::channel(false);
    let appender = {
        let (store, sessions, appended) = (store.clone(), sessions.clone(), appended.clone());
        let (after_failover, settled) = (after_failover.clone(), settled.clone());
        tokio::spawn(async move {
            for n in 0..PER_SESSION {
                if n == PER_SESSION / 2 {
                    // Half of the work after the failover, however long it
                    // takes: the failover starts once 80 events are in.
                    once_failed_over.wait_for(|done| *done).await.unwrap();
                }
                for session in &sessions {
                    let id = format!("{session}-{n}");
                    let event = NewEvent::new("job", json!({ "n": n })).id(id.clone());
                    let was_settled = settled.load(Ordering::SeqCst);
                    // A call that fails may or may not have written; the
                    // retry with the same id is idempotent (A5).
                    retrying("append", || store.append(session, vec![event.clone()])).await;
                    if was_settled {
                        after_failover.lock().unwrap().push((session.clone(), id));
                    }
                    appended.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    while appended.load(Ordering::SeqCst) < 80 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let moving = deployment.clone();
    tokio::task::spawn_blocking(move || moving.failover())
        .await
        .unwrap();
    settled.store(true, Ordering::SeqCst);
    failed_over.send(true).unwrap();
    assert_ne!(deployment.master_port(), old_master, "the master moved");
    appender.await.unwrap();
    let written = appended.load(Ordering::SeqCst) as u64;
    assert_eq!(written, PER_SESSION * SESSIONS as u64);
    done.store(true, Ordering::SeqCst);
    let completed = worker.await.unwrap();

    let mut total = 0;
    let mut feed = Some(feed);
    for session in &sessions {
        let log = retrying("read", || store.read(session, ReadRange::default())).await;
        let indexes: Vec<u64> = log.iter().map(|e| e.event.index).collect();
        assert_eq!(
            indexes,
            (1..=log.len() as u64).collect::<Vec<_>>(),
            "E1: {session}'s log is dense"
        );
        let mut ids: Vec<&str> = log.iter().map(|e| e.event.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), log.len(), "A5: each id once in {session}");
        for (s, id) in after_failover.lock().unwrap().iter() {
            if s == session {
                assert!(
                    log.iter().any(|e| &e.event.id == id),
                    "{id}, acknowledged after the failover, is in the log"
                );
            }
        }
        total += log.len();
        if session == &sessions[0] {
            length.send(Some(log.len())).unwrap();
            let fed = feed.take().expect("one feed").await.unwrap();
            let logged: Vec<String> = log.iter().map(|e| e.event.id.clone()).collect();
            // ST1 by index (checked as it delivered). By id, the feed may
            // differ from the final log only where it delivered a write the
            // old master acknowledged and replication lost: an id the log
            // no longer holds, acknowledged before the failover settled.
            assert_eq!(fed.len(), logged.len());
            let after: Vec<String> = after_failover
                .lock()
                .unwrap()
                .iter()
                .map(|(_, id)| id.clone())
                .collect();
            for (index, (delivered, kept)) in fed.iter().zip(&logged).enumerate() {
                if delivered != kept {
                    assert!(
                        !logged.contains(delivered),
                        "index {}: the feed delivered {delivered}, which the log holds elsewhere",
                        index + 1
                    );
                    assert!(
                        !after.contains(delivered),
                        "{delivered}, acknowledged after the failover, was lost"
                    );
                }
            }
        }
    }
    assert!(
        after_failover.lock().unwrap().len() > 100,
        "the work went on after the failover"
    );
    assert!(
        completed >= total,
        "every event was processed: {completed} of {total}"
    );
    let pending = retrying("pending_sessions", || {
        store.pending_sessions(PageRequest {
            cursor: None,
            limit: 100,
        })
    })
    .await;
    assert!(pending.sessions.is_empty(), "{:?}", pending.sessions);
    store.close().await;
    reader.close().await;
}
