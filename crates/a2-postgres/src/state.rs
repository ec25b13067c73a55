//! Reducers' snapshots (S1, S2) and the pages of sessions with pending
//! work (PS1): the decisions are `rules::state`'s.

use crate::sql::Conn;
use a2_core::{PageRequest, Result, SessionPage, Snapshot, SnapshotWrite, StateRead, rules};

use crate::op::On;
use crate::rows;
use crate::session::{self, bound};
use crate::sql::{Text, corrupt, index_of, text};

/// A session's deadline (EX1) in SQL, as `SessionRow` computes it.
pub(crate) const DEADLINE: &str = "least(coalesce(expires_at, 9223372036854775807), \
     coalesce(updated_at + ttl_ms, 9223372036854775807))";

/// S2 (validated names): each snapshot within the log, and never moving
/// back: a snapshot at an index not above the stored one is left as it is.
pub(crate) async fn put(
    on: On<'_, impl Conn>,
    (name, snapshots): (String, Vec<SnapshotWrite>),
) -> Result<()> {
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let frontier = match session::lock(sql, client, &name).await? {
        Some(s) if s.expired(now) => {
            // EX3: what is left of an expired session goes first, so these
            // snapshots do not go with it later.
            session::delete(sql, client, (&name, Some(s.sid)), false).await?;
            0
        }
        Some(s) => s.log.frontier,
        None => 0,
    };
    rules::state::check_snapshots(frontier, &snapshots)?;
    let statement = format!(
        "INSERT INTO {s}.snapshots (session, reducer, idx, state, updated_at)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (session, reducer) DO UPDATE SET
            idx = excluded.idx, state = excluded.state, updated_at = excluded.updated_at
         WHERE excluded.idx > {s}.snapshots.idx",
        s = sql.schema
    );
    for snapshot in snapshots {
        let state = serde_json::to_string(&snapshot.state).map_err(|e| corrupt(e.to_string()))?;
        let index = bound(snapshot.index);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
            [&Text(&name), &Text(&snapshot.reducer), &index, &state, &now];
        sql.query(client, "writing a snapshot", &statement, &params)
            .await?;
    }
    Ok(())
}

/// S1: the reducer's snapshot, and the events after it, in the caller's
/// one snapshot (`REPEATABLE READ`).
pub(crate) async fn read(
    on: On<'_, impl Conn>,
    (name, reducer): (String, String),
) -> Result<StateRead> {
    let (sql, client, now) = (&on.sql, on.client, on.now);
    // EX3: an expired session's snapshots are gone with it.
    let current = session::fetch(sql, client, &name, "").await?;
    if current.as_ref().is_some_and(|s| s.expired(now)) {
        return Ok(StateRead {
            snapshot: None,
            events: Vec::new(),
        });
    }
    let statement = format!(
        "SELECT idx, state FROM {s}.snapshots WHERE session = $1 AND reducer = $2",
        s = sql.schema
    );
    let found = sql
        .query(
            client,
            "reading a snapshot",
            &statement,
            &[&Text(&name), &Text(&reducer)],
        )
        .await?;
    let snapshot = match found.first() {
        Some(row) => {
            let state: String = row.get(1);
            Some(Snapshot {
                index: index_of(row.get(0))?,
                state: serde_json::from_str(&state)
                    .map_err(|e| corrupt(format!("a snapshot of {name:?} is not JSON: {e}")))?,
            })
        }
        None => None,
    };
    let after = snapshot.as_ref().map_or(0, |s| s.index);
    let events = match current {
        Some(current) => {
            rules::lifecycle::check_retained(&name, current.log.first_index, after)?;
            let span = (after, current.log.frontier);
            rows::range(sql, client, (&name, current.sid), span, usize::MAX).await?
        }
        None => Vec::new(),
    };
    Ok(StateRead {
        snapshot,
        events: events.into_iter().map(|e| e.event).collect(),
    })
}

/// PS1: sessions with pending events, in byte order, from the cursor; an
/// expired one is not pending (EX3).
pub(crate) async fn pending(on: On<'_, impl Conn>, page: PageRequest) -> Result<SessionPage> {
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let statement = format!(
        "SELECT name FROM {s}.sessions WHERE pending AND name > $1 AND {DEADLINE} > $2
         ORDER BY name LIMIT $3",
        s = sql.schema
    );
    let take = i64::try_from(page.limit.saturating_add(1)).unwrap_or(i64::MAX);
    // The empty string sorts before every session name (never empty).
    let start = page.cursor.unwrap_or_default();
    let mut sessions: Vec<String> = sql
        .query(
            client,
            "listing pending sessions",
            &statement,
            &[&Text(&start), &now, &take],
        )
        .await?
        .iter()
        .map(|row| text(row, 0))
        .collect();
    let more = sessions.len() > page.limit;
    sessions.truncate(page.limit);
    let cursor = if more { sessions.last().cloned() } else { None };
    Ok(SessionPage { sessions, cursor })
}
