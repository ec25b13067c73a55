//! Checkpoints off the writer thread.
//!
//! In WAL mode a commit appends pages to the write-ahead log; a checkpoint
//! copies them back into the database file and fsyncs it, so the log can
//! start over. SQLite's default runs that checkpoint inside the commit that
//! takes the log past 1 000 pages — on the writer thread, between one group
//! commit and the next, so every operation queued meanwhile waits for
//! random writes and an fsync of the database file (measured: p99.9 of a
//! single append 7 ms with it, 1.5 ms without).
//!
//! Here the write connection's WAL hook replaces the automatic checkpoint:
//! it only notes how many pages the log holds after each commit, and once
//! that passes [`THRESHOLD`] the writer wakes a checkpoint thread of its
//! own, which runs `PRAGMA wal_checkpoint(PASSIVE)` on its own connection,
//! and again each time [`STEP`] more pages came in while the log did not
//! start over: waking it after every commit past the threshold ran a
//! checkpoint (an fsync of the log and of the database file) for every
//! group commit, 25 times the checkpoints SQLite's own policy runs for the
//! same appends. A passive checkpoint never waits for readers or the
//! writer; the writer keeps committing while it copies, and starts the log
//! over on its next commit once everything was copied. A writer that never
//! pauses would outrun it, so past [`BACKSTOP`] pages the writer
//! checkpoints itself, as SQLite would have: the log stays bounded. Every
//! process that writes the file has its own, as every process's commit
//! could be the one that passes the threshold.

use std::cell::Cell;
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use a2_core::{Error, Result};
use rusqlite::Connection;
use rusqlite::hooks::Wal;

use crate::schema;

/// Pages in the log at which a checkpoint starts (SQLite's own default).
pub const THRESHOLD: i32 = 1_000;

/// Pages in the log at which the writer checkpoints on its own thread: a
/// passive checkpoint racing a writer that never pauses copies all but the
/// newest pages each time, so the log would never start over; past this
/// bound the writer copies it all itself, and its next commit starts over.
pub const BACKSTOP: i32 = 4 * THRESHOLD;

/// New pages in the log between two wake-ups of the checkpoint thread.
pub const STEP: i32 = THRESHOLD / 4;

thread_local! {
    /// Pages in the log after this thread's last commit, as the WAL hook
    /// reported it (the hook runs on the committing thread, inside
    /// `COMMIT`).
    static LOG_PAGES: Cell<i32> = const { Cell::new(0) };
}

fn noted(_: &Wal, pages: std::ffi::c_int) -> rusqlite::Result<()> {
    LOG_PAGES.with(|p| p.set(pages));
    Ok(())
}

/// The checkpoint thread of one write connection. Dropping it stops the
/// thread after the checkpoint it is running, and waits for it.
pub struct Checkpointer {
    wake: Option<mpsc::SyncSender<()>>,
    /// Pages in the log when the thread was last woken (0: not since the
    /// log started over).
    woken_at: Cell<i32>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Checkpointer {
    /// Installs the WAL hook on `writer` (which turns SQLite's automatic
    /// checkpoint off) and starts the thread, with a connection of its own
    /// to `path`.
    pub fn start(writer: &Connection, path: &Path, busy_timeout: Duration) -> Result<Self> {
        let conn = schema::connect(path, busy_timeout)?;
        // One wake-up waiting is enough: a checkpoint copies all there is.
        let (wake, woken) = mpsc::sync_channel::<()>(1);
        let thread = thread::Builder::new()
            .name("a2-sqlite-checkpoint".into())
            .spawn(move || {
                while woken.recv().is_ok() {
                    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                        Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
                    });
                    match done {
                        Ok((log, copied)) => tracing::debug!(log, copied, "checkpoint"),
                        Err(error) => tracing::warn!(%error, "a SQLite checkpoint failed"),
                    }
                }
            })
            .map_err(|e| Error::unavailable_from("cannot start the SQLite checkpoint thread", e))?;
        writer.wal_hook(Some(noted));
        Ok(Self {
            wake: Some(wake),
            woken_at: Cell::new(0),
            thread: Some(thread),
        })
    }

    /// After a commit on the writer's thread: wakes the checkpoint thread
    /// when the log has grown past [`THRESHOLD`], or checkpoints on
    /// `writer` itself past [`BACKSTOP`].
    pub fn after_commit(&self, writer: &Connection) {
        let pages = LOG_PAGES.with(|p| p.replace(0));
        if pages == 0 {
            // Nothing committed.
            return;
        }
        if pages < self.woken_at.get() {
            // The log started over.
            self.woken_at.set(0);
        }
        if pages >= BACKSTOP {
            self.woken_at.set(0);
            if let Err(error) = writer.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                tracing::warn!(%error, "a SQLite checkpoint failed");
            }
        } else if pages >= THRESHOLD
            && pages >= self.woken_at.get() + STEP
            && let Some(wake) = &self.wake
        {
            self.woken_at.set(pages);
            // Full: a wake-up is already waiting.
            let _ = wake.try_send(());
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
