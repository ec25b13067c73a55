//! The writes, each a function over the write connection inside the
//! writer's transaction (and the operation's savepoint). They mirror the
//! memory store's operations rule by rule; the readiness bookkeeping that
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

use std::collections::{BTreeMap, BTreeSet};

use a2_core::*;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use crate::rows::{EVENT_COLUMNS, RawEvent, corrupt, db, json_text, sql_index, to_u64};
use crate::writer::Effects;

/// A session's row in `sessions`.
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub sid: i64,
    pub frontier: u64,
    pub pending_count: i64,
}

/// The session named `name`, if it has events.
pub fn session(conn: &Connection, name: &str) -> Result<Option<SessionRow>> {
    let row = conn
        .prepare_cached("SELECT sid, frontier, pending_count FROM sessions WHERE name = ?1")
        .map_err(db)?
        .query_row([name], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get(2)?))
        })
        .optional()
        .map_err(db)?;
    row.map(|(sid, frontier, pending_count)| {
        Ok(SessionRow {
            sid,
            frontier: to_u64(frontier)?,
            pending_count,
        })
    })
    .transpose()
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

/// The processing state of one event, for the checks of claims, renewals,
/// completions and failures.
struct Record {
    attempt_count: u32,
    processed_at: Option<Millis>,
    processed_by_attempt: Option<u32>,
    returned_ids: Vec<String>,
    claim_holder: Option<String>,
    claim_expires_at: Option<Millis>,
    failure_count: u32,
    last_failed_attempt: Option<u32>,
    failed_at: Option<Millis>,
    lane: Option<String>,
}

impl Record {
    fn is_pending(&self) -> bool {
        self.processed_at.is_none() && self.failed_at.is_none()
    }
}

/// The processing record of one event, without its payload (no JSON to
/// parse for a check).
fn record(conn: &Connection, sid: i64, index: u64) -> Result<Option<Record>> {
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
    );
    let raw: Option<Raw> = conn
        .prepare_cached(
            "SELECT attempt_count, processed_at, processed_by_attempt, returned_ids,
                claim_holder, claim_expires_at, failure_count, last_failed_attempt,
                failed_at, lane
             FROM events WHERE sid = ?1 AND idx = ?2",
        )
        .map_err(db)?
        .query_row(params![sid, index], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
                row.get(6)?,
                row.get(7)?,
                row.get(8)?,
                row.get(9)?,
            ))
        })
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
    Ok(Some(Record {
        attempt_count: attempt(raw.0)?,
        processed_at: raw.1,
        processed_by_attempt: raw.2.map(attempt).transpose()?,
        returned_ids,
        claim_holder: raw.4,
        claim_expires_at: raw.5,
        failure_count: attempt(raw.6)?,
        last_failed_attempt: raw.7.map(attempt).transpose()?,
        failed_at: raw.8,
        lane: raw.9,
    }))
}

fn out_of_range(session: &str, index: u64, frontier: u64) -> Error {
    Error::invalid(format!(
        "index {index} is outside 1..={frontier} of session {session:?}"
    ))
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
fn index_of_id(conn: &Connection, sid: i64, id: &str) -> Result<Option<i64>> {
    conn.prepare_cached("SELECT idx FROM events WHERE sid = ?1 AND id = ?2")
        .map_err(db)?
        .query_row(params![sid, id], |row| row.get(0))
        .optional()
        .map_err(db)
}

/// What [`insert_events`] wrote.
struct Inserted {
    /// The new rows, in index order.
    rows: Vec<StoredEvent>,
    /// The session's frontier after them.
    frontier: u64,
    /// The session's `sid` (new on its first event).
    sid: i64,
    /// The positions in `rows` of the events ready at once (free: pending
    /// and lane-less, or first pending in their lane), ascending.
    free: Vec<usize>,
}

/// Inserts already-validated events with their final ids after the
/// session's frontier (A1, A8, A9, A11, CO2): settled ones processed, the
/// others pending and, when lane-less or first in their lane, free.
/// Creates the session row on its first event.
fn insert_events(
    conn: &Connection,
    name: &str,
    existing: Option<&SessionRow>,
    events: Vec<NewEvent>,
    cause: Option<Cause>,
    now: Millis,
) -> Result<Inserted> {
    let (sid, mut frontier) = match existing {
        Some(s) => (s.sid, s.frontier),
        None => {
            let sid: i64 = conn
                .prepare_cached(
                    "INSERT INTO sessions (name, frontier, pending_count, failed_count,
                        attempt_count, failure_count, first_event_at, updated_at)
                     VALUES (?1, 0, 0, 0, 0, 0, ?2, ?2) RETURNING sid",
                )
                .map_err(db)?
                .query_row(params![name, now], |row| row.get(0))
                .map_err(db)?;
            (sid, 0)
        }
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
                cause_attempt, cause_batch, processed_at, free)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
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
        frontier,
        sid,
        free: ready,
    })
}

