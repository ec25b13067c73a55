//! The rows of new events (A1, A8, A9, A11, CO2), written by `append` and
//! `complete_attempt`.

use a2_core::*;
use rusqlite::{Connection, params};

use super::*;
use crate::rows::{db, json_text, sql_index};

/// What [`insert_events`] wrote.
pub(super) struct Inserted {
    /// The new rows, in index order.
    pub(super) rows: Vec<StoredEvent>,
    /// The session's `sid` (new on its first event).
    pub(super) sid: i64,
    /// The positions in `rows` of the events ready at once (free: pending
    /// and lane-less, or first pending in their lane), ascending.
    pub(super) free: Vec<usize>,
}

/// The `sessions` row of a session's first event (A11: it becomes listed);
/// its `sid`.
fn new_session(conn: &Connection, name: &str, now: Millis) -> Result<i64> {
    conn.prepare_cached(
        "INSERT INTO sessions (name, frontier, pending_count, failed_count,
            attempt_count, failure_count, first_event_at, updated_at)
         VALUES (?1, 0, 0, 0, 0, 0, ?2, ?2) RETURNING sid",
    )
    .map_err(db)?
    .query_row(params![name, now], |row| row.get(0))
    .map_err(db)
}

/// Inserts already-validated events with their final ids after the
/// session's frontier (A1, A8, A9, A11, CO2): settled ones processed, the
/// others pending and, when lane-less or first in their lane, free.
/// Creates the session row on its first event.
pub(super) fn insert_events(
    conn: &Connection,
    name: &str,
    existing: Option<&SessionRow>,
    events: Vec<NewEvent>,
    cause: Option<Cause>,
    now: Millis,
) -> Result<Inserted> {
    let (sid, mut frontier) = match existing {
        Some(s) => (s.sid, s.frontier),
        None => (new_session(conn, name, now)?, 0),
    };
    let mut rows = Vec::with_capacity(events.len());
    let mut ready = Vec::new();
    let mut pending = 0i64;
    let mut lane_busy = conn
        .prepare_cached(
            "SELECT 1 FROM events WHERE sid = ?1 AND lane = ?2 AND lane IS NOT NULL
             AND processed_at IS NULL LIMIT 1",
        )
        .map_err(db)?;
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO events (sid, idx, id, type, payload, created_at, lane, cause_index,
                cause_attempt, cause_batch, processed_at, free, retry_at, due_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )
        .map_err(db)?;
    for mut new in events {
        // The caller gave every event its final id.
        let id = new.id.take().unwrap_or_default();
        frontier += 1;
        let row = StoredEvent::appended(id, new, name, frontier, now, cause);
        let is_pending = row.is_pending();
        let free = if !is_pending {
            None
        } else {
            pending += 1;
            match &row.lane {
                None => Some(1),
                Some(lane) => {
                    let busy = lane_busy.exists(params![sid, lane]).map_err(db)?;
                    (!busy).then_some(1)
                }
            }
        };
        // DL1: a delayed event that would be ready waits in the due set
        // until its time, like a retry, and is never claimed at append
        // (DL3); behind it its lane waits (DL2).
        let (free, due_at) = match row.retry_at {
            Some(at) if free.is_some() => (None, Some(at)),
            _ => (free, None),
        };
        let index = sql_index(frontier).ok_or_else(|| Error::invalid("the session is full"))?;
        insert
            .execute(params![
                sid,
                index,
                row.event.id,
                row.event.event_type,
                json_text(&row.event.payload),
                now,
                row.lane,
                row.cause.map(|c| sql_index(c.index)),
                row.cause.map(|c| c.attempt),
                row.cause.and_then(|c| c.batch_size),
                row.processed_at,
                free,
                row.retry_at,
                due_at,
            ])
            .map_err(db)?;
        if free.is_some() {
            ready.push(rows.len());
        }
        rows.push(row);
    }
    let frontier_sql = sql_index(frontier).ok_or_else(|| Error::invalid("the session is full"))?;
    conn.prepare_cached(
        "UPDATE sessions SET frontier = ?2, pending_count = pending_count + ?3,
            updated_at = max(updated_at, ?4)
         WHERE sid = ?1",
    )
    .map_err(db)?
    .execute(params![sid, frontier_sql, pending, now])
    .map_err(db)?;
    Ok(Inserted {
        rows,
        sid,
        free: ready,
    })
}
