//! The writes, one file per operation, each a function over the write
//! connection inside the writer's transaction. Each loads what its rule in
//! `a2_core::rules` needs, calls it, and writes what it decides: every
//! refusal comes before the first write (or after the operation undid its
//! writes and said so, `Effects::restored`), so that a refused operation
//! leaves its group's transaction as it found it. The readiness bookkeeping that
//! makes claiming cheap is the pair of columns `free` and `due_at`:
//!
//! - a *ready* pending event (lane-less, or the head of its lane and not
//!   dead-lettered) has `free = 1` when it is claimable at once, or
//!   `due_at` = the time it becomes claimable (its lease expiry or retry
//!   time);
//! - every other event has both `NULL`.
//!
//! Both columns have partial indexes (`events_free`, `events_due`), so a
//! claim reads only ready events, never the log.

mod append;
mod cancel;
mod claim;
mod clear;
mod complete;
mod fail;
mod fork;
mod insert;
mod lifecycle;
mod presence;
mod release;
mod renew;
mod revive;
mod state;

pub use append::{Extras, append};
pub use cancel::cancel;
pub use claim::claim;
pub use clear::clear;
pub use complete::complete;
pub use fail::fail;
pub use fork::fork;
pub use lifecycle::{close_session, set_expiry, trim};
pub use presence::{presence_prune, presence_set};
pub use release::release;
pub use renew::renew;
pub use revive::revive;
pub use state::put_snapshots;

use insert::{Ids, Insert, Inserted, LeaseTo, SessionDelta, TAIL_FREE, insert_events};

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use a2_core::rules;
use a2_core::*;
use rusqlite::{Connection, OptionalExtension, params};

use crate::effects::Effects;
use crate::rows::{EVENT_COLUMNS, RawEvent, corrupt, db, sql_index, to_u64};
use crate::schema::DEADLINE;
use crate::writer::Writer;

/// A session's row in `sessions`.
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub sid: i64,
    pub frontier: u64,
    pub pending_count: i64,
    /// The first retained index (TR1).
    pub first_index: u64,
    /// The frontier and time of its close (CL1), if closed.
    pub closed: Option<(u64, Millis)>,
    /// When it expires (EX1), if it does.
    pub deadline: Option<Millis>,
    /// Where its tail starts: every event written `free = 2` (ready, not
    /// in `events_free`) has an index at or after it.
    pub tail_from: i64,
}

impl SessionRow {
    /// Whether the session is closed (CL2).
    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }
}

/// The session named `name`, if it has events and has not expired at
/// `now` (EX3).
pub fn session(conn: &Connection, name: &str, now: Millis) -> Result<Option<SessionRow>> {
    Ok(session_row(conn, name)?.filter(|s| !rules::lifecycle::expired(s.deadline, now)))
}

/// The row of the session named `name`, expired or not.
pub fn session_row(conn: &Connection, name: &str) -> Result<Option<SessionRow>> {
    conn.prepare_cached(
        "SELECT sid, frontier, pending_count, first_index, closed_frontier, closed_at,
            ttl_ms, expires_at, updated_at, tail_from
         FROM sessions WHERE name = ?1",
    )
    .map_err(db)?
    .query_row([name], |row| {
        Ok((
            (row.get(0)?, row.get(1)?, row.get(2)?),
            (row.get(3)?, row.get(4)?, row.get(5)?),
            (row.get(6)?, row.get(7)?, row.get(8)?, row.get(9)?),
        ))
    })
    .optional()
    .map_err(db)?
    .map(session_of)
    .transpose()
}

type RawSession = (
    (i64, i64, i64),
    (i64, Option<i64>, Option<Millis>),
    (Option<i64>, Option<Millis>, Millis, i64),
);

fn session_of(raw: RawSession) -> Result<SessionRow> {
    let (
        (sid, frontier, pending_count),
        (first, closed, closed_at),
        (ttl, at, updated_at, tail_from),
    ) = raw;
    let closed = match (closed, closed_at) {
        (Some(frontier), Some(at)) => Some((to_u64(frontier)?, at)),
        _ => None,
    };
    let expiry = match (ttl, at) {
        (None, None) => None,
        (ttl, expires_at) => Some(Expiry {
            ttl_ms: ttl.map(to_u64).transpose()?,
            expires_at,
        }),
    };
    Ok(SessionRow {
        sid,
        frontier: to_u64(frontier)?,
        pending_count,
        first_index: to_u64(first)?,
        closed,
        deadline: expiry.and_then(|e| e.deadline(updated_at)),
        tail_from,
    })
}

