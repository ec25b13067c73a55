//! Rough figures for the SQLite store on this machine's disk, beside a raw
//! `rusqlite` baseline with the same durability (WAL, `synchronous = FULL`):
//! appends one at a time and from 32 tasks (group commit), a claim/complete
//! cycle, and reading a 100 000-event session.
//!
//! Run with `cargo run --release -p a2-sqlite --example sqlite_throughput`
//! (`A2_SQLITE_BENCH_DIR` picks the directory of the database files;
//! default: a temporary directory).

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::*;
use a2_sqlite::{SqliteOptions, SqliteStore};
use serde_json::json;

fn rate(what: &str, count: usize, elapsed: Duration) {
    println!(
        "{what:<58} {count:>7} in {:>9.1} ms  {:>10.0}/s",
        elapsed.as_secs_f64() * 1e3,
        count as f64 / elapsed.as_secs_f64()
    );
}

fn raw_connection(path: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
         CREATE TABLE IF NOT EXISTS log (sid INTEGER, idx INTEGER, payload TEXT,
            PRIMARY KEY (sid, idx));",
    )
    .unwrap();
    conn
}

/// The raw baseline: `n` single-row inserts, `group` per transaction.
fn raw_inserts(path: &std::path::Path, n: usize, group: usize) -> Duration {
    let conn = raw_connection(path);
    let started = Instant::now();
    let mut idx = 0i64;
    for _ in 0..n / group {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        for _ in 0..group {
            idx += 1;
            conn.prepare_cached("INSERT INTO log (sid, idx, payload) VALUES (1, ?1, ?2)")
                .unwrap()
                .execute(rusqlite::params![idx, json!({ "k": idx }).to_string()])
                .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }
    started.elapsed()
}

#[tokio::main]
async fn main() -> Result<()> {
    let dir = match std::env::var("A2_SQLITE_BENCH_DIR") {
        Ok(dir) => tempfile::tempdir_in(dir).unwrap(),
        Err(_) => tempfile::tempdir().unwrap(),
    };
    println!("database files in {}", dir.path().display());

    let n = 1000;
    rate(
        "raw rusqlite: 1 INSERT per transaction",
        n,
        raw_inserts(&dir.path().join("raw1.db"), n, 1),
    );
    let n32 = 32 * 200;
    rate(
        "raw rusqlite: 32 INSERTs per transaction",
        n32,
        raw_inserts(&dir.path().join("raw32.db"), n32, 32),
    );

    let store = Arc::new(SqliteStore::open(
        dir.path().join("a2.db"),
        SqliteOptions::default(),
    )?);
    let started = Instant::now();
    for k in 0..n {
        store
            .append("seq", vec![NewEvent::new("e", json!({ "k": k }))])
            .await?;
    }
    rate(
        "a2: append 1 event per call, sequential",
        n,
        started.elapsed(),
    );

    let started = Instant::now();
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let store = store.clone();
            tokio::spawn(async move {
                for k in 0..n32 / 32 {
                    store
                        .append(
                            &format!("task-{t}"),
                            vec![NewEvent::new("e", json!({ "k": k }))],
                        )
                        .await?;
                }
                Ok::<_, Error>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap()?;
    }
    rate(
        "a2: append 1 event per call from 32 tasks (group commit)",
        n32,
        started.elapsed(),
    );

    // The work cycle: 32 workers claim one event and complete it with one
    // settled reply, over 32 sessions.
    let jobs_per_session = 100;
    for s in 0..32 {
        let events = (0..jobs_per_session)
            .map(|k| NewEvent::new("job", json!({ "k": k })))
            .collect();
        store.append(&format!("work-{s}"), events).await?;
    }
    let started = Instant::now();
    let workers: Vec<_> = (0..32)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                let session = format!("work-{w}");
                let mut done = 0;
                loop {
                    let claimed = store
                        .claim_available(ClaimRequest {
                            session: session.clone(),
                            holder: format!("w{w}"),
                            lease: Lease::Ttl(30_000),
                            exclude_indexes: Vec::new(),
                            limit: 1,
                        })
                        .await?;
                    let ClaimOutcome::Claimed { events: rows, .. } = claimed else {
                        return Ok::<_, Error>(done);
                    };
                    for row in rows {
                        store
                            .complete_attempt(CompleteRequest {
                                session: session.clone(),
                                index: row.event.index,
                                attempt: row.attempt_count,
                                events: vec![NewEvent::new("reply", json!("ok")).settled()],
                                batch_size: None,
                            })
                            .await?;
                        done += 1;
                    }
                }
            })
        })
        .collect();
    let mut cycles = 0;
    for worker in workers {
        cycles += worker.await.unwrap()?;
    }
    rate(
        "a2: claim + complete (1 reply), 32 workers",
        cycles,
        started.elapsed(),
    );

    let total = 100_000;
    for _ in 0..total / 1000 {
        let events = (0..1000)
            .map(|k| NewEvent::new("e", json!({ "k": k, "text": "a short payload" })).settled())
            .collect();
        store.append("long", events).await?;
    }
    let started = Instant::now();
    let rows = store.read("long", ReadRange::default()).await?;
    assert_eq!(rows.len(), total);
    rate(
        "a2: read a 100 000-event session from index 1",
        total,
        started.elapsed(),
    );
    store.close().await;

    // The same rows straight from SQLite, as strings, with no JSON parsed:
    // what the read costs before a2 builds its events.
    let conn = rusqlite::Connection::open(dir.path().join("a2.db")).unwrap();
    let started = Instant::now();
    let mut stmt = conn
        .prepare(
            "SELECT e.idx, e.id, e.type, e.payload, e.created_at, e.attempt_count
             FROM events e JOIN sessions s USING (sid)
             WHERE s.name = 'long' AND e.idx > 0 ORDER BY e.idx",
        )
        .unwrap();
    let raw: Vec<(i64, String, String, String, i64, i64)> = stmt
        .query_map([], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
            ))
        })
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(raw.len(), total);
    rate(
        "raw rusqlite: the same 100 000 rows, 6 columns, no JSON",
        total,
        started.elapsed(),
    );
    Ok(())
}
