//! `revive` (RV1, RV2, RV3): the decision is [`rules::revive`]'s.

use a2_core::rules;
use a2_core::*;
use rusqlite::{Connection, params};

use super::*;
use crate::effects::Effects;
use crate::rows::{db, sql_index};

/// RV1, RV2, RV3 (validated session id): a dead-lettered event becomes pending
/// again with no failures, ready at once when lane-less or heading its lane
/// (a dead letter always heads it: only a lane head is claimed, hence
/// failed, and an unprocessed head keeps the lane busy). Announced (PS2)
/// even when other pending events kept the count above zero: those wait
/// behind this dead letter, and workers that found nothing claimable there
/// must look again (RV2).
pub fn revive(
    conn: &Connection,
    effects: &mut Effects,
    name: &str,
    index: u64,
    now: Millis,
) -> Result<ReviveOutcome> {
    // RV1.
    let (current, rec) = event_of(conn, name, index, now)?;
    let sql_idx = sql_index(index).unwrap_or(i64::MAX);
    // RV3.
    if !rules::revive::revives(&rec.rules()) {
        let row = event_or_gone(conn, name, current.sid, index)?;
        return Ok(ReviveOutcome::NotDeadLettered(row));
    }
    conn.prepare_cached(
        "UPDATE events SET failed_at = NULL, failure_count = 0, retry_at = NULL,
            claim_holder = NULL, claim_expires_at = NULL
         WHERE sid = ?1 AND idx = ?2",
    )
    .map_err(db)?
    .execute(params![current.sid, sql_idx])
    .map_err(db)?;
    let heads = match &rec.lane {
        None => true,
        Some(lane) => !conn
            .prepare_cached(
                "SELECT 1 FROM events WHERE sid = ?1 AND lane = ?2 AND lane IS NOT NULL
                 AND processed_at IS NULL AND idx < ?3 LIMIT 1",
            )
            .map_err(db)?
            .exists(params![current.sid, lane, sql_idx])
            .map_err(db)?,
    };
    if heads {
        reslot(conn, current.sid, sql_idx)?;
    }
    bump(
        conn,
        current.sid,
        now,
        Counts {
            pending: 1,
            failed: -1,
            failures: -i64::from(rec.failure_count),
            ..Counts::default()
        },
    )?;
    effects.announce(conn, current.sid, name)?;
    let row = event_or_gone(conn, name, current.sid, index)?;
    Ok(ReviveOutcome::Revived(row))
}
