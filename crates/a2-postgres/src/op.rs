//! [`On`]: what each operation of the store runs on, and [`run`], which
//! runs one in a transaction of its own ([`Tx`]).

use std::sync::atomic::{AtomicBool, Ordering};

use a2_core::Result;
use async_trait::async_trait;
use futures::future::BoxFuture;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::Database;
use crate::notify::Notices;
use crate::sql::{Answer, Conn, Deferred, Params, Sql};

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

impl Mode {
    fn begin(self) -> &'static str {
        match self {
            Mode::Write => "START TRANSACTION ISOLATION LEVEL READ COMMITTED, READ WRITE",
            Mode::Read => "START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY",
        }
    }
}

/// A transaction of the store's own on a pooled connection, started with
/// its first statement and ended with its last: `START TRANSACTION` goes
/// out in the same round trip as the first statement, `COMMIT` in the same
/// round trip as the notices (Postgres runs a connection's requests in the
/// order sent, so nothing runs outside the transaction). Dropped while
/// open — its operation's future dropped midway — the connection is
/// closed rather than returned to the pool, which rolls it back.
pub(crate) struct Tx {
    client: Option<deadpool_postgres::Object>,
    mode: Mode,
    begun: AtomicBool,
    ended: bool,
    deferred: std::sync::Mutex<Vec<Deferred>>,
}

impl Tx {
    fn new(client: deadpool_postgres::Object, mode: Mode) -> Self {
        Self {
            client: Some(client),
            mode,
            begun: AtomicBool::new(false),
            ended: false,
            deferred: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn client(&self) -> &deadpool_postgres::Object {
        self.client
            .as_ref()
            .expect("a transaction's connection is kept until it is dropped")
    }

    /// Sends the writes put off, the notices and `COMMIT` in one round
    /// trip (with the start, when no statement ran before).
    async fn commit(mut self, sql: &Sql<'_>, notices: Notices, doing: &str) -> Result<()> {
        let notify = notices.statement(sql.schema_name());
        let pending = self.deferred.lock().map_or(true, |d| !d.is_empty());
        if notify.is_none() && !pending && !self.begun.load(Ordering::Relaxed) {
            self.ended = true;
            return Ok(());
        }
        let mut statements: Vec<(&str, &str, Params<'_>)> = Vec::new();
        let notify_params: [&(dyn ToSql + Sync); 2];
        if let Some((statement, (channels, payloads))) = &notify {
            notify_params = [channels, payloads];
            statements.push(("sending notices", statement, &notify_params));
        }
        statements.push((doing, "COMMIT", &[]));
        let committed = sql.pipeline(&self, &statements).await;
        if committed.is_err() {
            // Ended by the `COMMIT` when it went out (a rollback after a
            // failed statement); rolled back here when it did not.
            self.ended = self.client().batch_execute("ROLLBACK").await.is_ok();
            return committed.map(drop);
        }
        self.ended = true;
        Ok(())
    }

    /// Rolls back what ran; a connection that cannot is closed.
    async fn rollback(mut self) {
        if self.begun.load(Ordering::Relaxed)
            && self.client().batch_execute("ROLLBACK").await.is_ok()
        {
            self.ended = true;
        }
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if self.begun.load(Ordering::Relaxed)
            && !self.ended
            && let Some(client) = self.client.take()
        {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

#[async_trait]
impl Conn for Tx {
    async fn prepare(&self, statement: &str) -> Answer<Statement> {
        self.client().prepare_cached(statement).await
    }

    async fn query(&self, statement: &Statement, params: Params<'_>) -> Answer<Vec<Row>> {
        self.client().query(statement, params).await
    }

    fn begin(&self) -> Option<BoxFuture<'_, Answer<()>>> {
        if self.begun.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(Box::pin(self.client().batch_execute(self.mode.begin())))
    }

    fn deferred(&self) -> Option<&std::sync::Mutex<Vec<Deferred>>> {
        Some(&self.deferred)
    }
}

/// Runs `op` in a transaction of its own on a connection of `db`'s pool,
/// at the store time `now`, and commits it with the notices `op` queued:
/// all of it, or (on an error) none.
pub(crate) async fn run<T>(
    db: &Database,
    (mode, now): (Mode, a2_core::Millis),
    doing: &str,
    op: impl for<'t> FnOnce(On<'t, Tx>) -> BoxFuture<'t, Result<T>>,
) -> Result<T> {
    let sql = Sql::new(db);
    let tx = Tx::new(db.client().await?, mode);
    let mut notices = Notices::default();
    let on = On {
        sql,
        client: &tx,
        now,
        notices: &mut notices,
    };
    match op(on).await {
        Ok(out) => {
            tx.commit(&sql, notices, doing).await?;
            Ok(out)
        }
        Err(error) => {
            tx.rollback().await;
            Err(error)
        }
    }
}
