//! The rows of new events (A1, A8, A9, A11, CO2), written by `append` and
//! `complete_attempt`.

use a2_core::*;
use rusqlite::{Connection, ToSql, params, params_from_iter};

use super::*;
use crate::rows::{db, json_text, sql_bound, sql_index};

/// What [`insert_events`] wrote.
pub(super) struct Inserted {
    /// The new rows, in index order.
    pub(super) rows: Vec<StoredEvent>,
    /// The session's `sid` (new on its first event).
    pub(super) sid: i64,
    /// The positions in `rows` of the events leased as they were inserted
    /// ([`LeaseTo`]), ascending.
    pub(super) leased: Vec<usize>,
}

/// Who takes the events of a batch that are ready at once (AC2), up to
/// `limit` of them: they are written leased, as `claim` would lease them
/// (C2), instead of written free and then updated.
pub(super) struct LeaseTo<'a> {
    pub(super) holder: &'a str,
    pub(super) expires_at: Millis,
    pub(super) limit: usize,
}

/// What the insert adds to the session row besides its own events.
#[derive(Default, Clone, Copy)]
pub(super) struct SessionDelta {
    /// Pending events the caller settled in the same operation.
    pub(super) pending: i64,
}

/// Whether the caller looked the batch's ids up before inserting it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Ids {
    /// The caller knows no id of the batch exists in the session: an id the
    /// unique index `events_by_id` refuses is a broken store.
    Checked,
    /// The caller left the lookup to the index: an id that exists undoes
    /// the rows written so far and hands the batch back
    /// ([`Insert::IdTaken`]).
    Unchecked,
}

/// What [`insert_events`] did.
pub(super) enum Insert {
    /// The batch is in.
    Done(Inserted),
    /// An id of the batch exists in the session (only with
    /// [`Ids::Unchecked`]): nothing was written; here is the batch.
    IdTaken(Vec<NewEvent>),
}

impl Insert {
    /// The rows of a batch whose ids were checked.
    pub(super) fn done(self) -> Result<Inserted> {
        match self {
            Insert::Done(inserted) => Ok(inserted),
            Insert::IdTaken(_) => Err(crate::rows::corrupt("an id looked up as new is taken")),
        }
    }
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

/// `free` of an event written ready: free in the session's tail, found
/// by claims from `sessions.tail_from` on rather than through
/// `events_free`, so an append writes no entry there (one page per session
/// in each group commit, about a third of the log pages of single-event
/// appends from many sessions). New events come after the tail's start: a
/// claim moves it to at most the frontier plus one.
pub(super) const TAIL_FREE: i64 = 2;

/// The insert of an event that has only what most have: no lane, no cause,
/// not settled, not delayed. Binding the nine other columns as NULL cost
/// as much as a tenth of an append. Its `free` is [`TAIL_FREE`], written
/// out (a test checks they agree).
const INSERT_PLAIN: &str = "INSERT INTO events (sid, idx, id, type, payload, created_at, free)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, 2)";

/// The insert of an event leased at once (AC2): attempt 1, claimed now by
/// the holder until the lease's expiry, when it is due again.
const INSERT_LEASED: &str = "INSERT INTO events (sid, idx, id, type, payload, created_at, lane,
        cause_index, cause_attempt, cause_batch, attempt_count, first_claimed_at,
        last_claimed_at, claim_holder, claim_expires_at, due_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 1, ?6, ?6, ?11, ?12, ?12)";

/// The insert of any event.
const INSERT_ANY: &str = "INSERT INTO events (sid, idx, id, type, payload, created_at, lane,
        cause_index, cause_attempt, cause_batch, processed_at, free, retry_at, due_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

/// Whether `error` is the unique index of ids refusing an id that the
/// session has.
fn id_taken(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(e, Some(message))
            if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                && message.contains("events.id")
    )
}

