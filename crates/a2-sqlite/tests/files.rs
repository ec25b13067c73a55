//! Opening files that the store must refuse: not an a2 database, an a2
//! database of a newer schema version, a file it cannot write. Each gives a
//! clear `InvalidArgument` and leaves the file byte for byte as it was. A
//! damaged a2 database (cut short) is `Corrupted`, never the retryable
//! `StoreUnavailable` (E1).

use futures::StreamExt;
use std::path::{Path, PathBuf};

use a2_core::{ErrorCode, NewEvent, ReadRange, Store};
use a2_sqlite::{SCHEMA_VERSION, SqliteOptions, SqliteStore};
use serde_json::json;

const ROLE: &str = "A2_SQLITE_ROLE";
const DB: &str = "A2_SQLITE_DB";

fn dir(label: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(label)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// The bytes of the database and its write-ahead log, if any.
fn bytes(path: &Path) -> (Vec<u8>, Option<Vec<u8>>) {
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    (std::fs::read(path).unwrap(), std::fs::read(wal).ok())
}

/// Opens `path` and returns the error's code and message.
fn refused(path: &Path) -> (ErrorCode, String) {
    match SqliteStore::open(path, SqliteOptions::default()) {
        Ok(_) => panic!("{} was opened", path.display()),
        Err(error) => (error.code(), error.to_string()),
    }
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_untouched() {
    let dir = dir("notdb");
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "these are my notes, not a database\n".repeat(200)).unwrap();
    let before = bytes(&path);
    let (code, message) = refused(&path);
    assert_eq!(code, ErrorCode::InvalidArgument, "{message}");
    assert!(message.contains("not an a2 database"), "{message}");
    assert_eq!(bytes(&path), before);
}

/// E1: an a2 database cut short (a copy that stopped halfway, a full disk)
/// is `Corrupted`, never retried as if the store were only unavailable.
#[tokio::test]
async fn e1_a_truncated_database_is_corrupted() {
    let dir = dir("truncated");
    let path = dir.path().join("a2.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    for n in 0..200 {
        let events = vec![NewEvent::new(
            "t",
            json!({ "n": n, "text": "x".repeat(200) }),
        )];
        store.append(&format!("s{n}"), events).await.unwrap();
    }
    store.close().await;
    drop(store);
    // Checkpointed into the file on close; cut the file in half.
    let size = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(size / 2).unwrap();
    drop(file);
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let (code, message) = refused(&path);
    assert_eq!(code, ErrorCode::Corrupted, "{message}");
    assert!(!code.is_retryable());
}

#[test]
fn a_sqlite_database_of_another_application_is_refused_untouched() {
    let dir = dir("otherdb");
    let path = dir.path().join("other.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hello');")
        .unwrap();
    drop(conn);
    let before = bytes(&path);
    let (code, message) = refused(&path);
    assert_eq!(code, ErrorCode::InvalidArgument, "{message}");
    assert!(message.contains("another application"), "{message}");
    assert_eq!(bytes(&path), before);
    // Still in its own journal mode, still readable by its owner.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
}

#[tokio::test]
async fn an_a2_database_of_a_newer_schema_is_refused_untouched() {
    let dir = dir("newer");
    let path = dir.path().join("a2.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    store
        .append("s", vec![NewEvent::new("t", json!(1))])
        .await
        .unwrap();
    store.close().await;
    drop(store);
    // What a later a2 would write.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA user_version = {}; PRAGMA wal_checkpoint(TRUNCATE);",
        SCHEMA_VERSION + 1
    ))
    .unwrap();
    drop(conn);
    let before = bytes(&path);
    let (code, message) = refused(&path);
    assert_eq!(code, ErrorCode::InvalidArgument, "{message}");
    assert!(message.contains("newer"), "{message}");
    assert_eq!(bytes(&path), before);

    // Back at this version, it opens and holds its event.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))
        .unwrap();
    drop(conn);
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let rows = store.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(rows.len(), 1);
}