/// The id of an event that went through id assignment.
fn final_id(event: &NewEvent) -> &str {
    event.id.as_deref().unwrap_or_default()
}

/// A1–A11 (validated input with final ids); with a `claim`, AC1–AC4 too
/// (a validated lease and a capped limit): in the same transaction, the
/// appended events that are ready at once are leased to the claim's
/// holder, as `claim` leases them (C2), up to its limit.
pub fn append(
    conn: &Connection,
    effects: &mut Effects,
    name: &str,
    events: Vec<NewEvent>,
    claim: Option<&AppendClaim>,
    now: Millis,
) -> Result<AppendOutcome> {
    // AC1: the lease is checked as a claim's is, before anything is written.
    let lease = match claim {
        Some(claim) => Some((claim, validate::claim_expiry(claim.lease, now)?)),
        None => None,
    };
    let current = session(conn, name)?;
    if events.is_empty() {
        // A2, AC3.
        return Ok(AppendOutcome {
            events: Vec::new(),
            has_pending: current.as_ref().is_some_and(|s| s.pending_count > 0),
            claimed: Vec::new(),
        });
    }
    // A5 / A6 (A4: only this session's ids count).
    let mut existing = Vec::new();
    if let Some(current) = &current {
        for id in events.iter().map(final_id) {
            if let Some(index) = index_of_id(conn, current.sid, id)? {
                existing.push(to_u64(index)?);
            }
        }
    }
    if let Some(current) = &current
        && !existing.is_empty()
        && existing.len() == events.len()
    {
        return retry_rows(conn, name, current, &events, &existing);
    }
    if !existing.is_empty() {
        return Err(Error::duplicate(format!(
            "{} of the {} ids of the batch already exist",
            existing.len(),
            events.len()
        )));
    }
    // A7.
    for (position, event) in events.iter().enumerate() {
        let Some(cause) = event.cause else {
            continue;
        };
        let rec = match &current {
            Some(s) => record(conn, s.sid, cause.index)?,
            None => None,
        };
        let Some(rec) = rec else {
            return Err(Error::invalid(format!(
                "event {position}: cause index {} does not exist in session {name:?}",
                cause.index
            )));
        };
        if rec.attempt_count != cause.attempt || rec.failed_at.is_some() {
            return Err(Error::superseded(format!(
                "event {position}: attempt {} of index {} is not the current attempt",
                cause.attempt, cause.index
            )));
        }
    }
    let before = current.as_ref().map_or(0, |s| s.pending_count);
    let Inserted {
        mut rows,
        frontier,
        sid,
        free,
    } = insert_events(conn, name, current.as_ref(), events, None, now)?;
    effects.frontiers.push((name.to_owned(), frontier));
    let has_pending = before > 0 || rows.iter().any(StoredEvent::is_pending);
    // AC2: only the appended events, never the session's earlier ones.
    let mut claimed = Vec::new();
    if let Some((claim, expires_at)) = lease {
        let positions = &free[..free.len().min(claim.limit)];
        let indexes = positions
            .iter()
            .map(|&at| sql_index(rows[at].event.index).unwrap_or(i64::MAX));
        let leased = lease_events(conn, sid, name, indexes, &claim.holder, expires_at, now)?;
        for (&at, row) in positions.iter().zip(leased) {
            claimed.push(row.event.index);
            rows[at] = row;
        }
    }
    Ok(AppendOutcome {
        events: rows,
        has_pending,
        claimed,
    })
}

