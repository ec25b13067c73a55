//! Several processes on one database file, with real processes: this test
//! binary spawns copies of itself that play a role (`child_role`, chosen by
//! the environment variable `A2_SQLITE_ROLE`) against a file the test names.
//!
//! - a process SIGKILLed in the middle of appends and completions loses no
//!   acknowledged write, and the file opens cleanly afterwards (durability);
//! - two processes racing to claim one set of events never share an attempt
//!   (C6);
//! - a process SIGKILLed in the middle of its forks leaves each target
//!   absent or whole (FK1);
//! - a live feed and a presence subscription in one process hear another
//!   process's writes, within a delay this test prints (ST1, ST2, P4).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use a2_core::*;
use a2_sqlite::{SqliteOptions, SqliteStore};
use futures::StreamExt;
use serde_json::json;

const ROLE: &str = "A2_SQLITE_ROLE";
const DB: &str = "A2_SQLITE_DB";

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions::default()).expect("open the database")
}

fn micros_now() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(now.as_micros()).unwrap()
}

/// A copy of this test binary playing `role` on `path`, its stdout piped.
fn spawn(role: &str, path: &Path) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--ignored",
            "--exact",
            "child_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(DB, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn a child process")
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

/// The lines a child prints, as they arrive.
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // The child's test harness opens the line the role's first
            // output continues.
            let line = match line.strip_prefix("test child_role ... ") {
                Some(rest) => rest.to_owned(),
                None => line,
            };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Writes one line to the parent at once: a line still in a buffer when
/// the process is killed would never arrive.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// Not a test on its own: the role a spawned copy of this binary plays.
#[test]
#[ignore = "run by the other tests of this file in a child process"]
fn child_role() {
    let (Ok(role), Ok(path)) = (std::env::var(ROLE), std::env::var(DB)) else {
        panic!("child_role runs only in a process spawned by the tests of this file");
    };
    let path = PathBuf::from(path);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        match role.as_str() {
            "crash" => crash_child(&path).await,
            "claimer" => claimer_child(&path).await,
            "writer" => writer_child(&path).await,
            "forker" => forker_child(&path).await,
            "announcer" => announcer_child(&path).await,
            other => panic!("unknown role {other}"),
        }
    });
}

