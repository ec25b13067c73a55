//! The Redis store on a real Redis Cluster (three masters with a replica
//! each, started by `a2_redis::testing::cluster`):
//!
//! - every conformance case as `cluster::<case>`, and the differential test
//!   against the memory store, on one shared cluster (a key prefix each);
//! - two processes racing to claim one set of events (C6);
//! - slots holding live sessions moving (`redis-cli --cluster reshard`)
//!   while workers on two store instances process and feeds follow: every
//!   event processed exactly once, lane order kept, feeds exact;
//! - `CLUSTER FAILOVER` of a master holding live sessions while appends
//!   and feeds run: every acknowledged append survives.
//! - the work of 100 sessions spreads over the masters in proportion to
//!   their slots.
//!
//! The reshard, failover, spread and script-flush tests start clusters of
//! their own.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2_conformance::{Capabilities, Stores, differential};
use a2_core::*;
use a2_redis::testing::cluster::{self as test_cluster, RedisCluster};
use a2_redis::testing::unique_prefix;
use a2_redis::{RedisOptions, RedisStore};
use futures::StreamExt;
use serde_json::json;

async fn setup(options: StoreOptions) -> Stores {
    let url = test_cluster::shared().url();
    let options = RedisOptions::default()
        .prefix(unique_prefix("conformance"))
        .store(options);
    let store = RedisStore::connect(&url, options.clone())
        .await
        .expect("connect to the test cluster");
    let peer = RedisStore::connect(&url, options)
        .await
        .expect("connect to the test cluster");
    let store = Arc::new(store);
    let keys = store.clone();
    Stores::new(store, Arc::new(peer))
        .with_caps(
            Capabilities::default()
                .with_independent_peer(true)
                .with_pending_wakeups(true)
                .with_cancellations(true),
        )
        .with_damage(move |session, index| {
            let (url, log) = (url.clone(), keys.session_keys(&session).log);
            async move { a2_redis::testing::delete_log_entry(&url, &log, index).await }
        })
}

// Every case of the suite, as on a single server (tests/conformance.rs).
mod cluster {
    a2_conformance::conformance!(super::setup);
}

/// The differential test of tests/differential.rs on the cluster: fewer
/// seeds by default (`A2_DIFF_CLUSTER_SEEDS`), each as long.
#[tokio::test]
async fn cluster_matches_memory_on_random_sequences() {
    let seeds: u64 = std::env::var("A2_DIFF_CLUSTER_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let (_, steps) = differential::seeds_and_steps();
    for seed in 0..seeds {
        let clock = Arc::new(ManualClock::new(common::START_MS));
        let options = common::options(&format!("diff-cluster-{seed}"), clock.clone());
        let store = RedisStore::connect(&test_cluster::shared().url(), options)
            .await
            .expect("connect to the test cluster");
        differential::run_seed("cluster", &store, clock, seed, steps).await;
    }
}

/// Sessions spread over every partition, and so over every master: a
/// partition script runs on each (RD5).
#[tokio::test]
async fn sessions_of_every_master_are_listed_and_pending() {
    let url = test_cluster::shared().url();
    let options = RedisOptions::default().prefix(unique_prefix("spread"));
    let store = RedisStore::connect(&url, options).await.unwrap();
    let sessions: Vec<String> = (0..200).map(|n| format!("s{n:03}")).collect();
    for session in &sessions {
        store
            .append(session, vec![NewEvent::new("t", json!(1))])
            .await
            .unwrap();
    }
    let masters: HashSet<u16> = sessions
        .iter()
        .map(|s| slot_of_session(&store, s))
        .map(|slot| test_cluster::shared().master_of(slot).unwrap().port)
        .collect();
    assert_eq!(masters.len(), 3, "the sessions live on every master");
    let mut listed = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list_sessions(ListSessionsOptions::new(37).cursor(cursor))
            .await
            .unwrap();
        listed.extend(page.sessions.into_iter().map(|s| s.session_id));
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(listed, sessions, "every session, in byte order (I1)");
    let pending = store
        .pending_sessions(PageRequest {
            cursor: None,
            limit: 500,
        })
        .await
        .unwrap();
    assert_eq!(pending.sessions, sessions, "every session has work (PS1)");
}

/// Opening a prefix with another partition count fails before writing,
/// on the cluster as on one server.
#[tokio::test]
async fn rd5_partition_count_is_checked_on_the_cluster() {
    let url = test_cluster::shared().url();
    let prefix = unique_prefix("count");
    let options = RedisOptions::default()
        .prefix(prefix.clone())
        .partitions(12);
    let store = RedisStore::connect(&url, options).await.unwrap();
    assert_eq!(store.partitions(), 12);
    let other = RedisOptions::default().prefix(prefix).partitions(48);
    let error = RedisStore::connect(&url, other).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error}");
    assert!(error.to_string().contains("12 partitions"), "{error}");
}

