//! `cancel` (CN1, CN2, CN3, CN4, CN5): the decision is [`rules::cancel`]'s.

use a2_core::rules;
use a2_core::rules::cancel::Cancel;
use a2_core::*;
use rusqlite::{Connection, params};

use super::complete::advance_lane;
use super::*;
use crate::effects::Effects;
use crate::rows::{db, sql_index};

/// How long an announcement of a cancel stays in `cancels` for other
/// processes' pollers to read (CN5): far longer than any poll interval.
const CANCEL_NOTE_MS: Millis = 60_000;

/// CN1, CN3, CN4 (validated request): a pending or dead-lettered event is
/// settled as cancelled and its lane moves on; a leased attempt's cancel
/// is announced (CN5): to this process's streams after the commit, and to
/// other processes through a row of `cancels`, which their pollers read.
pub fn cancel(
    conn: &Connection,
    effects: &mut Effects,
    name: &str,
    index: u64,
    reason: Option<String>,
    now: Millis,
) -> Result<CancelOutcome> {
    // CN4.
    let (current, rec) = event_of(conn, name, index, now)?;
    let decision = rules::cancel::decide(&rec.rules());
    if !decision.writes() {
        // CN3.
        let row = event_or_gone(conn, name, current.sid, index)?;
        return Ok(CancelOutcome::NotPending(row));
    }
    let running = rules::cancel::running_attempt(&rec.rules());
    let sql_idx = sql_index(index).unwrap_or(i64::MAX);
    conn.prepare_cached(
        "UPDATE events SET processed_at = ?3, cancelled_at = ?3, cancel_reason = ?4,
            claim_holder = NULL, claim_expires_at = NULL, retry_at = NULL, failed_at = NULL,
            free = NULL, due_at = NULL
         WHERE sid = ?1 AND idx = ?2",
    )
    .map_err(db)?
    .execute(params![current.sid, sql_idx, now, reason])
    .map_err(db)?;
    let counts = match decision {
        Cancel::DeadLetter => Counts {
            failed: -1,
            ..Counts::default()
        },
        _ => Counts {
            pending: -1,
            ..Counts::default()
        },
    };
    bump(conn, current.sid, now, counts)?;
    if let Some(lane) = &rec.lane {
        advance_lane(conn, current.sid, lane, sql_idx)?;
    }
    if let Some(attempt) = running {
        conn.prepare_cached("DELETE FROM cancels WHERE at < ?1")
            .map_err(db)?
            .execute(params![now.saturating_sub(CANCEL_NOTE_MS)])
            .map_err(db)?;
        conn.prepare_cached(
            "INSERT INTO cancels (session, idx, attempt, at) VALUES (?1, ?2, ?3, ?4)",
        )
        .map_err(db)?
        .execute(params![name, sql_idx, attempt, now])
        .map_err(db)?;
        effects.cancels.push(Cancellation {
            session: name.to_owned(),
            index,
            attempt,
        });
    }
    // PS2: events left pending may have waited behind this one (its lane,
    // its lease): workers that found nothing claimable look again.
    if current.pending_count + counts.pending > 0 {
        effects.announce(conn, current.sid, name)?;
    }
    let row = event_or_gone(conn, name, current.sid, index)?;
    Ok(CancelOutcome::Cancelled(row))
}
