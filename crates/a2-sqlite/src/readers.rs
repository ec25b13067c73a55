//! Read connections: a small pool, used on tokio's blocking threads.
//!
//! At most `size` reads run at once (a semaphore admits them), so the pool
//! never holds more than `size` connections for them and keeps every one
//! open between reads: in steady state no read opens a connection. A read
//! made from a thread that is already blocking (presence recovery) takes an
//! idle connection, or opens one it closes again when the pool is full.
//!
//! In WAL mode a reader sees the last commit made before its read began and
//! never waits for the writer, so reads run beside the writer thread on
//! their own connections. Each read that needs several statements to agree
//! (a frontier and the rows under it, a snapshot and the events after it)
//! runs them in one read transaction.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2_core::{Error, Result};
use rusqlite::Connection;
use tokio::sync::Semaphore;

use crate::rows::db;
use crate::schema;

/// The pool of read connections of one store instance.
pub struct Readers {
    path: PathBuf,
    busy: Duration,
    idle: Mutex<Vec<Connection>>,
    keep: usize,
    /// Admits at most `keep` reads at once.
    admit: Semaphore,
    /// Connections opened so far.
    opened: AtomicU64,
    closed: AtomicBool,
}

impl Readers {
    /// A pool for `path` running at most `size` reads at once, each on a
    /// connection it keeps.
    pub fn new(path: PathBuf, busy: Duration, size: usize) -> Self {
        let size = size.max(1);
        Self {
            path,
            busy,
            idle: Mutex::new(Vec::new()),
            keep: size,
            admit: Semaphore::new(size),
            opened: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// How many connections the pool opened so far.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    fn take(&self) -> Result<Connection> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::closed("the SQLite store is closed"));
        }
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        match idle {
            Some(conn) => Ok(conn),
            None => {
                self.opened.fetch_add(1, Ordering::Relaxed);
                let conn = schema::connect(&self.path, self.busy)?;
                // Read connections never write: a bug that tried would fail
                // loudly instead of bypassing the writer's group commit.
                conn.execute_batch("PRAGMA query_only = 1").map_err(db)?;
                Ok(conn)
            }
        }
    }

    fn give(&self, conn: Connection) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.keep
            && !self.closed.load(Ordering::SeqCst)
        {
            idle.push(conn);
        }
    }

    /// Closes the pool: idle connections are closed now, busy ones when
    /// their read ends, and no new one opens.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Ok(mut idle) = self.idle.lock() {
            idle.clear();
        }
    }

    /// Runs `read` on a pooled connection on the calling thread (which may
    /// block): for code already on a blocking thread.
    pub fn blocking<T>(&self, read: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.take()?;
        let result = read(&conn);
        self.give(conn);
        result
    }

    /// Runs `read` in one read transaction on a blocking thread.
    pub async fn read<T, F>(self: &Arc<Self>, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        // The semaphore is never closed; a permit is held until the read's
        // connection is back in the pool.
        let permit = self
            .admit
            .acquire()
            .await
            .map_err(|e| Error::unavailable_from("the SQLite read pool is gone", e))?;
        let readers = self.clone();
        let result =
            tokio::task::spawn_blocking(move || readers.blocking(|conn| in_read_tx(conn, read)))
                .await
                .map_err(|e| Error::unavailable_from("a SQLite read task failed", e))?;
        drop(permit);
        result
    }
}

/// Runs `read` inside `BEGIN … COMMIT`, so its statements see one snapshot.
pub fn in_read_tx<T>(conn: &Connection, read: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    conn.execute_batch("BEGIN").map_err(db)?;
    let result = read(conn);
    // Ending a read transaction cannot lose anything; a failure here leaves
    // the connection in a transaction, which the next BEGIN would report.
    if let Err(error) = conn.execute_batch("COMMIT") {
        let _ = conn.execute_batch("ROLLBACK");
        if result.is_ok() {
            return Err(db(error));
        }
    }
    result
}
