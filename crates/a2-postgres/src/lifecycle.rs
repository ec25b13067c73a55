//! Closes, trims, expiries and clears (CL1, CL6, TR1, TR2, EX1, EX2, I4):
//! the decisions are [`rules::lifecycle`]'s.

use crate::sql::Conn;
use a2_core::{
    CloseOutcome, Error, Expiry, ExpiryOutcome, Millis, Result, TrimOutcome, rules, validate,
};

use crate::op::On;
use crate::rows;
use crate::session::{self, bound};
use crate::sql::{Sql, index_of};

/// CL1: closes session `sid` at `frontier`.
pub(crate) async fn mark_closed(
    sql: &Sql<'_>,
    client: &impl Conn,
    sid: i64,
    frontier: u64,
    now: Millis,
) -> Result<()> {
    sql.query(
        client,
        "closing the session",
        &format!(
            "UPDATE {s}.sessions SET closed_frontier = $2, closed_at = $3,
                updated_at = greatest(updated_at, $3)
             WHERE sid = $1",
            s = sql.schema
        ),
        &[&sid, &bound(frontier), &now],
    )
    .await?;
    Ok(())
}

/// CL1: records the close; CL4: its feeds read once more and end.
pub(crate) async fn close(on: On<'_, impl Conn>, name: String) -> Result<CloseOutcome> {
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let current = session::lock(sql, client, &name)
        .await?
        .filter(|s| !s.expired(now));
    let frontier = current.as_ref().map_or(0, |s| s.log.frontier);
    let closed = current.as_ref().and_then(|s| s.closed);
    let outcome = rules::lifecycle::close(&name, frontier, closed, now)?;
    // Only a session with events closes (CL1): it has a row.
    let Some(sid) = current.map(|s| s.sid) else {
        return Ok(outcome);
    };
    if let CloseOutcome::Closed {
        frontier,
        closed_at,
    } = outcome
    {
        mark_closed(sql, client, sid, frontier, closed_at).await?;
        on.notices.appended(&name, frontier, true);
    }
    Ok(outcome)
}

/// TR1, TR2: deletes the settled events `first ..= through`, checking the
/// first unsettled one of the range, if any, refuses the trim. Their ids
/// go with their rows, so A5 knows only the retained events (TR4); the
/// counters stay (TR5).
pub(crate) async fn trim(
    on: On<'_, impl Conn>,
    (name, through): (String, u64),
) -> Result<TrimOutcome> {
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let Some(current) = session::lock(sql, client, &name)
        .await?
        .filter(|s| !s.expired(now))
    else {
        rules::lifecycle::trim_range(&name, 0, 1, through)?;
        return Ok(TrimOutcome { first_index: 1 });
    };
    let (frontier, first) = (current.log.frontier, current.log.first_index);
    let Some((from, last)) = rules::lifecycle::trim_range(&name, frontier, first, through)? else {
        return Ok(TrimOutcome { first_index: first });
    };
    let s = sql.schema;
    let (sid, from_sql, last_sql) = (current.sid, bound(from), bound(last));
    let open = format!(
        "SELECT idx FROM {s}.records WHERE sid = $1 AND idx BETWEEN $2 AND $3 AND open
         ORDER BY idx LIMIT 1"
    );
    let found = sql
        .query(client, "trimming", &open, &[&sid, &from_sql, &last_sql])
        .await?;
    if let Some(row) = found.first() {
        let index = index_of(row.get(0))?;
        let event = rows::one(sql, client, &name, sid, index)
            .await?
            .ok_or_else(|| rules::read::missing(&name, index))?;
        rules::lifecycle::check_trimmable(&name, index, &(&event).into())?;
    }
    let mut deleted = 0;
    for table in ["records", "events"] {
        deleted = sql
            .query(
                client,
                "trimming",
                &format!(
                    "WITH gone AS (DELETE FROM {s}.{table} WHERE sid = $1 AND idx BETWEEN $2 AND $3
                     RETURNING 1) SELECT count(*) FROM gone"
                ),
                &[&sid, &from_sql, &last_sql],
            )
            .await?
            .first()
            .map_or(0, |row| row.get::<_, i64>(0));
    }
    // E1: the range had no hole; a missing row is a broken log.
    let expected = last - from + 1;
    if u64::try_from(deleted).ok() != Some(expected) {
        return Err(Error::corrupted(
            format!(
                "trimming events {from}..={last} of session {name:?} found {deleted} of {expected}"
            ),
            Some(&name),
            None,
        ));
    }
    let moved = format!(
        "UPDATE {s}.sessions SET first_index = $2, updated_at = greatest(updated_at, $3)
         WHERE sid = $1"
    );
    sql.query(client, "trimming", &moved, &[&sid, &bound(last + 1), &now])
        .await?;
    on.notices.appended(&name, frontier, true);
    Ok(TrimOutcome {
        first_index: last + 1,
    })
}

/// EX1, EX2: replaces the session's expiry; setting it is activity.
pub(crate) async fn set_expiry(
    on: On<'_, impl Conn>,
    (name, expiry): (String, Expiry),
) -> Result<ExpiryOutcome> {
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let expiry = validate::session_expiry(expiry, now)?;
    let Some(current) = session::lock(sql, client, &name)
        .await?
        .filter(|s| !s.expired(now))
    else {
        return Err(rules::lifecycle::no_session(&name));
    };
    session::write_expiry(sql, client, current.sid, expiry).await?;
    let touched = format!(
        "UPDATE {s}.sessions SET updated_at = greatest(updated_at, $2) WHERE sid = $1",
        s = sql.schema
    );
    sql.query(
        client,
        "setting the expiry",
        &touched,
        &[&current.sid, &now],
    )
    .await?;
    let deadline = session::lock(sql, client, &name)
        .await?
        .and_then(|s| s.deadline);
    // EX4: its feeds learn the new deadline.
    on.notices.appended(&name, current.log.frontier, true);
    Ok(ExpiryOutcome { deadline })
}

/// I4: the session's log, records, row, snapshots and presence are gone;
/// its feeds read (ST6).
pub(crate) async fn clear(on: On<'_, impl Conn>, name: String) -> Result<()> {
    let (sql, client) = (&on.sql, on.client);
    let sid = session::lock(sql, client, &name).await?.map(|s| s.sid);
    session::delete(sql, client, (&name, sid), true).await?;
    on.notices.appended(&name, 0, true);
    Ok(())
}
