//! `fail_attempt` (F1, F2, F3, F4, F5, F6): the decisions are
//! [`rules::fail`]'s.

use a2_core::rules;
use a2_core::rules::fail::Failure;
use a2_core::*;
use rusqlite::{Connection, params};

use super::*;
use crate::rows::{db, sql_index};

/// F1, F2, F3, F4, F5, F6 (validated request).
pub fn fail(conn: &Connection, request: &FailRequest, now: Millis) -> Result<FailOutcome> {
    let index = request.index;
    // F1.
    let Some(current) = session(conn, &request.session, now)? else {
        return Err(rules::read::out_of_range(&request.session, index, 0));
    };
    let Some(rec) = record(conn, current.sid, index)? else {
        // TR3: a trimmed event was settled before it went.
        if rules::lifecycle::is_trimmed(current.first_index, index) {
            return Ok(FailOutcome {
                outcome: FailKind::Superseded,
                failure_count: 0,
            });
        }
        let frontier = current.frontier;
        return Err(rules::read::out_of_range(&request.session, index, frontier));
    };
    let decision = rules::fail::decide(&rec.rules(), request.attempt, request.max_failures);
    let Failure::Record {
        failure_count,
        dead,
    } = decision
    else {
        return Ok(decision.outcome(rec.failure_count));
    };
    // F6.
    let sql_idx = sql_index(index).unwrap_or(i64::MAX);
    conn.prepare_cached(
        "UPDATE events SET failure_count = ?3, last_error = ?4, last_failed_at = ?5,
            last_failed_attempt = ?6, claim_holder = NULL, claim_expires_at = NULL,
            failed_at = ?7, retry_at = ?8, free = NULL, due_at = NULL
         WHERE sid = ?1 AND idx = ?2",
    )
    .map_err(db)?
    .execute(params![
        current.sid,
        sql_idx,
        failure_count,
        request.error,
        now,
        request.attempt,
        dead.then_some(now),
        if dead { None } else { request.retry_at },
    ])
    .map_err(db)?;
    let mut counts = Counts {
        failures: 1,
        ..Counts::default()
    };
    if dead {
        counts.pending = -1;
        counts.failed = 1;
    } else {
        reslot(conn, current.sid, sql_idx)?;
    }
    bump(conn, current.sid, now, counts)?;
    Ok(decision.outcome(rec.failure_count))
}