/// Logs of the store and the cluster client on stderr, as `RUST_LOG` says
/// (`RUST_LOG=redis=info,a2_redis=debug` shows slot refreshes and
/// resubscriptions).
fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
}

/// The slot a session's keys live in.
fn slot_of_session(store: &RedisStore, session: &str) -> u16 {
    let keys = store.session_keys(session);
    let open = keys.log.find('{').unwrap();
    let close = keys.log.find('}').unwrap();
    a2_redis::cluster::slot_of(&keys.log[open..=close])
}

// ---- Two processes ------------------------------------------------------

const ROLE: &str = "A2_CLUSTER_ROLE";
const URL: &str = "A2_CLUSTER_URL";
const PREFIX: &str = "A2_CLUSTER_PREFIX";

/// Not a test on its own: the role a spawned copy of this binary plays.
#[test]
#[ignore = "run by the other tests of this file in a child process"]
fn child_role() {
    let (Ok(role), Ok(url), Ok(prefix)) = (
        std::env::var(ROLE),
        std::env::var(URL),
        std::env::var(PREFIX),
    ) else {
        panic!("child_role runs only in a process spawned by the tests of this file");
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        match role.as_str() {
            "claimer" => claimer_child(&url, &prefix).await,
            other => panic!("unknown role {other}"),
        }
    });
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// Says `ready`, waits for `go` on stdin, then claims from sessions
/// `race-0..4` with 4 tasks until they are settled, saying
/// `got {session} {index} {attempt}` per claimed row, then `done`.
async fn claimer_child(url: &str, prefix: &str) {
    let store = Arc::new(
        RedisStore::connect(url, RedisOptions::default().prefix(prefix))
            .await
            .expect("connect to the cluster"),
    );
    // Every connection is open before the race starts.
    store
        .pending_sessions(PageRequest {
            cursor: None,
            limit: 1,
        })
        .await
        .unwrap();
    say("ready");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "go");
    let mut tasks = Vec::new();
    for task in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            // Leases outlast the test, so once a claim of every session in
            // a row hands out nothing, nothing is left for this task.
            let mut empty_in_a_row = 0;
            for round in 0.. {
                let session = format!("race-{}", (task + round) % 4);
                let outcome = store
                    .claim_available(ClaimRequest {
                        session: session.clone(),
                        holder: format!("{}-{task}", std::process::id()),
                        lease: Lease::Ttl(600_000),
                        exclude_indexes: vec![],
                        limit: 3,
                    })
                    .await
                    .unwrap();
                match outcome {
                    ClaimOutcome::Claimed { events: rows, .. } => {
                        empty_in_a_row = 0;
                        for row in rows {
                            say(&format!(
                                "got {session} {} {}",
                                row.event.index, row.attempt_count
                            ));
                        }
                    }
                    _ => {
                        empty_in_a_row += 1;
                        if empty_in_a_row == 4 {
                            return;
                        }
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    say("done");
}

/// Kills a child when dropped, however the test ends.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// C6 across processes on the cluster: two processes (four tasks each)
/// claim 4 × 100 events of sessions in different partitions at once; no
/// (index, attempt) is handed out twice and every event is handed out.
#[tokio::test]
async fn c6_two_processes_race_to_claim_on_the_cluster() {
    let url = test_cluster::shared().url();
    let prefix = unique_prefix("race");
    let store = RedisStore::connect(&url, RedisOptions::default().prefix(prefix.clone()))
        .await
        .unwrap();
    for s in 0..4 {
        let events = (0..100).map(|n| NewEvent::new("job", json!(n))).collect();
        store.append(&format!("race-{s}"), events).await.unwrap();
    }
    let mut children: Vec<(Reaper, std::sync::mpsc::Receiver<String>)> = (0..2)
        .map(|_| {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args([
                    "--ignored",
                    "--exact",
                    "child_role",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(ROLE, "claimer")
                .env(URL, &url)
                .env(PREFIX, &prefix)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let line = line
                        .strip_prefix("test child_role ... ")
                        .map(str::to_owned)
                        .unwrap_or(line);
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            (Reaper(child), rx)
        })
        .collect();
    let deadline = Duration::from_secs(60);
    for (_, lines) in &children {
        loop {
            let line = lines.recv_timeout(deadline).expect("the child gets ready");
            if line == "ready" {
                break;
            }
        }
    }
    for (child, _) in &mut children {
        let stdin = child.0.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }
    let mut got = Vec::new();
    for (_, lines) in &children {
        loop {
            let line = lines.recv_timeout(deadline).expect("the child finishes");
            if line == "done" {
                break;
            }
            if let Some(rest) = line.strip_prefix("got ") {
                got.push(rest.to_owned());
            }
        }
    }
    let distinct: HashSet<&String> = got.iter().collect();
    assert_eq!(distinct.len(), got.len(), "an attempt was handed out twice");
    assert_eq!(got.len(), 400, "every event was handed out once");
}

// ---- Slots moving -------------------------------------------------------

/// Reads a feed until it has delivered `want` events, reopening it from
/// the last delivered index when it ends with an error (ST5 allows a feed
/// to end with `StoreUnavailable`; a new one continues exactly). Returns
/// the delivered indexes and how many times it was reopened.
async fn follow(store: Arc<RedisStore>, session: String, want: u64) -> (Vec<u64>, usize) {
    let mut got = Vec::new();
    let mut reopened = 0;
    let deadline = Instant::now() + Duration::from_secs(240);
    'open: loop {
        let last = got.last().copied().unwrap_or(0);
        let mut feed = store.stream(&session, last);
        while (got.len() as u64) < want {
            assert!(
                Instant::now() < deadline,
                "feed of {session} stalled at {got:?}"
            );
            match tokio::time::timeout(Duration::from_secs(60), feed.next()).await {
                Ok(Some(Ok(event))) => got.push(event.index),
                Ok(Some(Err(error))) if error.code() == ErrorCode::StoreUnavailable => {
                    reopened += 1;
                    continue 'open;
                }
                other => panic!("feed of {session}: {other:?}"),
            }
        }
        return (got, reopened);
    }
}

/// Retries a call that failed with `StoreUnavailable` (a slot moving or a
/// failover may outlast one command timeout); any other error fails.
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

/// Sessions named `{label}-{n}` whose slots are among `slots`, `count` of
/// them, then `count_elsewhere` whose slots are not.
fn sessions_in(
    store: &RedisStore,
    label: &str,
    slots: &HashSet<u16>,
    count: usize,
    count_elsewhere: usize,
) -> Vec<String> {
    let (mut inside, mut outside) = (Vec::new(), Vec::new());
    for n in 0.. {
        let session = format!("{label}-{n}");
        if slots.contains(&slot_of_session(store, &session)) {
            if inside.len() < count {
                inside.push(session);
            }
        } else if outside.len() < count_elsewhere {
            outside.push(session);
        }
        if inside.len() == count && outside.len() == count_elsewhere {
            break;
        }
    }
    inside.extend(outside);
    inside
}

/// The unprocessed rows of `sessions`, as a stalled test reports them:
/// index, lane, attempt, holder and lease expiry, and whether
/// `pending_sessions` lists the session. Each session is read directly,
/// not found through `pending_sessions`: a session that lost its place in
/// its partition's pending set is exactly what a stall may come from.
async fn unfinished(store: &RedisStore, sessions: &[String]) -> String {
    let listed: HashSet<String> = match store
        .pending_sessions(PageRequest {
            cursor: None,
            limit: 100,
        })
        .await
    {
        Ok(page) => page.sessions.into_iter().collect(),
        Err(error) => return format!("(pending_sessions failed: {error})"),
    };
    let mut out = Vec::new();
    let mut unlisted = Vec::new();
    for session in sessions {
        let rows = match store.read(session, a2_core::ReadRange::default()).await {
            Ok(rows) => rows,
            Err(error) => {
                out.push(format!("{session}: read failed: {error}"));
                continue;
            }
        };
        let pending: Vec<_> = rows.iter().filter(|r| r.is_pending()).collect();
        if !pending.is_empty() && !listed.contains(session) {
            unlisted.push(session.clone());
        }
        for row in pending {
            out.push(format!(
                "{session}/{} lane {:?} attempt {} holder {:?} expires {:?}",
                row.event.index,
                row.event.lane,
                row.attempt_count,
                row.claim_holder,
                row.claim_expires_at
            ));
        }
    }
    format!(
        "{} rows; pending_sessions lists {} sessions, not {} with pending rows: {:?}; rows: {}",
        out.len(),
        listed.len(),
        unlisted.len(),
        unlisted,
        out.join("; ")
    )
}

/// What the workers of the reshard test saw.
#[derive(Default)]
struct Processed {
    /// (session, index) → times processed.
    times: HashMap<(String, u64), usize>,
    /// (session, lane) → indexes in the order they were claimed.
    lanes: BTreeMap<(String, String), Vec<u64>>,
}

/// 4 workers (2 on each of 2 store instances) process 2 000 events over 50
/// sessions while `redis-cli --cluster reshard` moves 1 000 slots holding
/// half of those sessions from one master to another: every event is
/// processed exactly once, each lane in order, and a live feed per session
/// delivers every event exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_moves_slots_of_live_sessions_without_loss() {
    logs();
    let cluster = Arc::new(RedisCluster::start());
    let prefix = unique_prefix("reshard");
    let options = RedisOptions::default().prefix(prefix);
    let a = Arc::new(
        RedisStore::connect(&cluster.url(), options.clone())
            .await
            .unwrap(),
    );
    let b = Arc::new(RedisStore::connect(&cluster.url(), options).await.unwrap());
    let masters = cluster.masters().unwrap();
    let (from, to) = (masters[0].clone(), masters[1].clone());
    let mut from_slots: Vec<u16> = from.slots.iter().flat_map(|&(lo, hi)| lo..=hi).collect();
    from_slots.sort_unstable();
    // redis-cli moves the source's lowest slots first.
    let moving: HashSet<u16> = from_slots.iter().take(1000).copied().collect();
    let sessions = sessions_in(&a, "live", &moving, 25, 25);
    const PER_SESSION: u64 = 40;
    const TOTAL: usize = 2000;

    let feeds: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let store = if k % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(follow(store, s.clone(), PER_SESSION))
        })
        .collect();

    let processed = Arc::new(Mutex::new(Processed::default()));
    let done = Arc::new(AtomicUsize::new(0));
    let during_move = Arc::new(AtomicUsize::new(0));
    let moving_now = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4 {
        let store = if w % 2 == 0 { a.clone() } else { b.clone() };
        let (processed, done) = (processed.clone(), done.clone());
        let (during_move, moving_now) = (during_move.clone(), moving_now.clone());
        let all_sessions = sessions.clone();
        workers.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(240);
            while done.load(Ordering::SeqCst) < TOTAL {
                if Instant::now() >= deadline {
                    panic!(
                        "workers stalled at {} of {TOTAL}; unfinished: {}",
                        done.load(Ordering::SeqCst),
                        unfinished(&store, &all_sessions).await
                    );
                }
                let page = retrying("pending_sessions", || {
                    store.pending_sessions(PageRequest {
                        cursor: None,
                        limit: 100,
                    })
                })
                .await;
                if page.sessions.is_empty() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                for k in 0..page.sessions.len() {
                    // Workers start at different sessions.
                    let session = &page.sessions[(k + w * 7) % page.sessions.len()];
                    let outcome = retrying("claim", || {
                        store.claim_available(ClaimRequest {
                            session: session.clone(),
                            holder: format!("worker-{w}"),
                            // A claim whose reply is lost while its slot
                            // moves (the script ran, the connection did
                            // not answer) is retried as a new claim (RD8);
                            // the events it leased are claimed again once
                            // this lease runs out, well within the
                            // workers' deadline, and still run once each,
                            // since nobody saw the first claim.
                            lease: Lease::Ttl(30_000),
                            exclude_indexes: vec![],
                            limit: 4,
                        })
                    })
                    .await;
                    let ClaimOutcome::Claimed { events: rows, .. } = outcome else {
                        continue;
                    };
                    {
                        let mut seen = processed.lock().unwrap();
                        for row in &rows {
                            *seen
                                .times
                                .entry((session.clone(), row.event.index))
                                .or_default() += 1;
                            if let Some(lane) = &row.event.lane {
                                seen.lanes
                                    .entry((session.clone(), lane.clone()))
                                    .or_default()
                                    .push(row.event.index);
                            }
                        }
                    }
                    for row in rows {
                        let outcome = retrying("complete", || {
                            store.complete_attempt(CompleteRequest {
                                session: session.clone(),
                                index: row.event.index,
                                attempt: row.attempt_count,
                                events: vec![],
                                batch_size: None,
                            })
                        })
                        .await;
                        assert!(
                            matches!(outcome, CompleteOutcome::Completed { .. }),
                            "{session}/{}: {outcome:?}",
                            row.event.index
                        );
                        done.fetch_add(1, Ordering::SeqCst);
                        if moving_now.load(Ordering::SeqCst) {
                            during_move.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            }
        }));
    }

    // Appends in rounds of one event per session, lanes l0..l2 and
    // unlaned events mixed, from both instances.
    let appender = {
        let (a, b, sessions) = (a.clone(), b.clone(), sessions.clone());
        tokio::spawn(async move {
            for n in 0..PER_SESSION {
                for (k, session) in sessions.iter().enumerate() {
                    let store = if (k as u64 + n).is_multiple_of(2) {
                        &a
                    } else {
                        &b
                    };
                    let id = format!("{session}-{n}");
                    let event = NewEvent::new("job", json!({ "n": n })).id(id);
                    let event = match n % 4 {
                        3 => event,
                        lane => event.lane(format!("l{lane}")),
                    };
                    retrying("append", || store.append(session, vec![event.clone()])).await;
                }
            }
        })
    };

    // Let work start, then move the slots while it goes on.
    while done.load(Ordering::SeqCst) < 100 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    moving_now.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let mover = cluster.clone();
    let (from_node, to_node) = (from.clone(), to.clone());
    tokio::task::spawn_blocking(move || mover.reshard(&from_node, &to_node, 1000))
        .await
        .unwrap()
        .expect("the reshard succeeds");
    moving_now.store(false, Ordering::SeqCst);
    let moved_in = started.elapsed();

    appender.await.unwrap();
    for worker in workers {
        worker.await.unwrap();
    }
    let processed = std::mem::take(&mut *processed.lock().unwrap());
    let during = during_move.load(Ordering::SeqCst);
    println!(
        "moved 1000 slots in {moved_in:?}; {during} events processed meanwhile ({:.0}/s)",
        during as f64 / moved_in.as_secs_f64()
    );
    assert!(during > 0, "the move overlapped the work");

    // The sessions meant to move did move.
    for session in &sessions[..25] {
        let slot = slot_of_session(&a, session);
        assert_eq!(
            cluster.master_of(slot).unwrap().id,
            to.id,
            "{session} moved"
        );
    }
    // Exactly once.
    assert_eq!(processed.times.len(), TOTAL, "every event processed");
    let twice: Vec<_> = processed.times.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "processed more than once: {twice:?}");
    // Lane order.
    for ((session, lane), indexes) in &processed.lanes {
        assert!(
            indexes.windows(2).all(|w| w[0] < w[1]),
            "lane {lane} of {session} out of order: {indexes:?}"
        );
    }
    // Every feed exactly once, in order.
    let mut reopened = 0;
    for feed in feeds {
        let (got, again) = feed.await.unwrap();
        reopened += again;
        assert_eq!(got, (1..=PER_SESSION).collect::<Vec<_>>());
    }
    println!("feeds reopened after an error: {reopened}");
    // Nothing is pending any more.
    let pending = retrying("pending_sessions", || {
        a.pending_sessions(PageRequest {
            cursor: None,
            limit: 100,
        })
    })
    .await;
    assert!(pending.sessions.is_empty(), "{:?}", pending.sessions);
}