/// Appends from 8 tasks and claims and completes from 2 more, printing
/// `ack …` for every write that returned Ok, until killed.
async fn crash_child(path: &Path) {
    let store = Arc::new(open(path));
    let run = std::process::id();
    let mut tasks = Vec::new();
    for task in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0u64.. {
                let session = format!("s{}", n % 4);
                let id = format!("{run}-{task}-{n}");
                let event = NewEvent::new("work", json!({ "n": n })).id(id.clone());
                let event = if n % 3 == 0 { event.lane("l") } else { event };
                store.append(&session, vec![event]).await.unwrap();
                say(&format!("ack append {session} {id}"));
            }
        }));
    }
    for worker in 0..2 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                for s in 0..4 {
                    let session = format!("s{s}");
                    let request = ClaimRequest {
                        session: session.clone(),
                        holder: format!("{run}-{worker}"),
                        lease: Lease::Ttl(200),
                        exclude_indexes: Vec::new(),
                        limit: 4,
                    };
                    let ClaimOutcome::Claimed { events: rows, .. } =
                        store.claim_available(request).await.unwrap()
                    else {
                        continue;
                    };
                    for row in rows {
                        let (index, attempt) = (row.event.index, row.attempt_count);
                        let returned = format!("r-{session}-{index}-{attempt}");
                        let outcome = store
                            .complete_attempt(CompleteRequest {
                                session: session.clone(),
                                index,
                                attempt,
                                events: vec![
                                    NewEvent::new("done", json!(null)).id(&returned).settled(),
                                ],
                                batch_size: None,
                            })
                            .await
                            .unwrap();
                        if matches!(outcome, CompleteOutcome::Completed { .. }) {
                            say(&format!(
                                "ack complete {session} {index} {attempt} {returned}"
                            ));
                        }
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// Claims and completes every pending event it can find, printing
/// `claimed session index attempt` per claim, until nothing is pending.
async fn claimer_child(path: &Path) {
    let store = open(path);
    let holder = format!("claimer-{}", std::process::id());
    // Both claimers start together: the test creates the `go` file once
    // each has said it is ready.
    say("ready");
    let go = go_file(path);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !go.exists() {
        assert!(Instant::now() < deadline, "no go signal");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut claimed = 0;
    let mut idle_rounds = 0;
    while idle_rounds < 3 && claimed < RACE_SHARE {
        let pending = store
            .pending_sessions(PageRequest {
                cursor: None,
                limit: 100,
            })
            .await
            .unwrap();
        if pending.sessions.is_empty() {
            idle_rounds += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        idle_rounds = 0;
        for session in pending.sessions {
            let request = ClaimRequest {
                session: session.clone(),
                holder: holder.clone(),
                lease: Lease::Ttl(60_000),
                exclude_indexes: Vec::new(),
                limit: 3,
            };
            let ClaimOutcome::Claimed { events: rows, .. } =
                store.claim_available(request).await.unwrap()
            else {
                continue;
            };
            for row in rows {
                let (index, attempt) = (row.event.index, row.attempt_count);
                claimed += 1;
                say(&format!("claimed {session} {index} {attempt}"));
                store
                    .complete_attempt(CompleteRequest {
                        session: session.clone(),
                        index,
                        attempt,
                        events: Vec::new(),
                        batch_size: None,
                    })
                    .await
                    .unwrap();
            }
        }
    }
    store.close().await;
}

/// A claimer in the C6 race stops claiming once it has taken this many
/// events, half of the 600 (it finishes the round over the pending
/// sessions first, so it may take a few more).
///
/// SQLite's write lock is not fair. A process waiting for it sleeps in the
/// busy handler's growing steps, and one that writes without pause can find
/// it free every time it asks, so without a share one claimer sometimes
/// took all 600 before the other got the lock once. With it, both take part
/// whatever the scheduling; a claimer stops only between claims, after
/// completing what it holds, so the other still races it for the rest.
const RACE_SHARE: usize = 300;

/// The file whose existence starts the claimers.
fn go_file(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.go", path.display()))
}

/// Appends 100 events to session `live`, each carrying its send time in
/// microseconds, with a presence write alongside the first, 20 ms apart.
async fn writer_child(path: &Path) {
    let store = open(path);
    for n in 0..100u64 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let sent = micros_now();
        store
            .append(
                "live",
                vec![NewEvent::new("tick", json!({ "n": n, "sent_us": sent })).settled()],
            )
            .await
            .unwrap();
        if n == 0 {
            let values = BTreeMap::from([("typing".to_owned(), Some(json!(true)))]);
            let meta = PresenceMeta {
                seen: 1,
                at: 1,
                ttl_ms: 600_000,
            };
            store
                .presence_set("live", "writer", values, meta)
                .await
                .unwrap();
        }
    }
    store.close().await;
}

/// A fresh database file in its own directory under cargo's target/tmp.
fn fresh_db(label: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix(label)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let path = dir.path().join("a2.db");
    (dir, path)
}

/// What a crashed child acknowledged.
#[derive(Default)]
struct Acks {
    appends: Vec<(String, String)>,
    completions: Vec<(String, u64, u32, String)>,
}

impl Acks {
    fn take(&mut self, line: &str) {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["ack", "append", session, id] => {
                self.appends.push(((*session).into(), (*id).into()));
            }
            ["ack", "complete", session, index, attempt, returned] => self.completions.push((
                (*session).into(),
                index.parse().unwrap(),
                attempt.parse().unwrap(),
                (*returned).into(),
            )),
            _ => {}
        }
    }
}

/// Durability: a child appending from 8 tasks and completing from 2 is
/// SIGKILLed mid-flight, three times over on one file. Every write it
/// acknowledged is there, the file passes SQLite's integrity check, and
/// each new child opens it and carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_crash_sigkill_loses_no_acknowledged_write() {
    let (_dir, path) = fresh_db("crash");
    let mut acks = Acks::default();
    for round in 0..3 {
        let mut child = Reaper(Some(spawn("crash", &path)));
        let rx = lines(child.0.as_mut().unwrap());
        let (mut appended, mut completed) = (0, 0);
        let deadline = Instant::now() + Duration::from_secs(60);
        // Kill once both kinds of write are flowing.
        while appended < 400 || completed < 40 {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| {
                    panic!("round {round}: the child stalled ({appended} appends, {completed} completions acknowledged)")
                });
            appended += usize::from(line.starts_with("ack append"));
            completed += usize::from(line.starts_with("ack complete"));
            acks.take(&line);
        }
        let mut killed = child.0.take().unwrap();
        killed.kill().expect("SIGKILL the child");
        killed.wait().unwrap();
        // Lines the child wrote before it died are still in the pipe.
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
            acks.take(&line);
        }
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);

    let store = open(&path);
    let mut rows: HashMap<String, Vec<StoredEvent>> = HashMap::new();
    for s in 0..4 {
        let session = format!("s{s}");
        let read = store.read(&session, ReadRange::default()).await.unwrap();
        let indexes: Vec<u64> = read.iter().map(|r| r.event.index).collect();
        assert_eq!(
            indexes,
            (1..=read.len() as u64).collect::<Vec<_>>(),
            "dense indexes"
        );
        rows.insert(session, read);
    }
    let ids: BTreeSet<(&str, &str)> = rows
        .iter()
        .flat_map(|(s, rows)| rows.iter().map(move |r| (s.as_str(), r.event.id.as_str())))
        .collect();
    for (session, id) in &acks.appends {
        assert!(
            ids.contains(&(session.as_str(), id.as_str())),
            "acknowledged append {id} to {session} is missing"
        );
    }
    for (session, index, attempt, returned) in &acks.completions {
        let row = &rows[session][*index as usize - 1];
        assert_eq!(
            row.processed_by_attempt,
            Some(*attempt),
            "{session} {index}"
        );
        assert_eq!(row.returned_event_ids, std::slice::from_ref(returned));
        let reply = rows[session].iter().find(|r| &r.event.id == returned);
        let reply = reply.unwrap_or_else(|| panic!("returned event {returned} is missing"));
        assert_eq!(
            reply.event.cause,
            Some(Cause {
                index: *index,
                attempt: *attempt,
                batch_size: None,
            })
        );
    }
    eprintln!(
        "crash: {} acknowledged appends and {} acknowledged completions over 3 kills, all present",
        acks.appends.len(),
        acks.completions.len()
    );
    // The store still works on the recovered file.
    store
        .append("s0", vec![NewEvent::new("after", json!(1))])
        .await
        .unwrap();
}

