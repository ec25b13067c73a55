//! `a2` on a SQLite file: `a2 demo --store sqlite:PATH` keeps its sessions
//! in the file (a second run continues the first run's sessions, and
//! `a2 inspect` reads them), and several `a2 worker` processes share one
//! file while one of them is killed.

mod common;

use std::process::Command;
use std::sync::Arc;

use a2::Store;
use a2::sqlite::{SqliteOptions, SqliteStore};
use serde_json::json;

use common::{A2, a2};

/// The indexes of the live-feed lines of `session` (`  0.12s bob    #3  …`).
fn feed_indexes(stdout: &str, session: &str) -> Vec<u64> {
    stdout
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                [_, label, index, ..] if *label == session => {
                    index.strip_prefix('#').and_then(|i| i.parse().ok())
                }
                _ => None,
            }
        })
        .collect()
}

#[test]
fn demo_twice_on_sqlite_continues_the_first_runs_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("demo.db").display());

    let first = a2(&["demo", "--think-ms", "5", "--store", &url]);
    assert!(!first.contains("continuing"), "{first}");
    assert!(
        first.contains("stored now: 45 events, 13 attempts, 5 failures, 1 dead letter"),
        "unexpected summary:\n{first}"
    );

    let second = a2(&["demo", "--think-ms", "5", "--store", &url]);
    assert!(
        second.contains("continuing 3 sessions with 45 events from an earlier run"),
        "{second}"
    );
    // The same work again, counted on top of the first run's.
    assert!(
        second.contains("stored now: 90 events, 26 attempts, 10 failures, 2 dead letters"),
        "unexpected summary:\n{second}"
    );
    // The live feed shows the new events only: bob's first new one is #13.
    assert_eq!(feed_indexes(&first, "bob").first(), Some(&1), "{first}");
    assert_eq!(feed_indexes(&second, "bob").first(), Some(&13), "{second}");
    // The transcripts hold both runs' conversations.
    let lisbon = second.matches("user      Plan a weekend in Lisbon").count();
    assert_eq!(lisbon, 2, "{second}");

    let listing = a2(&["inspect", "--store", &url]);
    let bob = listing
        .lines()
        .find(|l| l.split_whitespace().next() == Some("bob"))
        .unwrap_or_else(|| panic!("bob's session listed:\n{listing}"));
    let columns: Vec<&str> = bob.split_whitespace().collect();
    // events, from (the first retained index), pending, dead, attempts,
    // failures, log
    assert_eq!(columns[1..], ["24", "1", "0", "2", "10", "6", "open"]);
}

/// `a2 revive` makes a dead letter of the demo pending again with its
/// failures reset; a second revive is refused with the event's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revive_makes_a_dead_letter_pending_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.db");
    let url = format!("sqlite:{}", path.display());
    a2(&["demo", "--think-ms", "5", "--store", &url]);
    let dead = {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let rows = store.read("bob", a2::ReadRange::default()).await.unwrap();
        store.close().await;
        rows.into_iter()
            .find(|r| r.failed_at.is_some())
            .expect("the demo leaves a dead letter in bob's session")
    };
    let index = dead.event.index.to_string();
    let out = a2(&["revive", "--store", &url, "bob", &index]);
    assert!(out.starts_with(&format!("revived bob #{index} ")), "{out}");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let rows = store.read("bob", a2::ReadRange::default()).await.unwrap();
    let row = &rows[dead.event.index as usize - 1];
    assert!(row.is_pending() && row.failure_count == 0, "{row:?}");
    store.close().await;

    let again = Command::new(A2)
        .args(["revive", "--store", &url, "bob", &index])
        .output()
        .unwrap();
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains(&format!("bob #{index} is not dead-lettered: it is pending")),
        "{stderr}"
    );
}