/// EX2: gives the session `sid` this expiry (normalized by the caller).
fn write_expiry(conn: &Connection, sid: i64, expiry: Expiry) -> Result<()> {
    let ttl = expiry.ttl_ms.map(|t| i64::try_from(t).unwrap_or(i64::MAX));
    conn.prepare_cached("UPDATE sessions SET ttl_ms = ?2, expires_at = ?3 WHERE sid = ?1")
        .map_err(db)?
        .execute(params![sid, ttl, expiry.expires_at])
        .map_err(db)?;
    Ok(())
}

/// How often (store clock) a write deletes sessions whose deadline passed
/// (often enough that a file under a steady load stops growing: the pages
/// go back to the free list before new sessions need them),
/// and how many at most per write: few enough that no write waits long for
/// it; after a full batch the next write goes on, so any rate of expiry is
/// kept up with (EX5).
const EXPIRY_EVERY_MS: i64 = 100;
const EXPIRY_BATCH: usize = 256;

/// EX5: now and then a write is preceded by a deletion of expired sessions,
/// queued just before it as an operation of its own (so that its outcome
/// does not depend on the write's); reads and writes leave out the
/// sessions it has not reached. One caller per period queues it; `last`
/// is when (store clock) it was last queued.
pub fn queue_expiry(writer: &Writer, clock: &Arc<dyn Clock>, last: &Arc<AtomicI64>) {
    let now = clock.now_ms();
    let then = last.load(Ordering::Relaxed);
    let due = now >= then.saturating_add(EXPIRY_EVERY_MS) || now < then;
    if !due
        || last
            .compare_exchange(then, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let (clock, last) = (clock.clone(), last.clone());
    writer.enqueue(move |conn, effects| {
        // A full batch may leave more: the next write goes on.
        if expire(conn, effects, clock.now_ms(), EXPIRY_BATCH)? == EXPIRY_BATCH {
            last.store(i64::MIN, Ordering::Relaxed);
        }
        Ok(())
    });
}

/// EX5: deletes up to `limit` sessions whose deadline passed at `now`, as
/// `clear` would (presence aside), found through the index
/// `sessions_deadline`. Returns how many it deleted.
pub fn expire(
    conn: &Connection,
    effects: &mut Effects,
    now: Millis,
    limit: usize,
) -> Result<usize> {
    let names: Vec<String> = conn
        .prepare_cached(&format!(
            "SELECT name FROM sessions
             WHERE (ttl_ms IS NOT NULL OR expires_at IS NOT NULL) AND {DEADLINE} <= ?1
             ORDER BY {DEADLINE} LIMIT ?2"
        ))
        .map_err(db)?
        .query_map(
            params![now, i64::try_from(limit).unwrap_or(i64::MAX)],
            |row| row.get(0),
        )
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    for name in &names {
        clear::delete(conn, effects, name, false)?;
    }
    Ok(names.len())
}

/// The stored event at `index` of session `sid`.
pub fn event(conn: &Connection, sid: i64, index: u64) -> Result<Option<RawEvent>> {
    let Some(index) = sql_index(index) else {
        return Ok(None);
    };
    conn.prepare_cached(&format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE sid = ?1 AND idx = ?2"
    ))
    .map_err(db)?
    .query_row(params![sid, index], RawEvent::from_row)
    .optional()
    .map_err(db)
}

/// The processing record of one event as loaded for the checks of
/// claims, renewals, completions and failures ([`EventRecord::rules`]
/// lends it to the rules), and its lane.
struct EventRecord {
    attempt_count: u32,
    processed_at: Option<Millis>,
    processed_by_attempt: Option<u32>,
    returned_ids: Vec<String>,
    claim_holder: Option<String>,
    claim_expires_at: Option<Millis>,
    failure_count: u32,
    last_failed_attempt: Option<u32>,
    failed_at: Option<Millis>,
    cancelled_at: Option<Millis>,
    retry_at: Option<Millis>,
    lane: Option<String>,
}