/// A5: every id exists in this session; the batch is a retry if each event
/// has the stored type and payload. Returns the stored rows by index.
fn retry_rows(
    conn: &Connection,
    name: &str,
    current: &SessionRow,
    events: &[NewEvent],
    existing: &[u64],
) -> Result<AppendOutcome> {
    let mut rows = Vec::with_capacity(events.len());
    for (event, &index) in events.iter().zip(existing) {
        let row = event_or_gone(conn, current.sid, index)?.into_stored(name)?;
        if row.event.event_type != event.event_type || row.event.payload != event.payload {
            return Err(Error::duplicate(format!(
                "id {:?} exists with another type or payload",
                final_id(event)
            )));
        }
        rows.push(row);
    }
    rows.sort_by_key(|r| r.event.index);
    Ok(AppendOutcome {
        events: rows,
        has_pending: current.pending_count > 0,
        claimed: Vec::new(),
    })
}

fn event_or_gone(conn: &Connection, sid: i64, index: u64) -> Result<RawEvent> {
    event(conn, sid, index)?.ok_or_else(|| {
        Error::unavailable(format!("the id index names index {index}, which is gone"))
    })
}

/// C1–C5 (validated request).
pub fn claim(conn: &Connection, request: &ClaimRequest, now: Millis) -> Result<ClaimOutcome> {
    let expires_at = validate::claim_expiry(request.lease, now)?;
    let Some(current) = session(conn, &request.session)? else {
        return Ok(ClaimOutcome::Settled);
    };
    if current.pending_count <= 0 {
        return Ok(ClaimOutcome::Settled);
    }
    let sid = current.sid;
    // Leases and retry times that have come due: their events are free.
    conn.prepare_cached(
        "UPDATE events SET free = 1, due_at = NULL
         WHERE sid = ?1 AND due_at IS NOT NULL AND due_at <= ?2",
    )
    .map_err(db)?
    .execute(params![sid, now])
    .map_err(db)?;
    let exclude: BTreeSet<i64> = request
        .exclude_indexes
        .iter()
        .filter_map(|&i| sql_index(i))
        .collect();
    let mut picked = Vec::new();
    let mut not_yet = Vec::new();
    {
        let mut stmt = conn
            .prepare_cached(
                "SELECT idx, claim_holder IS NOT NULL, claim_expires_at, retry_at FROM events
                 WHERE sid = ?1 AND free IS NOT NULL ORDER BY idx",
            )
            .map_err(db)?;
        let mut rows = stmt.query([sid]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let index: i64 = row.get(0).map_err(db)?;
            if exclude.contains(&index) {
                continue;
            }
            let held: bool = row.get(1).map_err(db)?;
            let expires: Option<Millis> = row.get(2).map_err(db)?;
            let retry: Option<Millis> = row.get(3).map_err(db)?;
            let at = match (held, expires) {
                (true, Some(at)) => Some(at),
                _ => retry,
            };
            // Only after the clock was moved backward can a free event hold
            // a lease or retry time still in the future.
            if at.is_some_and(|at| at > now) {
                not_yet.push(index);
                continue;
            }
            picked.push(index);
            if picked.len() == request.limit {
                break;
            }
        }
    }
    for index in not_yet {
        reslot(conn, sid, index)?;
    }
    if picked.is_empty() {
        let mut stmt = conn
            .prepare_cached(
                "SELECT due_at, idx FROM events
                 WHERE sid = ?1 AND due_at IS NOT NULL ORDER BY due_at, idx",
            )
            .map_err(db)?;
        let mut rows = stmt.query([sid]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let index: i64 = row.get(1).map_err(db)?;
            if !exclude.contains(&index) {
                return Ok(ClaimOutcome::Busy {
                    retry_at: row.get(0).map_err(db)?,
                });
            }
        }
        return Ok(ClaimOutcome::Settled);
    }
    let claimed = lease_events(
        conn,
        sid,
        &request.session,
        picked,
        &request.holder,
        expires_at,
        now,
    )?;
    Ok(ClaimOutcome::Claimed(claimed))
}