/// `a2 trim` removes a session's settled prefix (refusing one with
/// pending work, naming it), `a2 close` closes it, and `a2 inspect` shows
/// both: where the session starts and that its log is final.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_and_close_a_session_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a2.db");
    let url = format!("sqlite:{}", path.display());
    {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let mut events: Vec<_> = (0..5)
            .map(|n| a2::NewEvent::new("note", json!(n)).settled())
            .collect();
        events.push(a2::NewEvent::new("job", json!("later")));
        store.append("chat", events).await.unwrap();
        store.close().await;
    }
    let refused = Command::new(A2)
        .args(["trim", "--store", &url, "chat", "6"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("event 6") && stderr.contains("pending"),
        "{stderr}"
    );

    // RT19: a reducer's snapshot older than the trim point would be left
    // unreadable: refused, naming it, nothing written, unless allowed.
    {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let write = a2::SnapshotWrite {
            reducer: "summary".into(),
            index: 2,
            state: json!("two notes"),
        };
        store.put_snapshots("chat", vec![write]).await.unwrap();
        store.close().await;
    }
    let refused = Command::new(A2)
        .args(["trim", "--store", &url, "chat", "4"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("\"summary\" (at #2)") && stderr.contains("--allow-stale-snapshots"),
        "{stderr}"
    );
    let listing = a2(&["inspect", "--store", &url]);
    let line = listing.lines().find(|l| l.starts_with("chat ")).unwrap();
    assert_eq!(
        line.split_whitespace().nth(2),
        Some("1"),
        "RT19: nothing trimmed: {line}"
    );

    let out = a2(&[
        "trim",
        "--store",
        &url,
        "chat",
        "4",
        "--allow-stale-snapshots",
    ]);
    assert!(out.contains("keeps its events from #5 on"), "{out}");
    assert!(
        out.contains("the state of summary can no longer be read"),
        "{out}"
    );
    let out = a2(&["close", "--store", &url, "chat"]);
    assert!(out.contains("closed chat at #6"), "{out}");
    let out = a2(&["close", "--store", &url, "chat"]);
    assert!(out.contains("was closed already, at #6"), "{out}");

    let listing = a2(&["inspect", "--store", &url]);
    let line = listing.lines().find(|l| l.starts_with("chat ")).unwrap();
    let columns: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        columns[1..3],
        ["6", "5"],
        "events and the first index: {line}"
    );
    assert_eq!(columns.last(), Some(&"closed"), "{line}");
    let events = a2(&["inspect", "--store", &url, "chat"]);
    assert!(events.contains("keeps its events from #5 on"), "{events}");
    assert!(events.contains("its log is final at #6"), "{events}");
    let indexes: Vec<&str> = events
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u64>().is_ok())
        .collect();
    assert_eq!(indexes, ["5", "6"], "{events}");
}

/// `a2 fork` branches a session (FK1, FK3, FK4): the new session holds the
/// source's events up to the index, `a2 inspect` names its origin, the
/// same fork again changes nothing, and a bad index is refused with
/// nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_a_session_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a2.db");
    let url = format!("sqlite:{}", path.display());
    {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let events: Vec<_> = (0..5)
            .map(|n| a2::NewEvent::new("note", json!(n)).settled())
            .collect();
        store.append("chat", events).await.unwrap();
        store.close().await;
    }
    let out = a2(&["fork", "--store", &url, "chat", "3", "chat-b"]);
    assert!(
        out.contains("forked chat at #3 into chat-b") && out.contains("the next append gets #4"),
        "{out}"
    );
    let out = a2(&["fork", "--store", &url, "chat", "3", "chat-b"]);
    assert!(out.contains("already; nothing changed"), "{out}");
    let refused = Command::new(A2)
        .args(["fork", "--store", &url, "chat", "9", "chat-c"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("its last index is 5"), "{stderr}");
    let events = a2(&["inspect", "--store", &url, "chat-b"]);
    assert!(events.contains("forked from chat at #3"), "{events}");
    let indexes: Vec<&str> = events
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u64>().is_ok())
        .collect();
    assert_eq!(indexes, ["1", "2", "3"], "{events}");
    let listing = a2(&["inspect", "--store", &url]);
    assert!(!listing.contains("chat-c"), "nothing written: {listing}");
}