impl EventRecord {
    /// What the rules read of it.
    fn rules(&self) -> a2_core::rules::Record<'_> {
        a2_core::rules::Record {
            attempt_count: self.attempt_count,
            processed_at: self.processed_at,
            processed_by_attempt: self.processed_by_attempt,
            returned_event_ids: &self.returned_ids,
            claim_holder: self.claim_holder.as_deref(),
            claim_expires_at: self.claim_expires_at,
            retry_at: self.retry_at,
            failure_count: self.failure_count,
            last_failed_attempt: self.last_failed_attempt,
            failed_at: self.failed_at,
            cancelled_at: self.cancelled_at,
        }
    }
}

/// The live session `name` and the processing record of its event
/// `index` (CN4, RV1): an unknown session or index is out of range, a
/// trimmed one `Trimmed`.
fn event_of(
    conn: &Connection,
    name: &str,
    index: u64,
    now: Millis,
) -> Result<(SessionRow, EventRecord)> {
    let Some(current) = session(conn, name, now)? else {
        return Err(rules::read::no_event(name, index, 1, 0));
    };
    match record(conn, current.sid, index)? {
        Some(rec) => Ok((current, rec)),
        None => Err(rules::read::no_event(
            name,
            index,
            current.first_index,
            current.frontier,
        )),
    }
}

/// The processing record of one event, without its payload (no JSON to
/// parse for a check).
fn record(conn: &Connection, sid: i64, index: u64) -> Result<Option<EventRecord>> {
    let Some(index) = sql_index(index) else {
        return Ok(None);
    };
    type Raw = (
        i64,
        Option<Millis>,
        Option<i64>,
        Option<String>,
        Option<String>,
        Option<Millis>,
        i64,
        Option<i64>,
        Option<Millis>,
        Option<String>,
        Option<Millis>,
        Option<Millis>,
    );
    let raw: Option<Raw> = conn
        .prepare_cached(
            "SELECT attempt_count, processed_at, processed_by_attempt, returned_ids,
                claim_holder, claim_expires_at, failure_count, last_failed_attempt,
                failed_at, lane, cancelled_at, retry_at
             FROM events WHERE sid = ?1 AND idx = ?2",
        )
        .map_err(db)?
        .query_row(params![sid, index], |row| Raw::try_from(row))
        .optional()
        .map_err(db)?;
    let Some(raw) = raw else {
        return Ok(None);
    };
    let attempt = |value: i64| {
        u32::try_from(value).map_err(|_| corrupt(format!("attempt number {value} out of range")))
    };
    let returned_ids = match raw.3 {
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| corrupt(format!("returned ids do not parse: {e}")))?,
        None => Vec::new(),
    };
    Ok(Some(EventRecord {
        attempt_count: attempt(raw.0)?,
        processed_at: raw.1,
        processed_by_attempt: raw.2.map(attempt).transpose()?,
        returned_ids,
        claim_holder: raw.4,
        claim_expires_at: raw.5,
        failure_count: attempt(raw.6)?,
        last_failed_attempt: raw.7.map(attempt).transpose()?,
        failed_at: raw.8,
        cancelled_at: raw.10,
        retry_at: raw.11,
        lane: raw.9,
    }))
}

/// Puts a ready event in the ready set its fields call for: a held lease
/// or a retry time makes it due then, else it is free.
fn reslot(conn: &Connection, sid: i64, index: i64) -> Result<()> {
    conn.prepare_cached(
        "UPDATE events SET
            due_at = CASE WHEN claim_holder IS NOT NULL AND claim_expires_at IS NOT NULL
                          THEN claim_expires_at ELSE retry_at END,
            free = CASE WHEN (claim_holder IS NOT NULL AND claim_expires_at IS NOT NULL)
                             OR retry_at IS NOT NULL
                        THEN NULL ELSE 1 END
         WHERE sid = ?1 AND idx = ?2",
    )
    .map_err(db)?
    .execute(params![sid, index])
    .map_err(db)?;
    Ok(())
}

