//! `close_session` (CL1, CL4) and `trim` (TR1, TR2): the decisions are
//! [`rules::lifecycle`]'s.

use a2_core::rules;
use a2_core::*;
use rusqlite::{Connection, params};

use super::*;
use crate::effects::{Change, Effects};
use crate::rows::{db, sql_index};

/// CL1: records the close; CL4: wakes the session's feeds, which find the
/// log final.
pub fn close_session(
    conn: &Connection,
    effects: &mut Effects,
    name: &str,
    now: Millis,
) -> Result<CloseOutcome> {
    let current = session(conn, name, now)?;
    let frontier = current.as_ref().map_or(0, |s| s.frontier);
    let closed = current.as_ref().and_then(|s| s.closed);
    let outcome = rules::lifecycle::close(name, frontier, closed, now)?;
    if let (
        CloseOutcome::Closed {
            frontier,
            closed_at,
        },
        Some(current),
    ) = (outcome, current)
    {
        mark_closed(conn, effects, name, current.sid, frontier, closed_at)?;
    }
    Ok(outcome)
}

/// CL1, CL6: records the close of session `sid` (named `name`) at
/// `frontier`, at `now`; its feeds read once more and end (CL4).
pub(super) fn mark_closed(
    conn: &Connection,
    effects: &mut Effects,
    name: &str,
    sid: i64,
    frontier: u64,
    now: Millis,
) -> Result<()> {
    conn.prepare_cached(
        "UPDATE sessions SET closed_frontier = ?2, closed_at = ?3,
            updated_at = max(updated_at, ?3)
         WHERE sid = ?1",
    )
    .map_err(db)?
    .execute(params![sid, sql_index(frontier), now])
    .map_err(db)?;
    effects.frontiers.push((name.to_owned(), Change::Closed));
    Ok(())
}

/// TR1, TR2: deletes the settled events `first ..= through` (at most
/// 10 000), checking every one of them first. Their ids go with their rows,
/// so A5 knows only the retained events (TR4); the counters stay (TR5).
pub fn trim(conn: &Connection, name: &str, through: u64, now: Millis) -> Result<TrimOutcome> {
    let Some(current) = session(conn, name, now)? else {
        rules::lifecycle::trim_range(name, 0, 1, through)?;
        return Ok(TrimOutcome { first_index: 1 });
    };
    let Some((from, last)) =
        rules::lifecycle::trim_range(name, current.frontier, current.first_index, through)?
    else {
        return Ok(TrimOutcome {
            first_index: current.first_index,
        });
    };
    let (from_sql, last_sql) = (
        sql_index(from).unwrap_or(i64::MAX),
        sql_index(last).unwrap_or(i64::MAX),
    );
    // TR2: the first unsettled event of the range, if any, refuses the trim.
    let unsettled: Option<i64> = conn
        .prepare_cached(
            "SELECT idx FROM events WHERE sid = ?1 AND idx BETWEEN ?2 AND ?3
             AND processed_at IS NULL ORDER BY idx LIMIT 1",
        )
        .map_err(db)?
        .query_row(params![current.sid, from_sql, last_sql], |row| row.get(0))
        .optional()
        .map_err(db)?;
    if let Some(index) = unsettled {
        let index = to_u64(index)?;
        let rec =
            record(conn, current.sid, index)?.ok_or_else(|| rules::read::missing(name, index))?;
        rules::lifecycle::check_trimmable(name, index, &rec.rules())?;
    }
    let deleted = conn
        .prepare_cached("DELETE FROM events WHERE sid = ?1 AND idx BETWEEN ?2 AND ?3")
        .map_err(db)?
        .execute(params![current.sid, from_sql, last_sql])
        .map_err(db)?;
    // E1: the range had no hole; a missing row is a broken log.
    let expected = last - from + 1;
    if deleted as u64 != expected {
        return Err(Error::corrupted(
            format!(
                "trimming events {from}..={last} of session {name:?} found {deleted} of {expected}"
            ),
            Some(name),
            None,
        ));
    }
    conn.prepare_cached(
        "UPDATE sessions SET first_index = ?2, updated_at = max(updated_at, ?3) WHERE sid = ?1",
    )
    .map_err(db)?
    .execute(params![current.sid, sql_index(last + 1), now])
    .map_err(db)?;
    Ok(TrimOutcome {
        first_index: last + 1,
    })
}

/// EX1, EX2: replaces the session's expiry; setting it is activity.
pub fn set_expiry(
    conn: &Connection,
    name: &str,
    expiry: Expiry,
    now: Millis,
) -> Result<ExpiryOutcome> {
    let expiry = validate::session_expiry(expiry, now)?;
    let Some(current) = session(conn, name, now)? else {
        return Err(rules::lifecycle::no_session(name));
    };
    write_expiry(conn, current.sid, expiry)?;
    bump(conn, current.sid, now, Counts::default())?;
    let deadline = session(conn, name, now)?.and_then(|s| s.deadline);
    Ok(ExpiryOutcome { deadline })
}
