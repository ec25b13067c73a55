//! A session's row: reading it, and locking it, which every write to a
//! session does first so that the writes of one session take turns on any
//! number of hosts (docs/postgres-layout.md, "Locking").

use a2_core::{Millis, Result, rules};
use tokio_postgres::{GenericClient, Row};

use crate::sql::{Sql, index_of, sql_index};

/// The columns [`SessionRow::from_row`] reads, in its order.
pub(crate) const COLUMNS: &str = "sid, frontier, pending_count, first_index, closed_frontier, \
                                  updated_at, ttl_ms, expires_at";

/// What operations read of a session's row.
#[derive(Debug, Clone)]
pub(crate) struct SessionRow {
    pub(crate) sid: i64,
    pub(crate) frontier: u64,
    pub(crate) pending_count: i64,
    pub(crate) first_index: u64,
    pub(crate) closed_frontier: Option<u64>,
    /// When the session expires (EX1), if it does.
    pub(crate) deadline: Option<Millis>,
}

impl SessionRow {
    fn from_row(row: &Row) -> Result<Self> {
        let updated_at: i64 = row.get(5);
        let ttl: Option<i64> = row.get(6);
        let expires_at: Option<i64> = row.get(7);
        let by_ttl = ttl.map(|t| updated_at.saturating_add(t));
        let deadline = match (expires_at, by_ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(Self {
            sid: row.get(0),
            frontier: index_of(row.get(1))?,
            pending_count: row.get(2),
            first_index: index_of(row.get(3))?,
            closed_frontier: row.get::<_, Option<i64>>(4).map(index_of).transpose()?,
            deadline,
        })
    }

    /// Closed (CL1): its log is final.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed_frontier.is_some()
    }

    /// Expired at `now` (EX3): read as absent, cleared by the next write.
    pub(crate) fn expired(&self, now: Millis) -> bool {
        rules::lifecycle::expired(self.deadline, now)
    }
}

/// The row of session `name`, locked for this transaction
/// (`FOR UPDATE`), or `None` when the session has none. An expired row is
/// returned as it is: the caller decides (EX3).
pub(crate) async fn lock(
    sql: &Sql<'_>,
    client: &impl GenericClient,
    name: &str,
) -> Result<Option<SessionRow>> {
    let row = sql
        .query_opt(
            client,
            "locking the session",
            &format!(
                "SELECT {COLUMNS} FROM {s}.sessions WHERE name = $1 FOR UPDATE",
                s = sql.schema
            ),
            &[&name],
        )
        .await?;
    row.as_ref().map(SessionRow::from_row).transpose()
}

/// The row of session `name` as last committed, `None` when it has none or
/// it expired at `now` (EX3): what reads see.
pub(crate) async fn read(
    sql: &Sql<'_>,
    client: &impl GenericClient,
    name: &str,
    now: Millis,
) -> Result<Option<SessionRow>> {
    let row = sql
        .query_opt(
            client,
            "reading the session",
            &format!(
                "SELECT {COLUMNS} FROM {s}.sessions WHERE name = $1",
                s = sql.schema
            ),
            &[&name],
        )
        .await?;
    let current = row.as_ref().map(SessionRow::from_row).transpose()?;
    Ok(current.filter(|s| !s.expired(now)))
}

/// Creates the row of session `name` at its first event and locks it, or,
/// when another transaction created it meanwhile, locks that one (it
/// waits for that transaction to end first).
pub(crate) async fn create(
    sql: &Sql<'_>,
    client: &impl GenericClient,
    name: &str,
    now: Millis,
) -> Result<SessionRow> {
    let inserted = sql
        .query_opt(
            client,
            "creating the session",
            &format!(
                "INSERT INTO {s}.sessions (name, first_event_at, updated_at) VALUES ($1, $2, $2)
                 ON CONFLICT (name) DO NOTHING RETURNING {COLUMNS}",
                s = sql.schema
            ),
            &[&name, &now],
        )
        .await?;
    if let Some(row) = inserted {
        return SessionRow::from_row(&row);
    }
    lock(sql, client, name)
        .await?
        .ok_or_else(|| crate::sql::corrupt("a session row vanished while it was created"))
}

/// Deletes everything of session `sid` (EX3: an expired session goes
/// before a write starts a new one; `clear`).
pub(crate) async fn delete(sql: &Sql<'_>, client: &impl GenericClient, sid: i64) -> Result<()> {
    let s = sql.schema;
    for table in ["ready", "records", "events", "sessions"] {
        sql.execute(
            client,
            "deleting the session",
            &format!("DELETE FROM {s}.{table} WHERE sid = $1"),
            &[&sid],
        )
        .await?;
    }
    Ok(())
}

/// The store index of `index` (a frontier or bound), for statements.
pub(crate) fn bound(index: u64) -> i64 {
    sql_index(index).unwrap_or(i64::MAX)
}