/// `a2 expire` sets when a session expires (and `a2 inspect` says so), or
/// keeps it for good; without a choice it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_sets_and_removes_a_sessions_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a2.db");
    let url = format!("sqlite:{}", path.display());
    {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        store
            .append("chat", vec![a2::NewEvent::new("note", json!(1))])
            .await
            .unwrap();
        store.close().await;
    }
    let out = a2(&["expire", "--store", &url, "chat", "--ttl-ms", "3600000"]);
    // (Within the millisecond of the append, all 3 600 000 ms are left.)
    assert!(
        out.starts_with("chat expires in 3599") || out.starts_with("chat expires in 3600000 "),
        "{out}"
    );
    let events = a2(&["inspect", "--store", &url, "chat"]);
    assert!(events.contains("expires in "), "{events}");
    let out = a2(&["expire", "--store", &url, "chat", "--never"]);
    assert!(out.contains("kept until it is deleted"), "{out}");
    let events = a2(&["inspect", "--store", &url, "chat"]);
    assert!(!events.contains("expires in "), "{events}");
    for args in [
        vec!["expire", "--store", &url, "chat"],
        vec!["expire", "--store", &url, "chat", "--ttl-ms", "0"],
        vec!["expire", "--store", &url, "nobody", "--ttl-ms", "5"],
    ] {
        let refused = Command::new(A2).args(&args).output().unwrap();
        assert!(!refused.status.success(), "{args:?}");
        assert!(!refused.stderr.is_empty(), "{args:?} says why");
    }
}

#[test]
fn an_unknown_store_url_is_refused_with_the_accepted_forms() {
    let output = Command::new(A2)
        .args(["demo", "--store", "mysql://x"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("memory, sqlite:PATH, redis://HOST:PORT, rediss://… or https://…"),
        "{stderr}"
    );
    assert!(
        stderr.contains("postgres://USER:PASSWORD@HOST/DATABASE"),
        "{stderr}"
    );
}

/// Three `a2 worker` processes on one SQLite file, one of them killed
/// mid-run: every event is processed exactly once (see `common`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_on_one_file_one_killed_process_everything_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("workers.db");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&path, SqliteOptions::default()).unwrap());
    let url = format!("sqlite:{}", path.display());
    common::three_workers_one_killed(&url, "a2", store).await;
}

/// `a2 inspect` with no `--store` reads the store `a2 serve` uses by
/// default, the file `a2.db` in the current folder; `--prefix` filters the
/// sessions by name as `GET /v1/sessions?prefix=` does; and `--prefix` is
/// no Redis key prefix anywhere (that is `--key-prefix`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_defaults_to_a2_db_and_prefix_filters_sessions() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SqliteStore::open(dir.path().join("a2.db"), SqliteOptions::default()).unwrap();
        for session in ["chat-1", "chat-2", "job-1"] {
            let events = vec![a2::NewEvent::new("note", json!(session)).settled()];
            store.append(session, events).await.unwrap();
        }
        store.close().await;
    }
    let run = |args: &[&str]| {
        let output = Command::new(A2)
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let names = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|w| w.contains('-'))
            .map(str::to_owned)
            .collect()
    };
    let (ok, all, stderr) = run(&["inspect"]);
    assert!(ok, "{stderr}");
    assert_eq!(names(&all), ["chat-1", "chat-2", "job-1"], "{all}");
    let (ok, chats, stderr) = run(&["inspect", "--prefix", "chat-"]);
    assert!(ok, "{stderr}");
    assert_eq!(names(&chats), ["chat-1", "chat-2"], "{chats}");
    let (ok, _, stderr) = run(&["worker", "--prefix", "a2"]);
    assert!(!ok, "--prefix is not the key prefix");
    assert!(stderr.contains("--key-prefix"), "{stderr}");
}