/// The look at the first events of a session's tail for a free one, with
/// `free = TAIL_FREE` written out: a parameter compared with `free`, the
/// column of `events_free`'s condition, makes SQLite prepare the statement
/// again at every run to see whether the index applies (three times the
/// look's cost; it was a quarter of an append's time in the writer).
const TAIL_LOOK_SQL: &str =
    "SELECT 1 FROM events WHERE sid = ?1 AND idx >= ?2 AND idx < ?3 AND free = 2";

/// PS2: whether something of session `s` is claimable at `now`: a free
/// event (`events_free`), a lease or retry time come due (`events_due`), or
/// a free event among the first of its tail. A tail longer than that look
/// whose first events are not free counts as nothing claimable: the
/// append that asks then announces, which costs a worker one claim at
/// most (and that claim moves the tail's start past them).
fn claimable_now(conn: &Connection, s: &SessionRow, now: Millis) -> Result<bool> {
    /// How many events of the tail the look steps over.
    const TAIL_LOOK: i64 = 64;
    let exists = |sql: &str, args: &[&dyn rusqlite::ToSql]| -> Result<bool> {
        conn.prepare_cached(sql)
            .map_err(db)?
            .exists(args)
            .map_err(db)
    };
    // The tail first: an append to a session whose earlier lane-less
    // events wait unclaimed (the common case) answers with one look, not
    // three.
    Ok(exists(
        TAIL_LOOK_SQL,
        &[&s.sid, &s.tail_from, &s.tail_from.saturating_add(TAIL_LOOK)],
    )? || exists(
        "SELECT 1 FROM events WHERE sid = ?1 AND free = 1",
        &[&s.sid],
    )? || exists(
        "SELECT 1 FROM events WHERE sid = ?1 AND due_at IS NOT NULL AND due_at <= ?2",
        &[&s.sid, &now],
    )?)
}

/// Records a write at `now` (`updated_at` never goes back) and adds to the
/// session's counters.
fn bump(conn: &Connection, sid: i64, now: Millis, counts: Counts) -> Result<()> {
    conn.prepare_cached(
        "UPDATE sessions SET
            pending_count = pending_count + ?2,
            failed_count = failed_count + ?3,
            attempt_count = attempt_count + ?4,
            failure_count = failure_count + ?5,
            updated_at = max(updated_at, ?6)
         WHERE sid = ?1",
    )
    .map_err(db)?
    .execute(params![
        sid,
        counts.pending,
        counts.failed,
        counts.attempts,
        counts.failures,
        now
    ])
    .map_err(db)?;
    Ok(())
}

#[derive(Default, Clone, Copy)]
struct Counts {
    pending: i64,
    failed: i64,
    attempts: i64,
    failures: i64,
}

/// The index of the event with id `id` in session `sid`, if any (A4: ids
/// are unique within their session only, so other sessions do not count).
/// One look-up in the unique index `events_by_id (sid, id)`.
fn index_of_id(conn: &Connection, sid: i64, id: &str) -> Result<Option<u64>> {
    let index: Option<i64> = conn
        .prepare_cached("SELECT idx FROM events WHERE sid = ?1 AND id = ?2")
        .map_err(db)?
        .query_row(params![sid, id], |row| row.get(0))
        .optional()
        .map_err(db)?;
    index.map(to_u64).transpose()
}

/// The row at `index`, which the caller knows exists (the id index or a
/// record named it): its absence is a broken log (E1).
fn event_or_gone(conn: &Connection, name: &str, sid: i64, index: u64) -> Result<StoredEvent> {
    event(conn, sid, index)?
        .ok_or_else(|| rules::read::missing(name, index))?
        .into_stored(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::StatementStatus;

    /// The tail look runs as prepared: were `free` compared with a
    /// parameter, SQLite would prepare it again at every run (to see
    /// whether `events_free`'s condition holds for the value bound).
    #[test]
    fn the_tail_look_is_prepared_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a2.db");
        let conn = crate::schema::connect(&path, std::time::Duration::from_secs(1)).unwrap();
        crate::schema::prepare(&conn, &path, std::time::Duration::from_secs(1)).unwrap();

        assert!(TAIL_LOOK_SQL.ends_with(&format!("free = {TAIL_FREE}")));
        let mut stmt = conn.prepare(TAIL_LOOK_SQL).unwrap();
        for from in 1..10_i64 {
            assert!(!stmt.exists(params![1, from, from + 64]).unwrap());
        }
        assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0);
    }
}
