//! `complete_attempt` (CO1, CO2, CO3, CO4, CO5, CO6, B1): the decisions
//! are [`rules::complete`]'s.

use a2_core::rules;
use a2_core::rules::append::final_id;
use a2_core::rules::complete::Completion;
use a2_core::*;
use rusqlite::{Connection, OptionalExtension, params};

use super::*;
use crate::effects::Effects;
use crate::rows::{EVENT_COLUMNS, RawEvent, db, json_text, sql_index};

/// CO1, CO2, CO3, CO4, CO5, CO6, B1 (validated request, returned events
/// with final ids).
pub fn complete(
    conn: &Connection,
    effects: &mut Effects,
    request: CompleteRequest,
    now: Millis,
) -> Result<CompleteOutcome> {
    let index = request.index;
    // DL1: a returned event's due time, checked before anything else.
    rules::delay::due_times(&request.events, now)?;
    // CO1.
    let Some(current) = session(conn, &request.session, now)? else {
        return Err(rules::read::out_of_range(&request.session, index, 0));
    };
    let Some(rec) = record(conn, current.sid, index)? else {
        // TR3: a trimmed event was settled before it went.
        if rules::lifecycle::is_trimmed(current.first_index, index) {
            return Ok(CompleteOutcome::Superseded);
        }
        let frontier = current.frontier;
        return Err(rules::read::out_of_range(&request.session, index, frontier));
    };
    let events = request.events;
    let returned = events.iter().map(final_id);
    match rules::complete::decide(&rec.rules(), index, request.attempt, returned)? {
        Completion::Superseded => return Ok(CompleteOutcome::Superseded),
        Completion::Replay => {
            let rows = returned_rows(conn, &request.session, current.sid, index, &rec)?;
            return Ok(CompleteOutcome::Completed { events: rows });
        }
        Completion::Complete => {}
    }
    // CL3: a closed session settles its events but takes no new ones.
    if !events.is_empty() {
        rules::lifecycle::check_open(&request.session, current.is_closed())?;
    }
    rules::complete::check_new_ids(events.iter().map(final_id), |id| {
        index_of_id(conn, current.sid, id)
    })?;
    mark_processed(
        conn,
        current.sid,
        &rec,
        index,
        request.attempt,
        &events,
        now,
    )?;
    // The session row once: the completed event leaves the pending count,
    // the returned ones join it.
    let settled = SessionDelta { pending: -1 };
    if events.is_empty() {
        bump(
            conn,
            current.sid,
            now,
            Counts {
                pending: settled.pending,
                ..Counts::default()
            },
        )?;
        return Ok(CompleteOutcome::Completed { events: Vec::new() });
    }
    let cause = Cause {
        index,
        attempt: request.attempt,
        batch_size: request.batch_size,
    };
    let inserted = insert_events(
        conn,
        &request.session,
        Some(&current),
        events,
        Some(cause),
        Ids::Checked,
        None,
        settled,
        now,
    )?
    .done()?;
    effects.appended(&request.session, &inserted.rows);
    Ok(CompleteOutcome::Completed {
        events: inserted.rows,
    })
}

/// CO2's write to the completed event: processed by `attempt`, returning
/// the ids of `events`, its lease cleared, and the next event of its lane
/// ready. The caller takes it off the session's pending count.
fn mark_processed(
    conn: &Connection,
    sid: i64,
    rec: &EventRecord,
    index: u64,
    attempt: u32,
    events: &[NewEvent],
    now: Millis,
) -> Result<()> {
    let returned: Vec<&str> = events.iter().map(final_id).collect();
    let returned = if returned.is_empty() {
        None
    } else {
        Some(json_text(&serde_json::Value::from(returned)))
    };
    let sql_idx = sql_index(index).unwrap_or(i64::MAX);
    conn.prepare_cached(
        "UPDATE events SET processed_at = ?3, processed_by_attempt = ?4, returned_ids = ?5,
            claim_holder = NULL, claim_expires_at = NULL, retry_at = NULL,
            free = NULL, due_at = NULL
         WHERE sid = ?1 AND idx = ?2",
    )
    .map_err(db)?
    .execute(params![sid, sql_idx, now, attempt, returned])
    .map_err(db)?;
    if let Some(lane) = &rec.lane {
        advance_lane(conn, sid, lane, sql_idx)?;
    }
    Ok(())
}

/// After `index` of `lane` was processed (or cancelled, CN1): if it was
/// the lane's head, the next pending event of the lane becomes ready
/// (unless dead-lettered, which cannot be: a dead letter only ever heads
/// its lane).
pub(super) fn advance_lane(conn: &Connection, sid: i64, lane: &str, index: i64) -> Result<()> {
    let earlier = conn
        .prepare_cached(
            "SELECT 1 FROM events WHERE sid = ?1 AND lane = ?2 AND lane IS NOT NULL
             AND processed_at IS NULL AND idx < ?3 LIMIT 1",
        )
        .map_err(db)?
        .exists(params![sid, lane, index])
        .map_err(db)?;
    if earlier {
        return Ok(());
    }
    let next: Option<(i64, Option<Millis>)> = conn
        .prepare_cached(
            "SELECT idx, failed_at FROM events WHERE sid = ?1 AND lane = ?2
             AND lane IS NOT NULL AND processed_at IS NULL AND idx > ?3 ORDER BY idx LIMIT 1",
        )
        .map_err(db)?
        .query_row(params![sid, lane, index], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()
        .map_err(db)?;
    if let Some((next, None)) = next {
        reslot(conn, sid, next)?;
    }
    Ok(())
}

/// CO3: the rows of the ids a completion returned, as stored.
fn returned_rows(
    conn: &Connection,
    name: &str,
    sid: i64,
    index: u64,
    rec: &EventRecord,
) -> Result<Vec<StoredEvent>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE sid = ?1 AND id = ?2"
        ))
        .map_err(db)?;
    let mut rows = Vec::with_capacity(rec.returned_ids.len());
    for id in &rec.returned_ids {
        let raw = stmt
            .query_row(params![sid, id], RawEvent::from_row)
            .optional()
            .map_err(db)?
            .ok_or_else(|| {
                Error::corrupted(
                    format!("returned id {id:?} of event {index} is missing from the log"),
                    Some(name),
                    Some(index),
                )
            })?;
        rows.push(raw.into_stored(name)?);
    }
    Ok(rows)
}