/// Inserts already-validated events with their final ids after the
/// session's frontier (A1, A8, A9, A11, CO2): settled ones processed, the
/// others pending and, when lane-less or first in their lane, free — or
/// leased to `lease`'s holder, up to its limit (AC2). Creates the session
/// row on its first event, and updates it once: frontier, pending count
/// (plus `delta`), attempts, last write.
#[allow(clippy::too_many_arguments)]
pub(super) fn insert_events(
    conn: &Connection,
    name: &str,
    existing: Option<&SessionRow>,
    events: Vec<NewEvent>,
    cause: Option<Cause>,
    ids: Ids,
    lease: Option<LeaseTo<'_>>,
    delta: SessionDelta,
    now: Millis,
) -> Result<Insert> {
    let (sid, start) = match existing {
        Some(s) => (s.sid, s.frontier),
        None => (new_session(conn, name, now)?, 0),
    };
    let mut frontier = start;
    // The first event written free in the tail, if any.
    let mut first_tail: Option<i64> = None;
    let mut pending = 0i64;
    // Each statement is taken from the cache when first needed: an append
    // whose events are all claimed never runs the plain insert (a cache
    // look-up hashes the SQL text twice: 1% of the work cycle's writer).
    let mut insert_plain = None;
    let mut insert_any = None;
    let mut insert_leased = None;
    let mut leased: Vec<usize> = Vec::new();
    let limit = lease.as_ref().map_or(0, |l| l.limit);
    for (position, new) in events.iter().enumerate() {
        frontier += 1;
        let index = sql_index(frontier).ok_or_else(|| Error::invalid("the session is full"))?;
        let id = rules::append::final_id(new);
        let cause = cause.or(new.cause);
        let retry_at = rules::delay::due(new, now);
        let plain = new.lane.is_none() && cause.is_none() && !new.settled && retry_at.is_none();
        let payload = json_text(&new.payload);
        let written = if plain && leased.len() >= limit {
            pending += 1;
            first_tail.get_or_insert(index);
            let insert = match &mut insert_plain {
                Some(insert) => insert,
                None => insert_plain.insert(conn.prepare_cached(INSERT_PLAIN).map_err(db)?),
            };
            insert.execute(params![sid, index, id, new.event_type, payload, now])
        } else {
            let free = if new.settled {
                None
            } else {
                pending += 1;
                match &new.lane {
                    None => Some(TAIL_FREE),
                    Some(lane) => {
                        let busy = conn
                            .prepare_cached(
                                "SELECT 1 FROM events WHERE sid = ?1 AND lane = ?2
                                 AND lane IS NOT NULL AND processed_at IS NULL LIMIT 1",
                            )
                            .and_then(|mut busy| busy.exists(params![sid, lane]))
                            .map_err(db)?;
                        (!busy).then_some(TAIL_FREE)
                    }
                }
            };
            // DL1: a delayed event that would be ready waits in the due set
            // until its time, like a retry, and is never claimed at append
            // (DL3); behind it its lane waits (DL2).
            let (free, due_at) = match retry_at {
                Some(at) if free.is_some() => (None, Some(at)),
                _ => (free, None),
            };
            // The columns both statements below start with.
            let cause_index = cause.map(|c| sql_index(c.index));
            let (cause_attempt, batch_size) =
                (cause.map(|c| c.attempt), cause.and_then(|c| c.batch_size));
            let columns: [&dyn ToSql; 10] = [
                &sid,
                &index,
                &id,
                &new.event_type,
                &payload,
                &now,
                &new.lane,
                &cause_index,
                &cause_attempt,
                &batch_size,
            ];
            match (free, &lease) {
                (Some(_), Some(lease)) if leased.len() < limit => {
                    leased.push(position);
                    let insert = match &mut insert_leased {
                        Some(insert) => insert,
                        None => {
                            insert_leased.insert(conn.prepare_cached(INSERT_LEASED).map_err(db)?)
                        }
                    };
                    let lease: [&dyn ToSql; 2] = [&lease.holder, &lease.expires_at];
                    insert.execute(params_from_iter(columns.iter().chain(&lease)))
                }
                _ => {
                    if free.is_some() {
                        first_tail.get_or_insert(index);
                    }
                    let insert = match &mut insert_any {
                        Some(insert) => insert,
                        None => insert_any.insert(conn.prepare_cached(INSERT_ANY).map_err(db)?),
                    };
                    let settled = new.settled.then_some(now);
                    let state: [&dyn ToSql; 4] = [&settled, &free, &retry_at, &due_at];
                    insert.execute(params_from_iter(columns.iter().chain(&state)))
                }
            }
        };
        match written {
            Ok(_) => {}
            Err(error) if ids == Ids::Unchecked && id_taken(&error) => {
                // A5: the batch may be a retry; undo this batch's rows (the
                // session row is untouched so far) and let the caller look.
                conn.prepare_cached("DELETE FROM events WHERE sid = ?1 AND idx > ?2")
                    .and_then(|mut undo| undo.execute(params![sid, sql_bound(start)]))
                    .map_err(db)?;
                return Ok(Insert::IdTaken(events));
            }
            Err(error) => return Err(db(error)),
        }
    }
    let frontier_sql = sql_index(frontier).ok_or_else(|| Error::invalid("the session is full"))?;
    let attempts = i64::try_from(leased.len()).unwrap_or(i64::MAX);
    // An empty tail (it starts after the old frontier) starts at the first
    // event written free, or after the new frontier: a claim then never
    // steps over settled or waiting events appended to a session whose
    // claims had kept up.
    conn.prepare_cached(
        "UPDATE sessions SET frontier = ?2, pending_count = pending_count + ?3,
            attempt_count = attempt_count + ?4, updated_at = max(updated_at, ?5),
            tail_from = CASE WHEN tail_from > ?6 THEN ?7 ELSE tail_from END
         WHERE sid = ?1",
    )
    .map_err(db)?
    .execute(params![
        sid,
        frontier_sql,
        pending + delta.pending,
        attempts,
        now,
        sql_bound(start),
        first_tail.unwrap_or(frontier_sql.saturating_add(1)),
    ])
    .map_err(db)?;
    let mut rows: Vec<StoredEvent> = events
        .into_iter()
        .zip(start + 1..)
        .map(|(mut new, index)| {
            // The caller gave every event its final id.
            let id = new.id.take().unwrap_or_default();
            let due = rules::delay::due(&new, now);
            StoredEvent::appended(id, new, name, index, now, due, cause)
        })
        .collect();
    if let Some(lease) = &lease {
        // C2's lease, as INSERT_LEASED wrote it.
        for &at in &leased {
            rows[at].lease(lease.holder, lease.expires_at, now);
        }
    }
    Ok(Insert::Done(Inserted { rows, sid, leased }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_insert_writes_events_free_in_the_tail() {
        assert!(INSERT_PLAIN.ends_with(&format!("?6, {TAIL_FREE})")));
    }
}
