//! Stop and later across processes (RT17, RT18, CN1, CN5, DL1): an
//! `a2 worker` process streaming a reply stops mid-reply when its message
//! is cancelled by another process, and a delayed message runs once, at
//! its time, after the worker that first saw it was killed and another
//! started. Both on a SQLite file, the default store.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use a2::sqlite::{SqliteOptions, SqliteStore};
use a2::{NewEvent, ReadRange, Store, StoredEvent};
use serde_json::json;

use common::{A2, Workers, a2};

/// A worker on `url` whose stderr lines arrive on the returned channel.
fn worker(url: &str, holder: &str, think_ms: u64) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(A2)
        .args(["worker", "--store", url, "--holder", holder])
        .args(["--poll-ms", "100", "--lease-ms", "3000"])
        .args(["--think-ms", &think_ms.to_string()])
        // A cancelled handler that ignored its signal would run on for a
        // minute: the test sees the signal work, never the grace run out.
        .args(["--cancel-grace-ms", "60000", "--grace-ms", "10000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a2 worker starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Waits (with a deadline) for a line of `lines` containing `needle`;
/// returns the lines seen until then.
fn wait_line(lines: &mpsc::Receiver<String>, needle: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(needle);
                seen.push(line);
                if found {
                    return seen;
                }
            }
            Err(_) => panic!("no line with {needle:?} within {within:?}; saw {seen:#?}"),
        }
    }
}

async fn rows(store: &SqliteStore, session: &str) -> Vec<StoredEvent> {
    store.read(session, ReadRange::default()).await.unwrap()
}

async fn until<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stops a worker with SIGTERM; returns its last line, the summary.
fn terminate(mut child: Child, lines: &mpsc::Receiver<String>) -> String {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let seen = wait_line(lines, "stopped:", Duration::from_secs(30));
    assert!(child.wait().unwrap().success(), "the worker exits cleanly");
    seen.last().cloned().unwrap_or_default()
}

/// RT17, CN1, CN5: the demo streams its reply chunk by chunk; `a2 cancel`,
/// run as its own process while the first chunks are out, stops the
/// handler in the worker process at once (its grace is a minute, so only
/// the signal can stop it in time): the worker reports the attempt
/// cancelled, no chunk follows the cancel, and no reply is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_stops_mid_stream_when_its_message_is_cancelled_from_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a2.db");
    let url = format!("sqlite:{}", path.display());
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let (child, lines) = worker(&url, "w-stop", 300);
    let mut workers = Workers(vec![child]);
    wait_line(&lines, "started", Duration::from_secs(20));
    let message = NewEvent::new(
        "user.message",
        json!({"text": "Plan two days in Lisbon", "conversation": "c"}),
    );
    store.append("chat", vec![message]).await.unwrap();
    // The handler is mid-reply once its first chunk is in the log.
    until("the first chunk of the reply", async || {
        let rows = rows(&store, "chat").await;
        rows.iter()
            .any(|r| r.event.event_type == "assistant.delta")
            .then_some(())
    })
    .await;
    let out = a2(&[
        "cancel",
        "--store",
        &url,
        "chat",
        "1",
        "--reason",
        "the user pressed stop",
    ]);
    assert!(
        out.starts_with("cancelled chat #1 (user.message); attempt 1 is superseded"),
        "{out}"
    );
    let seen = wait_line(&lines, "cancelled after", Duration::from_secs(20));
    assert!(
        seen.last().unwrap().contains("chat #1 (user.message)"),
        "{seen:#?}"
    );
    let child = workers.0.pop().unwrap();
    let stderr = terminate(child, &lines);
    assert!(stderr.contains("cancelled 1"), "{stderr}");
    let rows = rows(&store, "chat").await;
    let message = &rows[0];
    let cancelled_at = message.cancelled_at.expect("the message is cancelled");
    assert_eq!(
        message.cancel_reason.as_deref(),
        Some("the user pressed stop")
    );
    let deltas: Vec<&StoredEvent> = rows
        .iter()
        .filter(|r| r.event.event_type == "assistant.delta")
        .collect();
    let chunks = a2_cli_reply_chunks("Plan two days in Lisbon");
    assert!(
        !deltas.is_empty() && deltas.len() < chunks,
        "stopped mid-reply: {} of {chunks} chunks",
        deltas.len()
    );
    assert!(
        deltas.iter().all(|d| d.event.created_at <= cancelled_at),
        "no chunk after the cancel"
    );
    assert!(
        rows.iter().all(|r| r.event.event_type != "assistant.reply"),
        "no reply is written for a cancelled message"
    );
    store.close().await;
}

/// How many chunks the demo streams its reply to `text` in (four words
/// each), read from a run of `a2 demo`'s reply text: the Lisbon reply.
fn a2_cli_reply_chunks(_text: &str) -> usize {
    let reply = "Day one: Alfama at sunrise, tram 28, and pastéis in Belém. Day two: Sintra's palaces, back for fado.";
    reply.split_inclusive(' ').count().div_ceil(4)
}

/// RT18, DL1, PS1: a message delayed by two seconds is seen by a worker
/// that is then killed before it is due; a worker started afterwards finds
/// it by listing and runs it once, not before its due time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_message_runs_once_at_its_time_after_a_worker_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a2.db");
    let url = format!("sqlite:{}", path.display());
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let later = NewEvent::new(
        "user.message",
        json!({"text": "Recommend a novel", "conversation": "c"}),
    )
    .delay(Duration::from_millis(2_000));
    let appended = store.append("remind", vec![later]).await.unwrap();
    let due = appended.events[0].retry_at.expect("a due time");
    let (first, lines) = worker(&url, "w-first", 5);
    let mut workers = Workers(vec![first]);
    // The first worker lists the session and drains it: its claim is Busy
    // until the due time.
    wait_line(
        &lines,
        "1 session with pending events",
        Duration::from_secs(20),
    );
    let mut first = workers.0.pop().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    let row = &rows(&store, "remind").await[0];
    assert!(
        row.is_pending() && row.attempt_count == 0,
        "killed before the due time: {row:?}"
    );
    let (second, lines) = worker(&url, "w-second", 5);
    workers.0.push(second);
    wait_line(
        &lines,
        "1 session with pending events",
        Duration::from_secs(20),
    );
    let row = until("the delayed message processed", async || {
        let rows = rows(&store, "remind").await;
        rows[0].processed_at.map(|_| rows[0].clone())
    })
    .await;
    assert_eq!(
        (row.attempt_count, row.processed_by_attempt),
        (1, Some(1)),
        "run once"
    );
    let started = row.first_claimed_at.expect("claimed");
    assert!(started >= due, "not before its due time: {started} < {due}");
    let stderr = terminate(workers.0.pop().unwrap(), &lines);
    assert!(stderr.contains("claimed 1, completed 1"), "{stderr}");
    store.close().await;
}
