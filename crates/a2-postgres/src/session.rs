//! A session's row: reading it, and locking it, which every write to a
//! session does first so that the writes of one session take turns on any
//! number of hosts (docs/postgres-layout.md, "Locking").

use a2_core::{Expiry, Millis, Result, rules};
use tokio_postgres::Row;

use crate::sql::Conn;

use crate::sql::{Params, Sql, Text, index_of, sql_index};
use tokio_postgres::types::ToSql;

/// The columns [`SessionRow::from_row`] reads, in its order.
pub(crate) const COLUMNS: &str = "sid, frontier, pending_count, first_index, closed_frontier, \
                                  updated_at, ttl_ms, expires_at, closed_at";

/// What operations read of a session's row: its key, what an append's
/// checks read (`log`: closed, frontier, first retained index), its pending
/// count and when it expires (EX1), if it does.
#[derive(Debug, Clone)]
pub(crate) struct SessionRow {
    pub(crate) sid: i64,
    pub(crate) log: rules::append::Target,
    pub(crate) pending_count: i64,
    pub(crate) deadline: Option<Millis>,
    /// Where and when it was closed (CL1), if it was.
    pub(crate) closed: Option<(u64, Millis)>,
}

impl SessionRow {
    pub(crate) fn from_row(row: &Row) -> Result<Self> {
        let updated_at: i64 = row.get(5);
        let ttl: Option<i64> = row.get(6);
        let expires_at: Option<i64> = row.get(7);
        let by_ttl = ttl.map(|t| updated_at.saturating_add(t));
        let deadline = match (expires_at, by_ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let log = rules::append::Target {
            frontier: index_of(row.get(1))?,
            first_index: index_of(row.get(3))?,
            closed: row.get::<_, Option<i64>>(4).is_some(),
        };
        let closed = match (row.get::<_, Option<i64>>(4), row.get::<_, Option<i64>>(8)) {
            (Some(frontier), Some(at)) => Some((index_of(frontier)?, at)),
            _ => None,
        };
        Ok(Self {
            sid: row.get(0),
            log,
            pending_count: row.get(2),
            deadline,
            closed,
        })
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
    client: &impl Conn,
    name: &str,
) -> Result<Option<SessionRow>> {
    fetch(sql, client, name, " FOR UPDATE").await
}

/// The sid of session `name` inside a statement keyed by the name (`$1`),
/// for the reads [`lock_with`] sends with the lock.
pub(crate) fn sid_of(schema: &str) -> String {
    format!("(SELECT sid FROM {schema}.sessions WHERE name = $1)")
}

/// [`lock`], with `reads` in the same round trip: statements keyed by the
/// session's name (their `$1`, the sid as [`sid_of`] says), which run once
/// the lock is granted, so at `READ COMMITTED` they see every write
/// committed before it. Their rows hold for the row locked, not for one
/// the caller creates or replaces afterwards.
pub(crate) async fn lock_with(
    sql: &Sql<'_>,
    client: &impl Conn,
    name: &str,
    reads: &[(&str, &str, Params<'_>)],
) -> Result<(Option<SessionRow>, Vec<Vec<Row>>)> {
    let lock = format!(
        "SELECT {COLUMNS} FROM {s}.sessions WHERE name = $1 FOR UPDATE",
        s = sql.schema
    );
    let named = Text(name);
    let keyed: [&(dyn ToSql + Sync); 1] = [&named];
    let statements: Vec<(&str, &str, Params<'_>)> =
        std::iter::once(("locking the session", lock.as_str(), &keyed[..]))
            .chain(reads.iter().copied())
            .collect();
    let mut answers = sql.pipeline(client, &statements).await?.into_iter();
    let row = answers
        .next()
        .unwrap_or_default()
        .first()
        .map(SessionRow::from_row)
        .transpose()?;
    let rest: Vec<Vec<Row>> = answers.collect();
    if rest.len() != reads.len() {
        return Err(crate::sql::corrupt(
            "a pipeline answered a different number of statements",
        ));
    }
    Ok((row, rest))
}

/// The row of session `name` as last committed, `None` when it has none or
/// it expired at `now` (EX3): what reads see.
pub(crate) async fn read(
    sql: &Sql<'_>,
    client: &impl Conn,
    name: &str,
    now: Millis,
) -> Result<Option<SessionRow>> {
    let current = fetch(sql, client, name, "").await?;
    Ok(current.filter(|s| !s.expired(now)))
}

/// The row of session `name`, expired or not; `lock` is appended to the
/// statement (`" FOR UPDATE"`, or nothing to read it as last committed).
pub(crate) async fn fetch(
    sql: &Sql<'_>,
    client: &impl Conn,
    name: &str,
    lock: &str,
) -> Result<Option<SessionRow>> {
    let statement = format!(
        "SELECT {COLUMNS} FROM {s}.sessions WHERE name = $1{lock}",
        s = sql.schema
    );
    sql.query(client, "reading the session", &statement, &[&Text(name)])
        .await?
        .into_iter()
        .next()
        .as_ref()
        .map(SessionRow::from_row)
        .transpose()
}

/// Creates the row of session `name` at its first event and locks it, or,
/// when another transaction created it meanwhile, locks that one (it
/// waits for that transaction to end first).
pub(crate) async fn create(
    sql: &Sql<'_>,
    client: &impl Conn,
    name: &str,
    now: Millis,
) -> Result<SessionRow> {
    let inserted = sql
        .query(
            client,
            "creating the session",
            &format!(
                "INSERT INTO {s}.sessions (name, first_event_at, updated_at) VALUES ($1, $2, $2)
                 ON CONFLICT (name) DO NOTHING RETURNING {COLUMNS}",
                s = sql.schema
            ),
            &[&Text(name), &now],
        )
        .await?
        .into_iter()
        .next();
    if let Some(row) = inserted {
        return SessionRow::from_row(&row);
    }
    lock(sql, client, name)
        .await?
        .ok_or_else(|| crate::sql::corrupt("a session row vanished while it was created"))
}

/// Deletes everything of session `name` (key `sid`, when it has a row):
/// its log, records and row, its snapshots, and with `presence` the
/// presence of the namespace named like it (I4: `clear`; an expired
/// session keeps its namespace's presence, EX3).
pub(crate) async fn delete(
    sql: &Sql<'_>,
    client: &impl Conn,
    (name, sid): (&str, Option<i64>),
    presence: bool,
) -> Result<()> {
    let s = sql.schema;
    let tables = if sid.is_some() {
        &["ready", "records", "events", "sessions"][..]
    } else {
        &[]
    };
    for table in tables {
        sql.query(
            client,
            "deleting the session",
            &format!("DELETE FROM {s}.{table} WHERE sid = $1"),
            &[&sid],
        )
        .await?;
    }
    let mut keyed = vec![("snapshots", "session")];
    if presence {
        keyed.push(("presence", "ns"));
    }
    for (table, key) in keyed {
        sql.query(
            client,
            "deleting the session",
            &format!("DELETE FROM {s}.{table} WHERE {key} = $1"),
            &[&Text(name)],
        )
        .await?;
    }
    Ok(())
}

/// The store index of `index` (a frontier or bound), for statements.
pub(crate) fn bound(index: u64) -> i64 {
    sql_index(index).unwrap_or(i64::MAX)
}

/// EX2: the session's expiry.
pub(crate) async fn write_expiry(
    sql: &Sql<'_>,
    client: &impl Conn,
    sid: i64,
    expiry: Expiry,
) -> Result<()> {
    let ttl = expiry.ttl_ms.map(|t| i64::try_from(t).unwrap_or(i64::MAX));
    sql.query(
        client,
        "setting the expiry",
        &format!(
            "UPDATE {s}.sessions SET ttl_ms = $2, expires_at = $3 WHERE sid = $1",
            s = sql.schema
        ),
        &[&sid, &ttl, &expiry.expires_at],
    )
    .await?;
    Ok(())
}
