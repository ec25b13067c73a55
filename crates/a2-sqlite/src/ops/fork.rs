//! `fork` (FK1, FK2, FK3, FK4, FK5): the checks are [`rules::fork`]'s; the
//! copy is three `INSERT … SELECT`s in the writer's transaction, so the
//! target appears whole at its commit or not at all, and no row passes
//! through Rust.

use a2_core::rules;
use a2_core::*;
use rusqlite::{Connection, OptionalExtension, params};

use super::*;
use crate::effects::Effects;
use crate::rows::{db, sql_index};

/// FK2 in SQL: the copied rows keep every column but the lease; an event
/// leased in the source is ready in the fork as after a release (RL1):
/// free at once, or due at its retry time if it has one. (A lease is only
/// ever held on a ready event, so its row is ready in the fork too.) Free
/// events of the source's tail (`free = 2`) are indexed free in the fork,
/// whose tail starts after the copied range.
const COPY_EVENTS: &str = "
INSERT INTO events (sid, idx, id, type, payload, created_at, lane, cause_index,
    cause_attempt, cause_batch, processed_at, processed_by_attempt, returned_ids,
    first_claimed_at, last_claimed_at, attempt_count, claim_holder, claim_expires_at,
    retry_at, failure_count, last_failed_at, last_failed_attempt, last_error, failed_at,
    free, due_at, cancelled_at, cancel_reason)
SELECT ?1, idx, id, type, payload, created_at, lane, cause_index,
    cause_attempt, cause_batch, processed_at, processed_by_attempt, returned_ids,
    first_claimed_at, last_claimed_at, attempt_count, NULL, NULL,
    retry_at, failure_count, last_failed_at, last_failed_attempt, last_error, failed_at,
    CASE WHEN claim_holder IS NULL THEN min(free, 1) WHEN retry_at IS NULL THEN 1 END,
    CASE WHEN claim_holder IS NULL THEN due_at ELSE retry_at END, cancelled_at, cancel_reason
FROM events WHERE sid = ?2 AND idx BETWEEN ?3 AND ?4";

/// FK2 in SQL: the fork's row, its counters summed over the copied
/// events (`ForkCounters`), the source's `first_event_at`, its origin
/// (FK5).
const NEW_SESSION: &str = "
INSERT INTO sessions (name, frontier, pending_count, failed_count, attempt_count,
    failure_count, first_event_at, updated_at, first_index, forked_from, forked_index,
    tail_from)
SELECT ?1, ?4,
    coalesce(sum(failed_at IS NULL AND processed_at IS NULL), 0),
    coalesce(sum(failed_at IS NOT NULL), 0),
    coalesce(sum(attempt_count), 0), coalesce(sum(failure_count), 0),
    (SELECT first_event_at FROM sessions WHERE sid = ?2), ?5, ?3, ?6, ?4, ?4 + 1
FROM events WHERE sid = ?2 AND idx BETWEEN ?3 AND ?4
RETURNING sid";

/// FK1, FK2, FK3, FK4: forks `source` at `at` into `target`, a new session
/// with the store's default expiry (EX2). Its feeds (opened before it
/// existed) read, as after a clear.
pub fn fork(
    conn: &Connection,
    effects: &mut Effects,
    source: &str,
    at: u64,
    target: &str,
    default_expiry: Option<Expiry>,
    now: Millis,
) -> Result<ForkOutcome> {
    let expiry = default_expiry
        .map(|e| validate::session_expiry(e, now))
        .transpose()?;
    let existing = session_row(conn, target)?;
    let expired = existing
        .as_ref()
        .is_some_and(|s| rules::lifecycle::expired(s.deadline, now));
    if let Some(current) = existing.as_ref().filter(|_| !expired) {
        let origin = origin(conn, current.sid)?;
        return rules::fork::existing_target(source, at, target, origin.as_ref());
    }
    let Some(from) = session(conn, source, now)? else {
        return Err(rules::fork::no_source(source));
    };
    rules::fork::check_source(source, from.frontier, from.first_index, at)?;
    // EX3: what is left of an expired target goes first; a fork is new.
    // `delete` announces a clear to the name's feeds, which is what the
    // fork is to a feed opened before it: it reads the new log (ST6).
    clear::delete(conn, effects, target, false)?;
    let (first, last) = (
        sql_index(from.first_index).unwrap_or(i64::MAX),
        sql_index(at).unwrap_or(i64::MAX),
    );
    let sid: i64 = conn
        .prepare_cached(NEW_SESSION)
        .map_err(db)?
        .query_row(params![target, from.sid, first, last, now, source], |row| {
            row.get(0)
        })
        .map_err(db)?;
    conn.prepare_cached(COPY_EVENTS)
        .map_err(db)?
        .execute(params![sid, from.sid, first, last])
        .map_err(db)?;
    conn.prepare_cached(
        "INSERT INTO snapshots (session, reducer, idx, state, updated_at)
         SELECT ?1, reducer, idx, state, updated_at FROM snapshots
         WHERE session = ?2 AND idx <= ?3",
    )
    .map_err(db)?
    .execute(params![target, source, last])
    .map_err(db)?;
    if let Some(expiry) = expiry {
        write_expiry(conn, sid, expiry)?;
    }
    // PS1, PS2: the fork's pending events are its own work.
    let pending: i64 = conn
        .prepare_cached("SELECT pending_count FROM sessions WHERE sid = ?1")
        .map_err(db)?
        .query_row([sid], |row| row.get(0))
        .map_err(db)?;
    if pending > 0 {
        effects.announce(conn, sid, target)?;
    }
    Ok(ForkOutcome::Forked {
        first_index: from.first_index,
    })
}

/// FK5: where the session `sid` was forked from, if it is a fork.
fn origin(conn: &Connection, sid: i64) -> Result<Option<ForkOrigin>> {
    let row: Option<(Option<String>, Option<i64>)> = conn
        .prepare_cached("SELECT forked_from, forked_index FROM sessions WHERE sid = ?1")
        .map_err(db)?
        .query_row([sid], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
        .map_err(db)?;
    Ok(match row {
        Some((Some(session), Some(index))) => Some(ForkOrigin {
            session,
            index: to_u64(index)?,
        }),
        _ => None,
    })
}