/// PS1 while a slot moves: `redis-cli --cluster reshard` moves a slot's
/// keys in `MIGRATE` batches of a few keys, so for a while a partition's
/// `pending` set may be on the importing master while a session's hash is
/// still on the migrating one. A `pending_sessions` call then (sent on to
/// the importing master by `ASK`) may miss the session, but must not drop
/// it for good: once the slot has moved, the session is listed again.
/// (This is how `reshard_moves_slots_of_live_sessions_without_loss`
/// stalled now and then: sessions with work no worker was shown.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_sessions_keep_sessions_whose_hash_has_not_moved_yet() {
    logs();
    let cluster = RedisCluster::start();
    let options = RedisOptions::default().prefix(unique_prefix("pending-move"));
    let store = RedisStore::connect(&cluster.url(), options).await.unwrap();
    let session = "waiting-0";
    store
        .append(session, vec![NewEvent::new("job", json!({}))])
        .await
        .unwrap();
    let page = PageRequest {
        cursor: None,
        limit: 100,
    };
    // Listed, and the partition script loaded on every master.
    let listed = retrying("pending_sessions", || store.pending_sessions(page.clone())).await;
    assert_eq!(listed.sessions, [session]);

    let keys = store.session_keys(session);
    let slot = slot_of_session(&store, session);
    let source = cluster.master_of(slot).unwrap();
    let target = cluster
        .masters()
        .unwrap()
        .into_iter()
        .find(|m| m.id != source.id)
        .unwrap();
    let (slot_arg, target_port) = (slot.to_string(), target.port.to_string());
    let migrate = |keys: &[&str]| {
        let mut args = vec![
            "MIGRATE",
            "127.0.0.1",
            &target_port,
            "",
            "0",
            "5000",
            "KEYS",
        ];
        args.extend_from_slice(keys);
        cluster.cli(source.port, &args).unwrap();
    };
    cluster
        .cli(
            target.port,
            &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &source.id],
        )
        .unwrap();
    cluster
        .cli(
            source.port,
            &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &target.id],
        )
        .unwrap();
    // The partition's pending set moves first, the session's keys later.
    migrate(&[&keys.pending]);
    // A worker looks for work meanwhile; whatever it is told, ...
    let _ = store.pending_sessions(page.clone()).await;
    // ... the rest of the slot moves, and the slot is the target's.
    loop {
        let listed = cluster
            .cli(source.port, &["CLUSTER", "GETKEYSINSLOT", &slot_arg, "100"])
            .unwrap();
        let rest: Vec<&str> = listed.lines().filter(|l| !l.is_empty()).collect();
        if rest.is_empty() {
            break;
        }
        migrate(&rest);
    }
    for master in [&target, &source] {
        cluster
            .cli(
                master.port,
                &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &target.id],
            )
            .unwrap();
    }
    cluster.wait_settled().unwrap();

    let listed = retrying("pending_sessions", || store.pending_sessions(page.clone())).await;
    assert_eq!(
        listed.sessions,
        [session],
        "a session with pending work left pending_sessions while its slot moved"
    );
    // And more work keeps it listed.
    retrying("append", || {
        store.append(session, vec![NewEvent::new("job", json!({}))])
    })
    .await;
    let listed = retrying("pending_sessions", || store.pending_sessions(page.clone())).await;
    assert_eq!(listed.sessions, [session]);
}

