//! The writer: one thread owns the write connection and commits the queued
//! operations in groups.
//!
//! # Group commit
//! Callers queue their operation and await its reply. The thread takes the
//! first queued operation, then every other one already waiting (up to
//! `max_group`), and runs them all in one `BEGIN IMMEDIATE … COMMIT`. An
//! operation that fails (bad input found against the data, a superseded
//! attempt) has written nothing, since every operation checks before it
//! writes, and the others of the group go on; one that failed after writing
//! (a failing disk, a broken store, a panic) undoes the whole group, and the
//! other callers hear that they may retry. A group that leaves no change
//! (refused writes, replays, claims that found nothing) is rolled back, not
//! committed: the file stays byte for byte as it was and no other process
//! sees a commit to read after. With `synchronous = FULL` the
//! commit is one fsync of the write-ahead log, so N concurrent writers pay
//! one fsync between them instead of N, while each caller still gets its
//! reply only after the group's commit is durable.
//!
//! An operation runs on the thread with the clock read inside the
//! transaction, so store times follow commit order within a process.
//!
//! # Notifications
//! Each operation records what live feeds and presence subscribers must
//! hear ([`Effects`]). They are published to the [`Hub`] after the commit,
//! with the hub locked across `COMMIT` and publication: a subscriber that
//! reads its baseline under the same lock sees every commit either already
//! published or not yet made (see `hub`).

use std::sync::Arc;
use std::sync::mpsc;
use std::thread;

use a2_core::{Error, Result};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::checkpoint::Checkpointer;
use crate::effects::Effects;
use crate::hub::Hub;
use crate::rows::db;

/// One queued operation: runs inside the group's transaction, then hears
/// whether the group committed.
trait Job: Send {
    /// Runs the operation; false when it failed and must be rolled back.
    fn run(&mut self, conn: &Connection, effects: &mut Effects) -> bool;
    /// Delivers the result, or the commit's failure.
    fn finish(self: Box<Self>, commit: Result<()>);
}

struct Typed<T, F> {
    op: Option<F>,
    result: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Job for Typed<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection, &mut Effects) -> Result<T> + Send + 'static,
{
    fn run(&mut self, conn: &Connection, effects: &mut Effects) -> bool {
        let Some(op) = self.op.take() else {
            return false;
        };
        let result = op(conn, effects);
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn finish(self: Box<Self>, commit: Result<()>) {
        let result = match (commit, self.result) {
            (Err(error), _) => Err(error),
            (Ok(()), Some(result)) => result,
            (Ok(()), None) => Err(Error::unavailable(
                "the operation panicked on the writer thread and was rolled back",
            )),
        };
        // The caller may have stopped waiting (its future was dropped); the
        // operation happened all the same.
        let _ = self.reply.send(result);
    }
}

/// What the writer thread receives.
enum Msg {
    Job(Box<dyn Job>),
    /// Commit what came before, close the connection, then say so.
    Stop(oneshot::Sender<()>),
}

/// The sending side of the writer's queue. Dropping every handle stops the
/// thread once the queue is empty; [`Writer::stop`] stops it at once and
/// tells when its connection is closed.
#[derive(Clone)]
pub struct Writer {
    queue: mpsc::Sender<Msg>,
}

fn stopped() -> Error {
    Error::closed("the SQLite store is closed")
}

impl Writer {
    /// Starts the writer thread on `conn`, with `checkpointer` checkpointing
    /// what it commits.
    pub fn start(
        conn: Connection,
        checkpointer: Checkpointer,
        hub: Arc<Hub>,
        max_group: usize,
    ) -> Result<Self> {
        let (queue, jobs) = mpsc::channel::<Msg>();
        thread::Builder::new()
            .name("a2-sqlite-writer".into())
            .spawn(move || run(conn, checkpointer, jobs, hub, max_group.max(1)))
            .map_err(|e| Error::unavailable_from("cannot start the SQLite writer thread", e))?;
        Ok(Self { queue })
    }

    /// Queues `op` and waits until its group has committed (or failed).
    pub async fn write<T, F>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Effects) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Typed {
            op: Some(op),
            result: None,
            reply,
        });
        self.queue.send(Msg::Job(job)).map_err(|_| stopped())?;
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Queues `op` without waiting for it (a clean-up whose outcome nobody
    /// needs, like pruning expired presence entries).
    pub fn enqueue<F>(&self, op: F)
    where
        F: FnOnce(&Connection, &mut Effects) -> Result<()> + Send + 'static,
    {
        let (reply, _) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Typed {
            op: Some(op),
            result: None,
            reply,
        });
        let _ = self.queue.send(Msg::Job(job));
    }

    /// Stops the thread after the operations queued so far; the receiver
    /// hears once the write connection is closed (or the thread was gone).
    pub fn stop(&self) -> oneshot::Receiver<()> {
        let (done, stopped) = oneshot::channel();
        let _ = self.queue.send(Msg::Stop(done));
        stopped
    }
}

