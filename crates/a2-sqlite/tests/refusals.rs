//! A write that leaves nothing — refused for bad input or against the
//! data, a lost-ack replay, a cancel or revive of an event not in that
//! state — leaves the file byte for byte as it was: no commit, so the
//! `commits` counter stays, and another process's poller (which watches
//! `PRAGMA data_version`) sees no change and reads nothing.

use std::path::{Path, PathBuf};

use a2_core::{
    AppendOptions, CompleteRequest, ErrorCode, Limits, NewEvent, Result, Store, StoreOptions,
};
use a2_sqlite::{SqliteOptions, SqliteStore};
use rusqlite::Connection;
use serde_json::json;

/// What another process would see of the file: its bytes and those of its
/// write-ahead log, the data version its own open connection reads, and
/// the commit counter.
#[derive(Debug, PartialEq)]
struct Seen {
    db: Vec<u8>,
    wal: Option<Vec<u8>>,
    data_version: i64,
    seq: i64,
}

fn seen(path: &Path, other: &Connection) -> Seen {
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    Seen {
        db: std::fs::read(path).unwrap(),
        wal: std::fs::read(wal).ok(),
        data_version: other
            .query_row("PRAGMA data_version", [], |row| row.get(0))
            .unwrap(),
        seq: other
            .query_row("SELECT seq FROM commits WHERE id = 1", [], |row| row.get(0))
            .unwrap(),
    }
}

fn ev(id: &str) -> NewEvent {
    NewEvent::new("t", json!({ "id": id })).id(id)
}

/// `op`'s outcome must be `expected` (an error code, or success for a
/// replay or an answer that writes nothing), and the file must stay as it
/// was.
async fn leaves_nothing<T: std::fmt::Debug>(
    path: &Path,
    other: &Connection,
    what: &str,
    expected: Option<ErrorCode>,
    op: impl std::future::Future<Output = Result<T>>,
) {
    let before = seen(path, other);
    let outcome = op.await;
    match (&outcome, expected) {
        (Ok(_), None) => {}
        (Err(error), Some(code)) if error.code() == code => {}
        _ => panic!("{what}: expected {expected:?}, got {outcome:?}"),
    }
    let after = seen(path, other);
    assert_eq!(
        (after.data_version, after.seq),
        (before.data_version, before.seq),
        "{what}: another process sees a commit"
    );
    assert!(after == before, "{what}: the file changed");
}

#[tokio::test]
async fn refused_writes_and_replays_leave_the_file_byte_for_byte() {
    let dir = tempfile::Builder::new()
        .prefix("refusals")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let path = dir.path().join("a2.db");
    let options = SqliteOptions::default()
        .store(StoreOptions::default().with_limits(Limits::default().with_max_payload_bytes(64)));
    let store = SqliteStore::open(&path, options).unwrap();
    store.append("s", vec![ev("e1"), ev("e2")]).await.unwrap();
    store
        .append("done", vec![ev("d1").settled()])
        .await
        .unwrap();
    store.close_session("done").await.unwrap();
    // As another process: its own connection, open all along.
    let other = Connection::open(&path).unwrap();
    let (p, o) = (path.as_path(), &other);

    leaves_nothing(
        p,
        o,
        "A6: a new id, then an existing one",
        Some(ErrorCode::PartialDuplicateBatch),
        store.append("s", vec![ev("n1"), ev("e1")]),
    )
    .await;
    leaves_nothing(
        p,
        o,
        "A3: one id twice",
        Some(ErrorCode::PartialDuplicateBatch),
        store.append("s", vec![ev("n2"), ev("n2")]),
    )
    .await;
    leaves_nothing(
        p,
        o,
        "A5: a lost-ack replay",
        None,
        store.append("s", vec![ev("e1"), ev("e2")]),
    )
    .await;
    leaves_nothing(
        p,
        o,
        "A12: a payload over the limit",
        Some(ErrorCode::InvalidArgument),
        store.append("s", vec![NewEvent::new("t", json!("x".repeat(100)))]),
    )
    .await;
    leaves_nothing(
        p,
        o,
        "A13: another frontier",
        Some(ErrorCode::FrontierMoved),
        store.append_with("s", vec![ev("n3")], AppendOptions::new().if_frontier(1)),
    )
    .await;
    leaves_nothing(
        p,
        o,
        "CL2: a closed session",
        Some(ErrorCode::SessionClosed),
        store.append("done", vec![ev("n4")]),
    )
    .await;
    leaves_nothing(
        p,
        o,
        "CL1: closed already",
        None,
        store.close_session("done"),
    )
    .await;
    leaves_nothing(
        p,
        o,
        "TR2: a trim over pending events",
        Some(ErrorCode::InvalidArgument),
        store.trim("s", 2),
    )
    .await;
    leaves_nothing(
        p,
        o,
        "CO5: a completion of an unclaimed event",
        None,
        store.complete_attempt(CompleteRequest::new("s", 1, 1)),
    )
    .await;
    leaves_nothing(
        p,
        o,
        "CN3: a cancel of a settled event",
        None,
        store.cancel("done", 1, None),
    )
    .await;
    leaves_nothing(
        p,
        o,
        "RV3: a revive of a pending event",
        None,
        store.revive("s", 1),
    )
    .await;
    leaves_nothing(
        p,
        o,
        "CN4: a cancel outside the log",
        Some(ErrorCode::InvalidArgument),
        store.cancel("s", 9, None),
    )
    .await;

    // A write that does change something is seen, so the checks above can
    // fail.
    let before = seen(p, o);
    store.append("s", vec![ev("e3")]).await.unwrap();
    let after = seen(p, o);
    assert_ne!(after.data_version, before.data_version, "a commit is seen");
    assert_eq!(after.seq, before.seq + 1, "a commit is counted");
    store.close().await;
}
