//! [`On`]: what each operation of the store runs on, and [`run`], which
//! runs one in a transaction of its own.

use a2_core::Result;
use futures::future::BoxFuture;
use tokio_postgres::IsolationLevel;

use crate::Database;
use crate::notify::Notices;
use crate::sql::Sql;

/// What an operation runs on: the statements' schema and errors, the
/// transaction (or savepoint) its client is in, the store time it decides
/// at, and the notices its commit sends.
pub(crate) struct On<'a, C> {
    pub(crate) sql: Sql<'a>,
    pub(crate) client: &'a C,
    pub(crate) now: a2_core::Millis,
    pub(crate) notices: &'a mut Notices,
}

/// How a transaction of [`run`] reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A write: `READ COMMITTED`, each session's writes ordered by the lock
    /// of its row (docs/postgres-layout.md, "Locking").
    Write,
    /// A read of several statements that must agree: one snapshot
    /// (`REPEATABLE READ`, read only).
    Read,
}

/// Runs `op` in a transaction of its own on a connection of `db`'s pool,
/// at the store time `now`, and commits it with the notices `op` queued:
/// all of it, or (on an error) none.
pub(crate) async fn run<T>(
    db: &Database,
    (mode, now): (Mode, a2_core::Millis),
    doing: &str,
    op: impl for<'t> FnOnce(On<'t, deadpool_postgres::Transaction<'t>>) -> BoxFuture<'t, Result<T>>,
) -> Result<T> {
    let sql = Sql::new(db);
    let mut client = db.client().await?;
    let (isolation, read_only) = match mode {
        Mode::Write => (IsolationLevel::ReadCommitted, false),
        Mode::Read => (IsolationLevel::RepeatableRead, true),
    };
    let tx = client
        .build_transaction()
        .isolation_level(isolation)
        .read_only(read_only)
        .start()
        .await
        .map_err(|e| sql.error(doing, e))?;
    let mut notices = Notices::default();
    let on = On {
        sql,
        client: &tx,
        now,
        notices: &mut notices,
    };
    let out = op(on).await?;
    notices.send(&sql, &tx, db.schema()).await?;
    tx.commit().await.map_err(|e| sql.error(doing, e))?;
    Ok(out)
}