fn run(
    conn: Connection,
    checkpointer: Checkpointer,
    jobs: mpsc::Receiver<Msg>,
    hub: Arc<Hub>,
    max_group: usize,
) {
    let mut stop = None;
    while stop.is_none() {
        let mut group = match jobs.recv() {
            Ok(Msg::Job(job)) => vec![job],
            Ok(Msg::Stop(done)) => {
                stop = Some(done);
                break;
            }
            Err(_) => break,
        };
        while group.len() < max_group {
            match jobs.try_recv() {
                Ok(Msg::Job(job)) => group.push(job),
                Ok(Msg::Stop(done)) => {
                    stop = Some(done);
                    break;
                }
                Err(_) => break,
            }
        }
        commit_group(&conn, &hub, group);
        checkpointer.after_commit(&conn);
    }
    // Operations queued after a stop are dropped with the queue; their
    // callers hear that the store is closed.
    drop(jobs);
    drop(checkpointer);
    drop(conn);
    if let Some(done) = stop {
        let _ = done.send(());
    }
}

/// Runs one statement without parameters or rows, prepared once per
/// connection (each of these runs once or twice per group or operation;
/// parsing them each time was 2% of the writer's time).
fn run_cached(conn: &Connection, sql: &str) -> Result<()> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute([]))
        .map(|_| ())
        .map_err(db)
}

