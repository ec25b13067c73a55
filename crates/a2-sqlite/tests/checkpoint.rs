//! The write-ahead log is checkpointed by a thread of its own, never by an
//! append waiting in line (see `checkpoint.rs`), and stays bounded even
//! under a writer that never pauses.

use std::time::{Duration, Instant};

use a2_core::{NewEvent, Store};
use a2_sqlite::{SqliteOptions, SqliteStore};
use serde_json::json;

fn dir(label: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(label)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// Threads of this process with `name`.
fn threads(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|comm| comm.trim() == name)
                .count()
        })
        .unwrap_or(0)
}

/// The checkpoint thread's name as Linux keeps it (15 bytes).
const CHECKPOINT_THREAD: &str = "a2-sqlite-check";

fn big(i: usize) -> NewEvent {
    // About two pages a row: a commit adds a few pages to the log.
    NewEvent::new("chunk", json!({ "i": i, "text": "x".repeat(6_000) })).settled()
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_of_its_own_copies_the_log_back_and_keeps_it_bounded() {
    let first = dir("ckpt");
    let path = first.path().join("a2.db");
    let before = threads(CHECKPOINT_THREAD);
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    // A new thread names itself once it runs.
    let deadline = Instant::now() + Duration::from_secs(10);
    while threads(CHECKPOINT_THREAD) != before + 1 {
        assert!(Instant::now() < deadline, "no checkpoint thread");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // More than a checkpoint's worth of pages (1 000), then a pause.
    for i in 0..600 {
        store.append("s", vec![big(i)]).await.unwrap();
    }
    // Until a checkpoint, the rows are only in the log: the database file
    // holds them once one has copied them back.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let size = std::fs::metadata(&path).unwrap().len();
        if size > 3_000_000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint: the database file holds {size} bytes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.close().await;
    assert_eq!(threads(CHECKPOINT_THREAD), before);

    // Under writers that never pause, the log stays bounded.
    let bounded = dir("ckptbound");
    let path = bounded.path().join("a2.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    // 8 tasks appending back to back: about 100 MB through the log.
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..1_000 {
                    store
                        .append(&format!("s{t}"), vec![big(i), big(i)])
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let wal = std::fs::metadata(format!("{}-wal", path.display()))
        .unwrap()
        .len();
    // The backstop (4 000 pages) plus one group's pages, at 4 KiB a page.
    let bound = 12_000 * 4_120;
    assert!(wal < bound, "the log grew to {wal} bytes (bound {bound})");
    store.close().await;
}