/// C6 across processes: two processes claim and complete 600 events of 6
/// sessions (a third of them on lanes) at once, each stopping after about
/// [`RACE_SHARE`]. No (session, index, attempt) is handed to both, every
/// event is processed exactly once by its first attempt, and both processes
/// took part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c6_two_processes_racing_to_claim_never_share_an_attempt() {
    let (_dir, path) = fresh_db("race");
    let store = open(&path);
    for s in 0..6 {
        let events = (0..100)
            .map(|n| {
                let e = NewEvent::new("job", json!({ "n": n }));
                if n % 3 == 0 {
                    e.lane(format!("lane{}", n % 2))
                } else {
                    e
                }
            })
            .collect();
        store.append(&format!("s{s}"), events).await.unwrap();
    }
    let mut children: Vec<Reaper> = (0..2)
        .map(|_| Reaper(Some(spawn("claimer", &path))))
        .collect();
    let receivers: Vec<_> = children
        .iter_mut()
        .map(|c| lines(c.0.as_mut().unwrap()))
        .collect();
    for rx in &receivers {
        // The test harness of the child prints its own lines first.
        while rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a claimer starts")
            != "ready"
        {}
    }
    std::fs::write(go_file(&path), "").unwrap();
    let mut claims: Vec<BTreeSet<(String, u64, u32)>> = Vec::new();
    for rx in &receivers {
        let mut mine = BTreeSet::new();
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) {
            if let ["claimed", session, index, attempt] =
                line.split(' ').collect::<Vec<_>>().as_slice()
            {
                let claim = (
                    (*session).to_owned(),
                    index.parse().unwrap(),
                    attempt.parse().unwrap(),
                );
                assert!(mine.insert(claim.clone()), "{claim:?} claimed twice");
            }
        }
        claims.push(mine);
    }
    for child in &mut children {
        let status = child.0.take().unwrap().wait().unwrap();
        assert!(status.success(), "a claimer failed");
    }
    let shared: Vec<_> = claims[0].intersection(&claims[1]).collect();
    assert!(shared.is_empty(), "handed to both processes: {shared:?}");
    assert!(
        claims.iter().all(|c| !c.is_empty()),
        "both processes claimed something: {} and {}",
        claims[0].len(),
        claims[1].len()
    );
    assert_eq!(claims[0].len() + claims[1].len(), 600);
    for s in 0..6 {
        let rows = store
            .read(&format!("s{s}"), ReadRange::default())
            .await
            .unwrap();
        assert!(
            rows.iter()
                .all(|r| r.processed_by_attempt == Some(1) && r.attempt_count == 1),
            "every event processed once, by its first attempt"
        );
    }
    eprintln!(
        "race: the two processes claimed {} and {} events",
        claims[0].len(),
        claims[1].len()
    );
}

