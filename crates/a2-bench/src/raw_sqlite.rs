//! The raw-SQLite baselines, on `rusqlite` with the same bundled SQLite and
//! the same durability settings as the SQLite store (WAL,
//! `synchronous = FULL`), so a gap to a2 is a2's own work.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::BoxError;

/// At most this many queued appends share one commit, as in the store
/// (`SqliteOptions::max_group`, 512 by default).
const MAX_GROUP: usize = 512;

/// One task's append: `rows` (id, payload) to `session` from index `first`.
struct Job {
    session: String,
    first: i64,
    rows: Vec<(String, String)>,
    done: oneshot::Sender<Result<(), String>>,
}

/// The append ceiling: `calls` appends of `batch` rows each, spread over
/// `tasks` concurrent tasks, each on its own session, into a plain table
/// (primary key `(session, idx)`, no other index). Like the store, every
/// append is queued to one writer thread, which commits whatever is queued
/// (up to 512 appends) in one transaction and answers each caller after the
/// commit: one task pays one fsync per call (one INSERT per transaction),
/// 32 tasks share them. Returns the wall time.
pub async fn group_commit_append(
    path: &Path,
    batch: usize,
    tasks: usize,
    calls: u64,
    tag: &str,
) -> Result<Duration, BoxError> {
    let conn = connect(path)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS log (session TEXT NOT NULL, idx INTEGER NOT NULL,
            id TEXT NOT NULL, type TEXT NOT NULL, payload TEXT NOT NULL,
            created_at INTEGER NOT NULL, PRIMARY KEY (session, idx))",
    )?;
    let (jobs, queue) = mpsc::channel::<Job>();
    let writer = std::thread::Builder::new()
        .name("raw-sqlite-writer".into())
        .spawn(move || writer(conn, queue))?;
    let per_task = calls / tasks as u64;
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let jobs = jobs.clone();
        let session = format!("bench:append:{tag}:{t}");
        handles.push(tokio::spawn(async move {
            for c in 0..per_task {
                let first = (c * batch as u64) as i64 + 1;
                // The payload is serialized by the caller, as the store's
                // caller side does before queueing.
                let rows = (0..batch as i64)
                    .map(|i| {
                        let n = first + i;
                        (
                            format!("{t}-{n}"),
                            serde_json::json!({ "n": n }).to_string(),
                        )
                    })
                    .collect();
                let (done, answer) = oneshot::channel();
                jobs.send(Job {
                    session: session.clone(),
                    first,
                    rows,
                    done,
                })
                .map_err(|_| "the raw SQLite writer stopped")?;
                answer
                    .await
                    .map_err(|_| "the raw SQLite writer stopped")??;
            }
            Ok::<_, BoxError>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    let elapsed = started.elapsed();
    drop(jobs);
    writer
        .join()
        .map_err(|_| "the raw SQLite writer panicked")?;
    Ok(elapsed)
}

/// The writer thread of [`group_commit_append`]: takes every job queued
/// meanwhile (up to [`MAX_GROUP`]), runs them in one `BEGIN IMMEDIATE …
/// COMMIT`, then answers each.
fn writer(conn: Connection, queue: mpsc::Receiver<Job>) {
    while let Ok(first) = queue.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let result = commit(&conn, &group).map_err(|e| e.to_string());
        for job in group {
            let _ = job.done.send(result.clone());
        }
    }
}

fn commit(conn: &Connection, group: &[Job]) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let inserted = (|| -> rusqlite::Result<()> {
        let mut insert = conn.prepare_cached(
            "INSERT INTO log (session, idx, id, type, payload, created_at)
             VALUES (?1, ?2, ?3, 'bench', ?4, ?5)",
        )?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        for job in group {
            for (i, (id, payload)) in job.rows.iter().enumerate() {
                insert.execute(rusqlite::params![
                    job.session,
                    job.first + i as i64,
                    id,
                    payload,
                    now
                ])?;
            }
        }
        Ok(())
    })();
    match inserted {
        Ok(()) => conn.execute_batch("COMMIT"),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// The read ceiling: the rows of session `session` from index 1 straight
/// from the SQLite store's file (its `events` table, every column, as
/// SQLite values), without building a2's events or parsing JSON: what a
/// read costs before a2's own work. Returns the row count and wall time.
pub async fn read_rows(path: &Path, session: &str) -> Result<(u64, Duration), BoxError> {
    let path: PathBuf = path.to_path_buf();
    let session = session.to_string();
    tokio::task::spawn_blocking(move || {
        let conn = connect(&path)?;
        let started = Instant::now();
        // The session's number first, then one range scan of the primary
        // key `(sid, idx)`, as the store reads.
        let sid: i64 = conn.query_row(
            "SELECT sid FROM sessions WHERE name = ?1",
            [&session],
            |row| row.get(0),
        )?;
        let mut stmt =
            conn.prepare("SELECT * FROM events WHERE sid = ?1 AND idx >= 1 ORDER BY idx")?;
        let columns = stmt.column_count();
        let rows: Vec<Vec<rusqlite::types::Value>> = stmt
            .query_map([sid], |row| (0..columns).map(|c| row.get(c)).collect())?
            .collect::<rusqlite::Result<_>>()?;
        Ok::<_, BoxError>((rows.len() as u64, started.elapsed()))
    })
    .await?
}

/// A connection with the store's settings: WAL, `synchronous = FULL`, and
/// a busy timeout.
fn connect(path: &Path) -> Result<Connection, BoxError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;")?;
    Ok(conn)
}

/// The disk's share of a durable append's latency: `n` single-row commits
/// (`BEGIN IMMEDIATE`, one INSERT, `COMMIT` with its fsync) paced at `rate`
/// per second, as the followers scenario's writer paces its appends.
/// Returns each commit's time. Blocking: run it off the runtime.
pub fn paced_commits(path: &Path, n: u64, rate: u64) -> Result<Vec<Duration>, BoxError> {
    let conn = connect(path)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS log (session TEXT NOT NULL, idx INTEGER NOT NULL,
            payload TEXT NOT NULL, PRIMARY KEY (session, idx))",
    )?;
    let started = Instant::now();
    let mut times = Vec::with_capacity(n as usize);
    for i in 0..n {
        let due = started + Duration::from_nanos(i * 1_000_000_000 / rate);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let t = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE")?;
        conn.prepare_cached("INSERT INTO log VALUES (?1, ?2, ?3)")?
            .execute(rusqlite::params![
                format!("s{}", i % 100),
                i as i64,
                r#"{"t":1234567890}"#
            ])?;
        conn.execute_batch("COMMIT")?;
        times.push(t.elapsed());
    }
    Ok(times)
}