/// C2's write, shared by `claim` and `append` with a claim (AC2): leases
/// each event at `indexes` (ready ones of session `sid`, named `name`) to
/// `holder` until `expires_at`: `attempt_count + 1`, `first_claimed_at` set
/// once, `last_claimed_at = now`, no retry time, and due again when the
/// lease runs out. Counts the attempts on the session. Returns the leased
/// rows, in the order of `indexes`.
fn lease_events(
    conn: &Connection,
    sid: i64,
    name: &str,
    indexes: impl IntoIterator<Item = i64>,
    holder: &str,
    expires_at: Millis,
    now: Millis,
) -> Result<Vec<StoredEvent>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "UPDATE events SET attempt_count = attempt_count + 1,
                first_claimed_at = coalesce(first_claimed_at, ?3), last_claimed_at = ?3,
                claim_holder = ?4, claim_expires_at = ?5, retry_at = NULL,
                free = NULL, due_at = ?5
             WHERE sid = ?1 AND idx = ?2 RETURNING {EVENT_COLUMNS}"
        ))
        .map_err(db)?;
    let mut leased = Vec::new();
    for index in indexes {
        let raw = stmt
            .query_row(
                params![sid, index, now, holder, expires_at],
                RawEvent::from_row,
            )
            .map_err(db)?;
        leased.push(raw.into_stored(name)?);
    }
    if !leased.is_empty() {
        bump(
            conn,
            sid,
            now,
            Counts {
                attempts: i64::try_from(leased.len()).unwrap_or(i64::MAX),
                ..Counts::default()
            },
        )?;
    }
    Ok(leased)
}

/// RN1–RN3 (validated request).
pub fn renew(conn: &Connection, request: &RenewRequest, now: Millis) -> Result<RenewOutcome> {
    let expires_at = request.lease.expires_at(now);
    let Some(current) = session(conn, &request.session)? else {
        return Ok(RenewOutcome::default());
    };
    let mut renewed = BTreeSet::new();
    let mut superseded = BTreeSet::new();
    for claim in &request.claims {
        let Some(rec) = record(conn, current.sid, claim.index)? else {
            continue;
        };
        if rec.attempt_count > claim.attempt {
            superseded.insert(claim.index);
            continue;
        }
        let held = rec.attempt_count == claim.attempt
            && rec.is_pending()
            && rec.claim_holder.as_deref() == Some(request.holder.as_str())
            && rec.claim_expires_at.is_some_and(|at| at > now);
        if held && expires_at > now {
            let index = sql_index(claim.index).unwrap_or(i64::MAX);
            conn.prepare_cached(
                "UPDATE events SET claim_expires_at = ?3 WHERE sid = ?1 AND idx = ?2",
            )
            .map_err(db)?
            .execute(params![current.sid, index, expires_at])
            .map_err(db)?;
            reslot(conn, current.sid, index)?;
            renewed.insert(claim.index);
        }
    }
    Ok(RenewOutcome {
        renewed: renewed.into_iter().collect(),
        superseded: superseded.into_iter().collect(),
    })
}

