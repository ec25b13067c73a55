//! Forks on a real Redis Cluster (FK1, FK6): the source and the target in
//! different slots, and a forking process SIGKILLed in the middle of its
//! forks. This test binary spawns a copy of itself that forks in a loop
//! (`child_role`), kills it at a moment of its own choosing, and finds
//! every target it had started either absent or whole, and the hidden keys
//! of the fork it interrupted expiring.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::*;
use a2_redis::testing::cluster as test_cluster;
use a2_redis::testing::unique_prefix;
use a2_redis::{RedisOptions, RedisStore};
use serde_json::json;

const ROLE: &str = "A2_FORK_ROLE";
const URL: &str = "A2_FORK_URL";
const PREFIX: &str = "A2_FORK_PREFIX";
const ROUND: &str = "A2_FORK_ROUND";
/// Events of the forked session.
const EVENTS: u64 = 10_000;

/// The slot a session's keys live in.
fn slot_of_session(store: &RedisStore, session: &str) -> u16 {
    let keys = store.session_keys(session);
    let open = keys.log.find('{').unwrap();
    let close = keys.log.find('}').unwrap();
    a2_redis::cluster::slot_of(&keys.log[open..=close])
}

/// Targets `fork-{round}-{n}` whose slot is not the source's, in order.
fn targets<'a>(store: &'a RedisStore, round: &str) -> impl Iterator<Item = String> + 'a {
    let source = slot_of_session(store, "source");
    let round = round.to_owned();
    (0..)
        .map(move |n| format!("fork-{round}-{n}"))
        .filter(move |t| slot_of_session(store, t) != source)
}

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
    assert_eq!(role, "forker", "unknown role {role}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let round = std::env::var(ROUND).unwrap_or_default();
    runtime.block_on(forker_child(&url, &prefix, &round));
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// Forks `source` at its last index onto one target after another, saying
/// `start {target}` before each fork and `forked {target}` after, until
/// killed.
async fn forker_child(url: &str, prefix: &str, round: &str) {
    let store = RedisStore::connect(url, RedisOptions::default().prefix(prefix))
        .await
        .expect("connect to the cluster");
    let names: Vec<String> = targets(&store, round).take(1_000).collect();
    for target in names {
        say(&format!("start {target}"));
        match store.fork("source", EVENTS, &target).await {
            Ok(ForkOutcome::Forked { .. }) => say(&format!("forked {target}")),
            other => panic!("fork onto {target}: {other:?}"),
        }
    }
}

/// Kills a child when dropped, however the test ends.
struct Reaper(Option<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// FK1, FK6 on a cluster: a process forks a 10 000-event session (with
/// processed, leased and dead-lettered events) onto targets in other slots
/// and is SIGKILLed in the middle, round after round, halfway into a fork
/// by the duration of the one before, until three kills landed mid-fork
/// (an interrupted target found absent). Every target a fork was started
/// on is either absent (not listed, reads as empty) or whole: the source's
/// events and records, leases released. The hidden keys left by an
/// interrupted fork all carry an expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fk6_a_fork_killed_midway_leaves_no_target_or_a_whole_one() {
    let cluster = test_cluster::shared();
    let url = cluster.url();
    let prefix = unique_prefix("fork");
    let store = Arc::new(
        RedisStore::connect(&url, RedisOptions::default().prefix(prefix.clone()))
            .await
            .unwrap(),
    );
    for from in (0..EVENTS).step_by(1_000) {
        let events = (from..from + 1_000)
            .map(|n| NewEvent::new("step", json!({"n": n, "text": "some words of a message"})))
            .collect();
        store.append("source", events).await.unwrap();
    }
    let claim = |limit| ClaimRequest {
        session: "source".into(),
        holder: "w".into(),
        lease: Lease::Ttl(600_000),
        exclude_indexes: vec![],
        limit,
    };
    let ClaimOutcome::Claimed { events: rows, .. } =
        store.claim_available(claim(30)).await.unwrap()
    else {
        panic!("nothing to claim");
    };
    for row in &rows[..10] {
        let request = CompleteRequest {
            session: "source".into(),
            index: row.event.index,
            attempt: 1,
            events: vec![],
            batch_size: None,
        };
        store.complete_attempt(request).await.unwrap();
    }
    for row in &rows[10..15] {
        let request = FailRequest {
            session: "source".into(),
            index: row.event.index,
            attempt: 1,
            error: "no".into(),
            max_failures: 1,
            retry_at: None,
        };
        store.fail_attempt(request).await.unwrap();
    }
    let source = store.read("source", ReadRange::default()).await.unwrap();
    assert_eq!(source.len() as u64, EVENTS);

    let mut started = Vec::new();
    let mut forked = Vec::new();
    let mut interrupted = Vec::new();
    for round in 0..12u64 {
        if interrupted.len() >= 3 {
            break;
        }
        let mut child = Reaper(Some(
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--ignored",
                    "--exact",
                    "child_role",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(ROLE, "forker")
                .env(URL, &url)
                .env(PREFIX, &prefix)
                .env(ROUND, round.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        ));
        let stdout = child.0.as_mut().unwrap().stdout.take().unwrap();
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
        // Halfway into the second fork of the round, by the first one's
        // duration.
        let (first, second) = fork_and_time(&rx, &mut started, &mut forked, round);
        std::thread::sleep(first / 2);
        let mut killed = child.0.take().unwrap();
        killed.kill().expect("SIGKILL the forker");
        killed.wait().unwrap();
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(2)) {
            if let Some(target) = line.strip_prefix("start ") {
                started.push(target.to_owned());
            } else if let Some(target) = line.strip_prefix("forked ") {
                forked.push(target.to_owned());
            }
        }
        if !forked.contains(&second) {
            interrupted.push(second);
        }
    }
    started.sort();
    started.dedup();
    let listed: Vec<String> = store
        .list_sessions(ListSessionsOptions::new(10_000))
        .await
        .unwrap()
        .sessions
        .into_iter()
        .map(|s| s.session_id)
        .collect();

    let (mut whole, mut absent) = (0, 0);
    for target in &started {
        let rows = store.read(target, ReadRange::default()).await.unwrap();
        if rows.is_empty() {
            assert!(
                !forked.contains(target),
                "FK1: acknowledged fork {target} is missing"
            );
            assert!(!listed.contains(target), "FK1: absent {target} is listed");
            absent += 1;
            continue;
        }
        assert_ne!(
            slot_of_session(&store, target),
            slot_of_session(&store, "source")
        );
        assert!(
            rows == a2_conformance::forked_rows(&source, target),
            "FK1: {target} is not whole"
        );
        assert!(listed.contains(target), "FK1: {target} is not listed");
        whole += 1;
    }
    assert!(whole >= 3, "every round finished a fork before the kill");
    // A target the kill interrupted that is absent was killed mid-fork:
    // its publishing script never ran.
    let mut midway = Vec::new();
    for target in &interrupted {
        if store
            .read(target, ReadRange::default())
            .await
            .unwrap()
            .is_empty()
        {
            midway.push(target.clone());
        }
    }
    assert!(
        midway.len() >= 3,
        "FK1: only {} of the kills landed mid-fork ({interrupted:?} interrupted, {midway:?} absent)",
        midway.len()
    );
    // FK6: what interrupted forks staged expires by itself.
    let mut staged = 0;
    for master in cluster.masters().unwrap() {
        let pattern = format!("{prefix}:*::fork:*");
        let keys = cluster
            .cli(master.port, &["--scan", "--pattern", &pattern])
            .unwrap();
        for key in keys.lines().filter(|k| !k.is_empty()) {
            let ttl = cluster.cli(master.port, &["PTTL", key]).unwrap();
            let ttl: i64 = ttl.trim().parse().unwrap_or(-3);
            // -2: it expired or was published between the scan and now.
            assert!(
                ttl == -2 || (ttl > 0 && ttl <= 600_000),
                "{key} has PTTL {ttl}"
            );
            staged += 1;
        }
    }
    eprintln!(
        "fork crash: {} targets started: {whole} whole, {absent} absent, {} kills mid-fork; {staged} staged keys left, all expiring",
        started.len(),
        midway.len()
    );
}

/// Reads the forker's lines until its second fork starts; returns how long
/// its first fork took (from its `start` line to its `forked` line) and the
/// second fork's target. Every line is noted in `started` and `forked`.
fn fork_and_time(
    rx: &std::sync::mpsc::Receiver<String>,
    started: &mut Vec<String>,
    forked: &mut Vec<String>,
    round: u64,
) -> (Duration, String) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut first_start = None;
    let mut first = None;
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("round {round}: the forker stalled"));
        if let Some(target) = line.strip_prefix("start ") {
            started.push(target.to_owned());
            match first {
                None => first_start = Some(Instant::now()),
                Some(took) => return (took, target.to_owned()),
            }
        } else if let Some(target) = line.strip_prefix("forked ") {
            forked.push(target.to_owned());
            if first.is_none() {
                first = first_start.map(|at| at.elapsed());
            }
        }
    }
}