fn commit_group(conn: &Connection, hub: &Hub, mut group: Vec<Box<dyn Job>>) {
    if let Err(error) = run_cached(conn, "BEGIN IMMEDIATE") {
        for job in group {
            job.finish(Err(error.clone()));
        }
        return;
    }
    // A feed opened after this look hears `Change::Grew` and reads.
    let carry_events = !hub.lock().feeds.is_empty();
    let mut effects = Effects::default();
    // Whether an operation of the group left a change: one that was
    // refused, or that undid what it wrote (a batch whose ids turned out
    // to be taken, a replay), leaves none.
    let mut changed = false;
    // No savepoints: an operation that fails has, in all but rare cases,
    // written nothing (its checks come before its writes), and then the
    // others of the group go on. One that failed after writing (a broken
    // store, a failing disk, a panic) spoils the transaction: it is undone
    // whole, that operation's caller hears its error, and every other
    // caller of the group that nothing of it stays and it may retry. A
    // savepoint per operation cost 10% of the work cycle's writer time
    // (two statements, and a copy of each page it first touched).
    let mut spoiled = None;
    for (at, job) in group.iter_mut().enumerate() {
        let before = conn.total_changes();
        let mut own = Effects::new(carry_events);
        // A panic in an operation is a bug; it fails that operation
        // (rolled back, its caller hears `StoreUnavailable`) instead of
        // killing the thread every other caller depends on.
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(conn, &mut own)))
            .unwrap_or(false);
        let changes = conn.total_changes();
        let left = changes != before && own.restored_at != Some(changes);
        if ok {
            changed |= left || !own.is_empty();
            effects.absorb(own);
        } else if left {
            spoiled = Some(at);
            break;
        }
    }
    if let Some(at) = spoiled {
        let undone = run_cached(conn, "ROLLBACK");
        if let Err(error) = &undone {
            tracing::warn!(%error, "a SQLite rollback failed");
        }
        for (index, job) in group.into_iter().enumerate() {
            let outcome = match &undone {
                Err(error) => Err(error.clone()),
                // Its own error.
                Ok(()) if index == at => Ok(()),
                Ok(()) => Err(Error::unavailable(
                    "another operation committed with this one failed midway, so neither \
                     was written; retry",
                )),
            };
            job.finish(outcome);
        }
        return;
    }
    if !changed {
        // Nothing stays of this group (claims that found nothing, renewals
        // of lost leases, refused writes, replays): it is rolled back, so
        // the file stays byte for byte as it was, no other process's
        // poller sees a commit, and no fsync is paid. Every operation's
        // own answer stands: none of them needed a write.
        let undone = run_cached(conn, "ROLLBACK");
        if let Err(error) = &undone {
            tracing::warn!(%error, "a SQLite rollback of a group that wrote nothing failed");
        }
        for job in group {
            job.finish(Ok(()));
        }
        return;
    }
    let committed = (|| -> Result<()> {
        // Numbers every commit of every process that changed something, so
        // a process can tell its own commits from others' (see `hub`).
        let seq: i64 = conn
            .prepare_cached("UPDATE commits SET seq = seq + 1 WHERE id = 1 RETURNING seq")
            .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
            .map_err(db)?;
        let mut published = hub.lock();
        run_cached(conn, "COMMIT")?;
        published.record_local_commit(seq);
        if !effects.is_empty() {
            published.publish(std::mem::take(&mut effects));
        }
        Ok(())
    })();
    if let Err(error) = &committed {
        // Still in the transaction: undo all of it; every caller of the
        // group hears the failure and nothing of it stays.
        let _ = conn.execute_batch("ROLLBACK");
        tracing::warn!(%error, "a SQLite group commit failed");
    }
    for job in group {
        job.finish(committed.clone());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::schema;

    fn writer(dir: &tempfile::TempDir) -> Writer {
        let path = dir.path().join("a2.db");
        let busy = Duration::from_secs(5);
        let conn = schema::connect(&path, busy).unwrap();
        schema::prepare(&conn, &path, busy).unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        let hub = Hub::for_path(&path, Duration::from_millis(20), busy).unwrap();
        let checkpointer = Checkpointer::start(&conn, &path, busy).unwrap();
        Writer::start(conn, checkpointer, hub, 512).unwrap()
    }

    /// Writes `x` unless `write` is false, then fails when `fail` is set.
    async fn insert(writer: &Writer, x: i64, write: bool, fail: bool) -> Result<()> {
        writer
            .write(move |conn, _| {
                if write {
                    conn.execute("INSERT INTO t (x) VALUES (?1)", [x])
                        .map_err(db)?;
                }
                if fail {
                    return Err(Error::invalid("refused"));
                }
                Ok(())
            })
            .await
    }

    async fn rows(writer: &Writer) -> Vec<i64> {
        writer
            .write(|conn, _| {
                let mut stmt = conn.prepare("SELECT x FROM t ORDER BY x").map_err(db)?;
                let rows = stmt.query_map([], |row| row.get(0)).map_err(db)?;
                rows.collect::<rusqlite::Result<Vec<i64>>>().map_err(db)
            })
            .await
            .unwrap()
    }

    /// Runs `first` and `second` in one group: a first operation holds the
    /// thread until both are queued (`join!` polls its futures in order,
    /// and each queues its operation when first polled).
    async fn grouped<A, B>(writer: &Writer, first: A, second: B) -> (A::Output, B::Output)
    where
        A: std::future::Future,
        B: std::future::Future,
    {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let held = writer.write(move |_, _| {
            wait.recv().ok();
            Ok(())
        });
        let (held, first, second, ()) =
            tokio::join!(held, first, second, async { release.send(()).unwrap() });
        // The first operation may share their group, and its fate.
        if let Err(error) = held {
            assert!(error.is_retryable(), "{error}");
        }
        (first, second)
    }

    #[tokio::test]
    async fn a_failed_operation_leaves_nothing_and_spoils_its_group_only_if_it_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer(&dir);
        // Alone in its group: what it wrote is undone.
        let error = insert(&writer, 1, true, true).await.unwrap_err();
        assert!(error.to_string().contains("refused"), "{error}");
        assert_eq!(rows(&writer).await, Vec::<i64>::new());
        // Failed before writing: the others of its group are committed.
        let (failed, passed) = grouped(
            &writer,
            insert(&writer, 2, false, true),
            insert(&writer, 3, true, false),
        )
        .await;
        assert!(failed.unwrap_err().to_string().contains("refused"));
        passed.unwrap();
        assert_eq!(rows(&writer).await, [3]);
        // Failed after writing: the whole group is undone; its caller hears
        // its own error, the other one that it may retry.
        let (failed, passed) = grouped(
            &writer,
            insert(&writer, 4, true, true),
            insert(&writer, 5, true, false),
        )
        .await;
        assert!(failed.unwrap_err().to_string().contains("refused"));
        let retry = passed.unwrap_err();
        assert!(retry.is_retryable(), "{retry}");
        assert_eq!(rows(&writer).await, [3]);
    }
}