/// CO1–CO6 (validated request, returned events with final ids).
pub fn complete(
    conn: &Connection,
    effects: &mut Effects,
    request: CompleteRequest,
    now: Millis,
) -> Result<CompleteOutcome> {
    let index = request.index;
    let Some(current) = session(conn, &request.session)? else {
        return Err(out_of_range(&request.session, index, 0));
    };
    let Some(rec) = record(conn, current.sid, index)? else {
        return Err(out_of_range(&request.session, index, current.frontier));
    };
    let events = request.events;
    if rec.processed_at.is_some() {
        // CO3 / CO4.
        if rec.processed_by_attempt != Some(request.attempt) {
            return Ok(CompleteOutcome::Superseded);
        }
        let same = rec.returned_ids.len() == events.len()
            && rec
                .returned_ids
                .iter()
                .zip(&events)
                .all(|(a, b)| a == final_id(b));
        if !same {
            return Err(Error::duplicate(format!(
                "index {index} was completed by attempt {} with other returned ids",
                request.attempt
            )));
        }
        let mut rows = Vec::with_capacity(events.len());
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE sid = ?1 AND id = ?2"
            ))
            .map_err(db)?;
        for id in &rec.returned_ids {
            let raw = stmt
                .query_row(params![current.sid, id], RawEvent::from_row)
                .optional()
                .map_err(db)?
                .ok_or_else(|| {
                    Error::unavailable(format!("returned id {id:?} is missing from the log"))
                })?;
            rows.push(raw.into_stored(&request.session)?);
        }
        return Ok(CompleteOutcome::Completed { events: rows });
    }
    // CO5.
    if rec.attempt_count != request.attempt
        || rec.claim_holder.is_none()
        || rec.failed_at.is_some()
        || rec.last_failed_attempt == Some(request.attempt)
    {
        return Ok(CompleteOutcome::Superseded);
    }
    // CO6: returned ids are new in this session.
    for id in events.iter().map(final_id) {
        if index_of_id(conn, current.sid, id)?.is_some() {
            return Err(Error::duplicate(format!(
                "returned id {id:?} already exists"
            )));
        }
    }
    let returned: Vec<&str> = events.iter().map(final_id).collect();
    let returned = if returned.is_empty() {
        None
    } else {
        Some(json_text(&Value::from(returned)))
    };
    let sql_idx = sql_index(index).unwrap_or(i64::MAX);
    conn.prepare_cached(
        "UPDATE events SET processed_at = ?3, processed_by_attempt = ?4, returned_ids = ?5,
            claim_holder = NULL, claim_expires_at = NULL, retry_at = NULL,
            free = NULL, due_at = NULL
         WHERE sid = ?1 AND idx = ?2",
    )
    .map_err(db)?
    .execute(params![
        current.sid,
        sql_idx,
        now,
        request.attempt,
        returned
    ])
    .map_err(db)?;
    bump(
        conn,
        current.sid,
        now,
        Counts {
            pending: -1,
            ..Counts::default()
        },
    )?;
    if let Some(lane) = &rec.lane {
        advance_lane(conn, current.sid, lane, sql_idx)?;
    }
    let cause = Cause {
        index,
        attempt: request.attempt,
        batch_size: request.batch_size,
    };
    let appended = !events.is_empty();
    let current = SessionRow {
        pending_count: current.pending_count - 1,
        ..current
    };
    let inserted = insert_events(
        conn,
        &request.session,
        Some(&current),
        events,
        Some(cause),
        now,
    )?;
    if appended {
        effects
            .frontiers
            .push((request.session.clone(), inserted.frontier));
    }
    Ok(CompleteOutcome::Completed {
        events: inserted.rows,
    })
}