/// ST1, ST2, P4 across processes: a feed in this process delivers every
/// event another process appends, in order, and a presence subscription
/// here receives that process's write. Prints the delay from the append
/// call in the other process to delivery here (the poll interval is 20 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn st2_p4_another_process_is_heard_within_a_bounded_delay() {
    let (_dir, path) = fresh_db("feed");
    let store = open(&path);
    let mut feed = store.stream("live", 0);
    let mut presence = store.presence_subscribe("live").await.unwrap();
    let _child = Reaper(Some(spawn("writer", &path)));
    let mut delays = Vec::new();
    for n in 0..100u64 {
        let event = tokio::time::timeout(Duration::from_secs(10), feed.next())
            .await
            .expect("the feed delivers within 10 s")
            .expect("the feed is open")
            .expect("an event");
        assert_eq!((event.index, event.payload["n"].as_u64()), (n + 1, Some(n)));
        let sent = event.payload["sent_us"].as_i64().unwrap();
        delays.push((micros_now() - sent) as f64 / 1000.0);
    }
    let patch = tokio::time::timeout(Duration::from_secs(10), presence.next())
        .await
        .expect("the presence write arrives within 10 s")
        .expect("the subscription is open")
        .expect("a patch");
    assert_eq!(patch.participant, "writer");
    assert_eq!(patch.values.get("typing"), Some(&Some(json!(true))));
    delays.sort_by(f64::total_cmp);
    eprintln!(
        "cross-process feed delay over {} events (ms): min {:.1}, median {:.1}, p90 {:.1}, max {:.1}",
        delays.len(),
        delays[0],
        delays[delays.len() / 2],
        delays[delays.len() * 9 / 10],
        delays[delays.len() - 1]
    );
}

/// Appends a settled event to `quiet` (no work), then a pending one to
/// `gains` (its pending count rises from zero), and exits.
async fn announcer_child(path: &Path) {
    let store = open(path);
    store
        .append("quiet", vec![NewEvent::new("t", json!(1)).settled()])
        .await
        .unwrap();
    store
        .append("gains", vec![NewEvent::new("t", json!(2))])
        .await
        .unwrap();
    store.close().await;
}

/// PS2 across processes: a wake-up stream of this process names the
/// session another process gave work, within the poll interval; the
/// session that only gained settled events, appended before it, is never
/// named (wake-ups arrive in commit order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ps2_another_process_s_new_work_is_announced() {
    let (_dir, path) = fresh_db("wakeups");
    let store = open(&path);
    assert!(store.pushes_wakeups());
    let mut wakeups = store.pending_wakeups().await.unwrap();
    let mut child = Reaper(Some(spawn("announcer", &path)));
    let woken = tokio::time::timeout(Duration::from_secs(10), wakeups.next())
        .await
        .expect("PS2: another process's new work is announced within 10 s")
        .expect("the stream is open")
        .expect("a session");
    assert_eq!(woken, "gains", "PS2: settled events are no work");
    let status = child.0.take().unwrap().wait().unwrap();
    assert!(status.success(), "the child appended: {status}");
    store.close().await;
}

/// Events of the session the forker forks.
const FORKED: u64 = 20_000;