/// A database of schema version 1 (before closes, trims, expiries and
/// forks) is migrated when opened: its events stay, and it can be closed,
/// trimmed, given an expiry and forked.
#[tokio::test]
async fn an_a2_database_of_version_1_is_migrated() {
    let dir = dir("migrated");
    let path = dir.path().join("a2.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let events = (1..=3)
        .map(|n| NewEvent::new("t", json!(n)).settled())
        .collect();
    store.append("s", events).await.unwrap();
    let pending = (1..=3).map(|n| NewEvent::new("t", json!(n))).collect();
    store.append("p", pending).await.unwrap();
    store.close().await;
    drop(store);
    // What version 1 wrote: the sessions table without the lifecycle
    // columns, ids indexed session first, every ready event in `events_free`.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "DROP INDEX events_by_id;
         CREATE UNIQUE INDEX events_by_id ON events (sid, id);
         UPDATE events SET free = 1 WHERE free IS NOT NULL;
         DROP INDEX events_free;
         CREATE INDEX events_free ON events (sid, idx) WHERE free IS NOT NULL;
         DROP INDEX sessions_woke;
         ALTER TABLE sessions DROP COLUMN woke;
         ALTER TABLE sessions DROP COLUMN tail_from;
         DROP INDEX sessions_deadline;
         ALTER TABLE sessions DROP COLUMN ttl_ms;
         ALTER TABLE sessions DROP COLUMN expires_at;
         ALTER TABLE sessions DROP COLUMN first_index;
         ALTER TABLE sessions DROP COLUMN closed_frontier;
         ALTER TABLE sessions DROP COLUMN closed_at;
         ALTER TABLE sessions DROP COLUMN forked_from;
         ALTER TABLE sessions DROP COLUMN forked_index;
         ALTER TABLE events DROP COLUMN cancelled_at;
         ALTER TABLE events DROP COLUMN cancel_reason;
         DROP TABLE cancels;
         PRAGMA user_version = 1; PRAGMA wal_checkpoint(TRUNCATE);",
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    assert_eq!(
        store.read("s", ReadRange::default()).await.unwrap().len(),
        3
    );
    assert_eq!(store.trim("s", 2).await.unwrap().first_index, 3);
    assert!(store.close_session("s").await.is_ok());
    let expiry = store.set_expiry("s", a2_core::Expiry::ttl(60_000)).await;
    assert!(expiry.unwrap().deadline.is_some());
    assert!(store.fork("s", 3, "f").await.is_ok(), "forks (version 4)");
    store
        .append("c", vec![NewEvent::new("t", json!(1))])
        .await
        .unwrap();
    let cancelled = store.cancel("c", 1, Some("stop".into())).await.unwrap();
    assert!(cancelled.is_cancelled(), "cancels (version 5)");
    // Version 6: the ready events of before are claimed, in index order.
    let claimed = store
        .claim_available(a2_core::ClaimRequest {
            session: "p".into(),
            holder: "w".into(),
            lease: a2_core::Lease::Ttl(60_000),
            exclude_indexes: vec![1],
            limit: 2,
        })
        .await
        .unwrap();
    let a2_core::ClaimOutcome::Claimed {
        events: claimed, ..
    } = claimed
    else {
        panic!("nothing claimed: {claimed:?}");
    };
    let indexes: Vec<u64> = claimed.iter().map(|e| e.event.index).collect();
    assert_eq!(indexes, [2, 3], "claims (version 6)");
    // Version 7: another process's announcements of work (PS2) reach this
    // one through `sessions.woke`.
    let mut wakeups = store.pending_wakeups().await.unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch(
            "BEGIN IMMEDIATE;
             UPDATE sessions SET woke = (SELECT seq + 1 FROM commits WHERE id = 1) WHERE name = 'p';
             UPDATE commits SET seq = seq + 1 WHERE id = 1;
             COMMIT;",
        )
        .unwrap();
    let woken = tokio::time::timeout(std::time::Duration::from_secs(10), wakeups.next()).await;
    assert_eq!(
        woken.ok().flatten().map(Result::unwrap).as_deref(),
        Some("p"),
        "wake-ups (version 7)"
    );
    store.close().await;
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i32 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
}

/// Root may write any file, so as root the check runs in a child process
/// (this test binary again) as the user `nobody`.
#[cfg(unix)]
#[test]
fn a_file_this_process_cannot_write_is_refused_untouched() {
    use std::os::unix::process::CommandExt;

    let dir = dir("readonly");
    let path = dir.path().join("a2.db");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        store
            .append("s", vec![NewEvent::new("t", json!(1))])
            .await
            .unwrap();
        store.close().await;
    });
    drop(runtime);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    drop(conn);
    let before = bytes(&path);
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    let output = if root {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "child_role", "--nocapture"])
            .env(ROLE, "open")
            .env(DB, &path)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap()
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "child_role", "--nocapture"])
            .env(ROLE, "open")
            .env(DB, &path)
            .output()
            .unwrap()
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The child's test harness may open the line the report continues.
    let line = stdout
        .lines()
        .find_map(|l| l.find("refused ").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("the child reports a refusal:\n{stdout}"));
    eprintln!("{line}");
    assert!(line.starts_with("refused InvalidArgument"), "{line}");
    assert!(line.contains(&path.display().to_string()), "{line}");
    assert_eq!(bytes(&path), before);
}

/// Not a test on its own: the role a spawned copy of this binary plays.
#[test]
#[ignore = "run by a_file_this_process_cannot_write_is_refused_untouched in a child process"]
fn child_role() {
    let (Ok(role), Ok(path)) = (std::env::var(ROLE), std::env::var(DB)) else {
        panic!("child_role runs only in a process spawned by the tests of this file");
    };
    assert_eq!(role, "open");
    match SqliteStore::open(&path, SqliteOptions::default()) {
        Ok(_) => println!("opened"),
        Err(error) => println!("refused {:?} {error}", error.code()),
    }
}