/// `CLUSTER FAILOVER` on the replica of a master holding live sessions,
/// while appends (acknowledged by a replica: `acknowledged_by(1)`) and
/// feeds run: every acknowledged append is in the log afterwards, once,
/// and every feed delivers every event exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_keeps_every_acknowledged_append() {
    logs();
    let cluster = Arc::new(RedisCluster::start());
    let options = RedisOptions::default()
        .prefix(unique_prefix("failover"))
        .acknowledged_by(1);
    let store = Arc::new(RedisStore::connect(&cluster.url(), options).await.unwrap());
    let nodes = cluster.nodes().unwrap();
    let master = cluster.masters().unwrap().remove(0);
    let replica = nodes
        .iter()
        .find(|n| n.master_id.as_deref() == Some(master.id.as_str()))
        .expect("the master has a replica")
        .clone();
    let slots: HashSet<u16> = master.slots.iter().flat_map(|&(lo, hi)| lo..=hi).collect();
    let sessions = sessions_in(&store, "fo", &slots, 8, 2);
    const PER_SESSION: u64 = 60;

    let feeds: Vec<_> = sessions
        .iter()
        .map(|s| tokio::spawn(follow(store.clone(), s.clone(), PER_SESSION)))
        .collect();
    let acknowledged = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let appended = Arc::new(AtomicUsize::new(0));
    let appender = {
        let (store, sessions) = (store.clone(), sessions.clone());
        let (acknowledged, appended) = (acknowledged.clone(), appended.clone());
        tokio::spawn(async move {
            for n in 0..PER_SESSION {
                for session in &sessions {
                    let id = format!("{session}-{n}");
                    let event = NewEvent::new("msg", json!({ "n": n })).id(id.clone());
                    // A call that fails may or may not have written; the
                    // retry with the same id is idempotent (A5).
                    retrying("append", || store.append(session, vec![event.clone()])).await;
                    acknowledged.lock().unwrap().push((session.clone(), id));
                    appended.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };
    while appended.load(Ordering::SeqCst) < 100 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = appended.load(Ordering::SeqCst);
    let switcher = cluster.clone();
    let port = replica.port;
    tokio::task::spawn_blocking(move || switcher.failover(port))
        .await
        .unwrap()
        .expect("the failover succeeds");
    let at_switch = appended.load(Ordering::SeqCst);
    appender.await.unwrap();
    println!(
        "failover while {} appends were acknowledged",
        at_switch - before
    );
    let promoted = cluster.master_of(*slots.iter().next().unwrap()).unwrap();
    assert_eq!(promoted.id, replica.id, "the replica took over");

    let acknowledged = std::mem::take(&mut *acknowledged.lock().unwrap());
    for session in &sessions {
        let log = store.read(session, ReadRange::default()).await.unwrap();
        let ids: Vec<&str> = log.iter().map(|e| e.event.id.as_str()).collect();
        let expected: Vec<&str> = acknowledged
            .iter()
            .filter(|(s, _)| s == session)
            .map(|(_, id)| id.as_str())
            .collect();
        assert_eq!(
            ids, expected,
            "the log of {session} holds every acknowledged append once"
        );
    }
    let mut reopened = 0;
    for feed in feeds {
        let (got, again) = feed.await.unwrap();
        reopened += again;
        assert_eq!(got, (1..=PER_SESSION).collect::<Vec<_>>());
    }
    println!("feeds reopened after an error: {reopened}");
}

/// The work of 100 sessions (appends, claims, completions, listings)
/// spreads over the masters in proportion to the slots they serve, within
/// ±15% (`INFO commandstats` per master): the partitions' tags sit in equal
/// shares of the slot space, so no master serves more than its share.
#[tokio::test]
async fn rd5_commands_spread_over_masters_in_proportion_to_their_slots() {
    let cluster = RedisCluster::start();
    let store = RedisStore::connect(
        &cluster.url(),
        RedisOptions::default().prefix(unique_prefix("spread")),
    )
    .await
    .unwrap();
    let masters = cluster.masters().unwrap();
    for master in &masters {
        cluster.cli(master.port, &["CONFIG", "RESETSTAT"]).unwrap();
    }
    for n in 0..100 {
        let session = format!("session-{n}");
        let events = (0..5).map(|k| NewEvent::new("job", json!(k))).collect();
        store.append(&session, events).await.unwrap();
        let claimed = store
            .claim_available(ClaimRequest {
                session: session.clone(),
                holder: "w".into(),
                lease: Lease::Ttl(60_000),
                exclude_indexes: vec![],
                limit: 5,
            })
            .await
            .unwrap();
        let ClaimOutcome::Claimed { events: rows, .. } = claimed else {
            panic!("{session}: {claimed:?}");
        };
        for row in rows {
            store
                .complete_attempt(CompleteRequest {
                    session: session.clone(),
                    index: row.event.index,
                    attempt: row.attempt_count,
                    events: vec![],
                    batch_size: None,
                })
                .await
                .unwrap();
        }
        if n % 10 == 0 {
            store
                .pending_sessions(PageRequest {
                    cursor: None,
                    limit: 10,
                })
                .await
                .unwrap();
        }
    }
    let calls: Vec<(u64, f64)> = masters
        .iter()
        .map(|master| {
            let stats = cluster.cli(master.port, &["INFO", "commandstats"]).unwrap();
            let calls: u64 = stats
                .lines()
                .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_xrange:"))
                .filter_map(|l| {
                    l.split("calls=")
                        .nth(1)?
                        .split(',')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum();
            let slots: u32 = master
                .slots
                .iter()
                .map(|&(lo, hi)| u32::from(hi - lo) + 1)
                .sum();
            (calls, f64::from(slots) / 16384.0)
        })
        .collect();
    let total: u64 = calls.iter().map(|(c, _)| c).sum();
    for (k, (count, share)) in calls.iter().enumerate() {
        let expected = total as f64 * share;
        let off = (*count as f64 - expected) / expected;
        println!(
            "master {k}: {count} calls, {expected:.0} expected ({:+.1}%)",
            off * 100.0
        );
        assert!(
            off.abs() <= 0.15,
            "master {k}: {count} of {total} calls, {off:+.2} off its share"
        );
    }
}

/// `SCRIPT FLUSH` on every node and `FUNCTION FLUSH` on every master.
fn flush_code(cluster: &RedisCluster) {
    for port in cluster.ports() {
        cluster.cli(port, &["SCRIPT", "FLUSH"]).unwrap();
    }
    for master in cluster.masters().unwrap() {
        cluster.cli(master.port, &["FUNCTION", "FLUSH"]).unwrap();
    }
}

/// RD1, RD7 on a cluster: session writes run as functions (`FCALL`), and
/// after `SCRIPT FLUSH` and `FUNCTION FLUSH` (as after a restart without
/// persistence) the session library and the per-partition scripts of
/// listings load themselves again on every node that needs them.
#[tokio::test]
async fn rd7_scripts_reload_on_every_node_after_a_flush() {
    // A cluster of its own: a flush on the shared one could land between
    // another test's reload and its retry.
    let cluster = RedisCluster::start();
    let store = RedisStore::connect(
        &cluster.url(),
        RedisOptions::default().prefix(unique_prefix("flush")),
    )
    .await
    .unwrap();
    let sessions: Vec<String> = (0..30).map(|n| format!("f{n:02}")).collect();
    for session in &sessions {
        store
            .append(session, vec![NewEvent::new("t", json!(1))])
            .await
            .unwrap();
    }
    let fcalls: usize = cluster
        .masters()
        .unwrap()
        .iter()
        .map(|m| {
            let stats = cluster.cli(m.port, &["INFO", "commandstats"]).unwrap();
            usize::from(stats.contains("cmdstat_fcall:"))
        })
        .sum();
    assert!(fcalls > 0, "no master ran a function");
    flush_code(&cluster);
    let listed = store
        .list_sessions(ListSessionsOptions::new(100))
        .await
        .unwrap();
    assert_eq!(listed.sessions.len(), sessions.len());
    flush_code(&cluster);
    for session in &sessions {
        let out = store
            .append(session, vec![NewEvent::new("t", json!(2))])
            .await
            .unwrap();
        assert_eq!(out.events[0].event.index, 2);
    }
    let pending = store
        .pending_sessions(PageRequest {
            cursor: None,
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(pending.sessions, sessions);
}