/// After `index` of `lane` was processed: if it was the lane's head, the
/// next pending event of the lane becomes ready (unless dead-lettered,
/// which cannot be: a dead letter only ever heads its lane).
fn advance_lane(conn: &Connection, sid: i64, lane: &str, index: i64) -> Result<()> {
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

/// F1–F6 (validated request).
pub fn fail(conn: &Connection, request: &FailRequest, now: Millis) -> Result<FailOutcome> {
    let index = request.index;
    let Some(current) = session(conn, &request.session)? else {
        return Err(out_of_range(&request.session, index, 0));
    };
    let Some(rec) = record(conn, current.sid, index)? else {
        return Err(out_of_range(&request.session, index, current.frontier));
    };
    let outcome = |outcome| FailOutcome {
        outcome,
        failure_count: rec.failure_count,
    };
    // F2.
    if rec.processed_at.is_some() || rec.attempt_count != request.attempt {
        return Ok(outcome(FailKind::Superseded));
    }
    // F3.
    if rec.failed_at.is_some() {
        return Ok(outcome(FailKind::DeadLettered));
    }
    if rec.claim_holder.is_none() {
        // F4: this attempt already failed (its lease was cleared then);
        // F5: never claimed, or released.
        return Ok(if rec.last_failed_attempt == Some(request.attempt) {
            outcome(FailKind::Failed)
        } else {
            outcome(FailKind::Superseded)
        });
    }
    // F6.
    let failure_count = rec.failure_count + 1;
    let dead = failure_count >= request.max_failures;
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
    Ok(FailOutcome {
        outcome: if dead {
            FailKind::DeadLettered
        } else {
            FailKind::Failed
        },
        failure_count,
    })
}

/// RV1–RV3 (validated session id): a dead-lettered event becomes pending
/// again with no failures, ready at once when lane-less or heading its lane
/// (a dead letter always heads it: only a lane head is claimed, hence
/// failed, and an unprocessed head keeps the lane busy).
pub fn revive(conn: &Connection, name: &str, index: u64, now: Millis) -> Result<ReviveOutcome> {
    let Some(current) = session(conn, name)? else {
        return Err(out_of_range(name, index, 0));
    };
    let Some(rec) = record(conn, current.sid, index)? else {
        return Err(out_of_range(name, index, current.frontier));
    };
    let sql_idx = sql_index(index).unwrap_or(i64::MAX);
    if rec.failed_at.is_none() || rec.processed_at.is_some() {
        let row = event_or_gone(conn, current.sid, index)?.into_stored(name)?;
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
    let row = event_or_gone(conn, current.sid, index)?.into_stored(name)?;
    Ok(ReviveOutcome::Revived(row))
}

/// RL1 (validated request).
pub fn release(conn: &Connection, request: &ReleaseRequest, now: Millis) -> Result<Vec<u64>> {
    let Some(current) = session(conn, &request.session)? else {
        return Ok(Vec::new());
    };
    let mut released = BTreeSet::new();
    for claim in &request.claims {
        let Some(rec) = record(conn, current.sid, claim.index)? else {
            continue;
        };
        let held = rec.attempt_count == claim.attempt
            && rec.is_pending()
            && rec.claim_holder.as_deref() == Some(request.holder.as_str())
            && rec.claim_expires_at.is_some_and(|at| at > now);
        if held {
            let index = sql_index(claim.index).unwrap_or(i64::MAX);
            conn.prepare_cached(
                "UPDATE events SET claim_holder = NULL, claim_expires_at = NULL
                 WHERE sid = ?1 AND idx = ?2",
            )
            .map_err(db)?
            .execute(params![current.sid, index])
            .map_err(db)?;
            reslot(conn, current.sid, index)?;
            released.insert(claim.index);
        }
    }
    Ok(released.into_iter().collect())
}

/// S2 (validated names).
pub fn put_snapshots(
    conn: &Connection,
    name: &str,
    snapshots: Vec<SnapshotWrite>,
    now: Millis,
) -> Result<()> {
    let frontier = session(conn, name)?.map_or(0, |s| s.frontier);
    if let Some(bad) = snapshots.iter().find(|s| s.index > frontier) {
        return Err(Error::invalid(format!(
            "snapshot of {:?} at index {} is beyond the frontier {frontier}",
            bad.reducer, bad.index
        )));
    }
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO snapshots (session, reducer, idx, state, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (session, reducer) DO UPDATE SET
                idx = excluded.idx, state = excluded.state, updated_at = excluded.updated_at
             WHERE excluded.idx > snapshots.idx",
        )
        .map_err(db)?;
    for snapshot in snapshots {
        // Checked against the frontier above, so it fits.
        let index = sql_index(snapshot.index).unwrap_or(i64::MAX);
        stmt.execute(params![
            name,
            snapshot.reducer,
            index,
            json_text(&snapshot.state),
            now
        ])
        .map_err(db)?;
    }
    Ok(())
}

/// P1, P2 (validated input).
pub fn presence_set(
    conn: &Connection,
    effects: &mut Effects,
    ns: &str,
    participant: &str,
    values: BTreeMap<String, Option<Value>>,
    meta: PresenceMeta,
    now: Millis,
) -> Result<Option<PresencePatch>> {
    if values.is_empty() {
        return Ok(None);
    }
    let expires_at = validate::expiry(now, meta.ttl_ms);
    let mut stored = conn
        .prepare_cached(
            "SELECT at, expires_at FROM presence WHERE ns = ?1 AND participant = ?2 AND field = ?3",
        )
        .map_err(db)?;
    let mut delete = conn
        .prepare_cached("DELETE FROM presence WHERE ns = ?1 AND participant = ?2 AND field = ?3")
        .map_err(db)?;
    let mut upsert = conn
        .prepare_cached(
            "INSERT OR REPLACE INTO presence (ns, participant, field, value, seen, at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .map_err(db)?;
    let mut applied = BTreeMap::new();
    for (field, value) in values {
        let existing: Option<(Millis, Millis)> = stored
            .query_row(params![ns, participant, field], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()
            .map_err(db)?;
        // An entry already expired counts as absent.
        if let Some((at, expires)) = existing
            && expires > now
            && at > meta.at
        {
            continue;
        }
        match &value {
            None => {
                delete
                    .execute(params![ns, participant, field])
                    .map_err(db)?;
            }
            Some(value) => {
                upsert
                    .execute(params![
                        ns,
                        participant,
                        field,
                        json_text(value),
                        meta.seen,
                        meta.at,
                        expires_at
                    ])
                    .map_err(db)?;
            }
        }
        applied.insert(field, value);
    }
    if applied.is_empty() {
        return Ok(None);
    }
    let patch = PresencePatch {
        participant: participant.to_owned(),
        values: applied,
        seen: meta.seen,
        at: meta.at,
    };
    effects.patches.push((ns.to_owned(), patch.clone()));
    Ok(Some(patch))
}

/// P3's pruning: deletes the entries of `ns` expired at `now`.
pub fn presence_prune(conn: &Connection, ns: &str, now: Millis) -> Result<()> {
    conn.prepare_cached("DELETE FROM presence WHERE ns = ?1 AND expires_at <= ?2")
        .map_err(db)?
        .execute(params![ns, now])
        .map_err(db)?;
    Ok(())
}

/// I4.
pub fn clear(conn: &Connection, effects: &mut Effects, name: &str) -> Result<()> {
    if let Some(current) = session(conn, name)? {
        conn.prepare_cached("DELETE FROM events WHERE sid = ?1")
            .map_err(db)?
            .execute([current.sid])
            .map_err(db)?;
        conn.prepare_cached("DELETE FROM sessions WHERE sid = ?1")
            .map_err(db)?
            .execute([current.sid])
            .map_err(db)?;
    }
    conn.prepare_cached("DELETE FROM snapshots WHERE session = ?1")
        .map_err(db)?
        .execute([name])
        .map_err(db)?;
    conn.prepare_cached("DELETE FROM presence WHERE ns = ?1")
        .map_err(db)?
        .execute([name])
        .map_err(db)?;
    effects.frontiers.push((name.to_owned(), 0));
    Ok(())
}