/// Forks `source` at its last index onto `fork-{pid}-{n}` for n = 0, 1, …,
/// saying `start {target}` before each fork and `forked {target}` after,
/// until killed.
async fn forker_child(path: &Path) {
    let store = open(path);
    let run = std::process::id();
    for n in 0.. {
        let target = format!("fork-{run}-{n}");
        say(&format!("start {target}"));
        match store.fork("source", FORKED, &target).await {
            Ok(ForkOutcome::Forked { .. }) => say(&format!("forked {target}")),
            other => panic!("fork onto {target}: {other:?}"),
        }
    }
}

/// FK1: a child forking a 20 000-event session in a loop is SIGKILLed in
/// the middle of a fork, round after round: every target it started is
/// absent (not listed, reads as empty) or whole, and the file passes
/// SQLite's integrity check. Each round times the child's first fork and
/// kills it halfway into its second; the test goes on (up to 24 rounds)
/// until three kills landed mid-fork (the fork it interrupted was started,
/// never acknowledged, and is absent: a fork that committed just before
/// the kill, unacknowledged, does not count), so it cannot pass on kills
/// that all fell between forks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fk1_a_fork_killed_midway_leaves_no_target_or_a_whole_one() {
    let (_dir, path) = fresh_db("fork");
    let store = open(&path);
    for from in (0..FORKED).step_by(2_000) {
        let events = (from..from + 2_000)
            .map(|n| NewEvent::new("step", json!({"n": n, "text": "some words of a message"})))
            .collect();
        store.append("source", events).await.unwrap();
    }
    let source = store.read("source", ReadRange::default()).await.unwrap();
    let mut started = Vec::new();
    let mut forked = Vec::new();
    let mut interrupted = Vec::new();
    let mut midway = Vec::new();
    for round in 0..24u64 {
        if midway.len() >= 3 {
            break;
        }
        let mut child = Reaper(Some(spawn("forker", &path)));
        let rx = lines(child.0.as_mut().unwrap());
        let (first, second) = crash_timing::fork_and_time(&rx, &mut started, &mut forked, round);
        // Halfway into the second fork, by the first one's duration.
        std::thread::sleep(first / 2);
        let mut killed = child.0.take().unwrap();
        killed.kill().expect("SIGKILL the forker");
        killed.wait().unwrap();
        crash_timing::drain(&rx, &mut started, &mut forked);
        if !forked.contains(&second) {
            // Absent: killed mid-fork, its transaction never committed.
            let rows = store.read(&second, ReadRange::default()).await.unwrap();
            if rows.is_empty() {
                midway.push(second.clone());
            }
            interrupted.push(second);
        }
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);
    let listed: BTreeSet<String> = store
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
        assert_eq!(rows.len(), source.len(), "FK1: {target} is not whole");
        let same = rows
            .iter()
            .zip(&source)
            .all(|(a, b)| a.event.id == b.event.id && a.event.payload == b.event.payload);
        assert!(same, "FK1: {target} is not the source's prefix");
        whole += 1;
    }
    assert!(whole >= 3, "every round finished a fork before the kill");
    // Still absent after the other rounds: nothing finished them later.
    for target in &midway {
        let rows = store.read(target, ReadRange::default()).await.unwrap();
        assert!(rows.is_empty(), "FK1: {target} appeared after its kill");
    }
    assert!(
        midway.len() >= 3,
        "FK1: only {} of the kills landed mid-fork ({interrupted:?} interrupted, {midway:?} absent)",
        midway.len()
    );
    eprintln!(
        "fork crash: {} targets started; {whole} whole, {absent} absent; {} kills mid-fork",
        started.len(),
        midway.len()
    );
}

/// Timing a forker child's forks from the lines it prints.
mod crash_timing {
    use std::sync::mpsc::Receiver;
    use std::time::{Duration, Instant};

    /// Reads the child's lines until its second fork starts; returns how
    /// long its first fork took (from its `start` line to its `forked`
    /// line) and the second fork's target. Every line is noted in `started`
    /// and `forked`.
    pub fn fork_and_time(
        rx: &Receiver<String>,
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

    /// Notes the lines the child printed before it died.
    pub fn drain(rx: &Receiver<String>, started: &mut Vec<String>, forked: &mut Vec<String>) {
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(2)) {
            if let Some(target) = line.strip_prefix("start ") {
                started.push(target.to_owned());
            } else if let Some(target) = line.strip_prefix("forked ") {
                forked.push(target.to_owned());
            }
        }
    }
}
