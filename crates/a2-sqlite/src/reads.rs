//! The reads, each a function over a read connection inside one read
//! transaction (see `readers`).

use a2_core::feed::LogPage;
use a2_core::rules;
use a2_core::*;
use rusqlite::{Connection, OptionalExtension, params};

use crate::ops::session;
use crate::rows::{EVENT_COLUMNS, RawEvent, db, json, sql_bound, to_u64};
use crate::schema::DEADLINE;

/// Stored events of session `sid` with `after < index ≤ through`, at most
/// `limit`, in index order. One range scan of the primary key.
pub fn rows(
    conn: &Connection,
    name: &str,
    sid: i64,
    after: u64,
    through: u64,
    limit: usize,
) -> Result<Vec<StoredEvent>> {
    raw_rows(conn, name, sid, after, through, limit)?
        .into_iter()
        .map(|raw| raw.into_stored(name))
        .collect()
}

/// The rows of `sid` (named `name`) with `after < index ≤ through` (at or
/// below its frontier), at most `limit`: every one of them, or `Corrupted`
/// naming the first that is missing (E1), never a log with a hole read as
/// if nothing were missing.
fn raw_rows(
    conn: &Connection,
    name: &str,
    sid: i64,
    after: u64,
    through: u64,
    limit: usize,
) -> Result<Vec<RawEvent>> {
    if through <= after || limit == 0 {
        return Ok(Vec::new());
    }
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {EVENT_COLUMNS} FROM events
             WHERE sid = ?1 AND idx > ?2 AND idx <= ?3 ORDER BY idx LIMIT ?4"
        ))
        .map_err(db)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt
        .query_map(
            params![sid, sql_bound(after), sql_bound(through), limit],
            RawEvent::from_row,
        )
        .map_err(db)?;
    let rows = rows.collect::<rusqlite::Result<Vec<_>>>().map_err(db)?;
    let mut gapless = rules::read::Gapless::after(name, after);
    for row in &rows {
        gapless.next(to_u64(row.index())?)?;
    }
    let wanted = u64::try_from(limit).unwrap_or(u64::MAX);
    gapless.reached(through.min(after.saturating_add(wanted)))?;
    Ok(rows)
}

/// The immutable events of `name` after `after`, at most `limit`, or
/// `Trimmed` when some of them were trimmed away (TR3).
pub fn events_after(
    conn: &Connection,
    name: &str,
    after: u64,
    limit: usize,
    now: Millis,
) -> Result<Vec<Event>> {
    let Some(current) = session(conn, name, now)? else {
        return Ok(Vec::new());
    };
    rules::lifecycle::check_retained(name, current.first_index, after)?;
    raw_rows(conn, name, current.sid, after, current.frontier, limit)?
        .into_iter()
        .map(|raw| raw.into_event(name))
        .collect()
}

/// A live feed's read of `name` after `after`, at most `limit` events;
/// with `check`, starting at the event at `after` itself (ST6) when it is
/// still retained. `Trimmed` when the events after `after` were trimmed
/// (TR3).
pub fn feed_read(
    conn: &Connection,
    name: &str,
    after: u64,
    check: bool,
    limit: usize,
    now: Millis,
) -> Result<LogPage> {
    let Some(current) = session(conn, name, now)? else {
        return Ok(LogPage {
            events: Vec::new(),
            checked: check,
            closed: None,
            deadline: None,
        });
    };
    rules::lifecycle::check_retained(name, current.first_index, after)?;
    let checked = check && after >= current.first_index;
    let from = if checked { after - 1 } else { after };
    let events = raw_rows(conn, name, current.sid, from, current.frontier, limit)?
        .into_iter()
        .map(|raw| raw.into_event(name))
        .collect::<Result<_>>()?;
    Ok(LogPage {
        events,
        checked,
        closed: current.closed.map(|(frontier, _)| frontier),
        deadline: current.deadline,
    })
}

/// R1.
pub fn read(
    conn: &Connection,
    name: &str,
    range: ReadRange,
    now: Millis,
) -> Result<Vec<StoredEvent>> {
    let Some(current) = session(conn, name, now)? else {
        return Ok(Vec::new());
    };
    let (after, through) = rules::read::span(name, current.first_index, current.frontier, range)?;
    rows(conn, name, current.sid, after, through, usize::MAX)
}

/// R2.
pub fn read_history(
    conn: &Connection,
    name: &str,
    options: HistoryOptions,
    now: Millis,
) -> Result<HistoryPage> {
    let Some(current) = session(conn, name, now)? else {
        return Ok(HistoryPage::empty());
    };
    let through = match options.before_index {
        Some(before) => before.saturating_sub(1).min(current.frontier),
        None => current.frontier,
    };
    let limit = u64::try_from(options.limit).unwrap_or(u64::MAX);
    // TR3: a page reaches back at most to the first retained event.
    let first = current.first_index;
    let after = through.saturating_sub(limit).max(first - 1);
    Ok(HistoryPage {
        events: rows(conn, name, current.sid, after, through, options.limit)?,
        has_more: after + 1 > first,
        first_index: first,
    })
}

/// I2.
pub fn read_events(
    conn: &Connection,
    name: &str,
    options: ReadEventsOptions,
    now: Millis,
) -> Result<EventsPage> {
    let Some(current) = session(conn, name, now)? else {
        return Ok(EventsPage::empty());
    };
    rules::lifecycle::check_retained(name, current.first_index, options.after_index)?;
    let through = options
        .through_index
        .unwrap_or(current.frontier)
        .min(current.frontier);
    Ok(EventsPage {
        events: rows(
            conn,
            name,
            current.sid,
            options.after_index,
            through,
            options.limit,
        )?,
        through_index: through,
    })
}

/// PS1: a range scan of the partial index `sessions_pending`.
pub fn pending_sessions(conn: &Connection, page: &PageRequest, now: Millis) -> Result<SessionPage> {
    // EX3: an expired session is not pending.
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT name FROM sessions WHERE pending_count > 0 AND name > ?1 AND {DEADLINE} > ?3
             ORDER BY name LIMIT ?2"
        ))
        .map_err(db)?;
    let take = i64::try_from(page.limit.saturating_add(1)).unwrap_or(i64::MAX);
    // The empty string sorts before every session id (which is non-empty).
    let start = page.cursor.as_deref().unwrap_or("");
    let mut sessions = stmt
        .query_map(params![start, take, now], |row| row.get::<_, String>(0))
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;
    let more = sessions.len() > page.limit;
    sessions.truncate(page.limit);
    let cursor = if more { sessions.last().cloned() } else { None };
    Ok(SessionPage { sessions, cursor })
}

/// I1: a range scan of `sessions` by name from the cursor or prefix,
/// stopping at the first name outside the prefix.
pub fn list_sessions(
    conn: &Connection,
    options: &ListSessionsOptions,
    now: Millis,
) -> Result<SessionList> {
    let prefix = options.prefix.as_deref().unwrap_or("");
    let (sql, start) = match options.cursor.as_deref() {
        Some(cursor) if cursor >= prefix => ("name > ?1", cursor),
        _ => ("name >= ?1", prefix),
    };
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT name, frontier, pending_count, failed_count, attempt_count, failure_count,
                first_event_at, updated_at, first_index, closed_at, {DEADLINE},
                forked_from, forked_index
             FROM sessions WHERE {sql} AND {DEADLINE} > ?2 ORDER BY name"
        ))
        .map_err(db)?;
    // EX3: an expired session is not listed.
    let mut rows = stmt.query(params![start, now]).map_err(db)?;
    let mut sessions = Vec::new();
    let mut more = false;
    while let Some(row) = rows.next().map_err(db)? {
        let name: String = row.get(0).map_err(db)?;
        if !name.starts_with(prefix) {
            break;
        }
        if sessions.len() == options.limit {
            more = true;
            break;
        }
        let count = |i: usize| -> Result<u64> { to_u64(row.get(i).map_err(db)?) };
        sessions.push(SessionSummary {
            event_count: count(1)?,
            pending_count: count(2)?,
            failed_count: count(3)?,
            attempt_count: count(4)?,
            failure_count: count(5)?,
            first_event_at: row.get(6).map_err(db)?,
            updated_at: row.get(7).map_err(db)?,
            // TR5, CL5.
            first_index: count(8)?,
            closed_at: row.get(9).map_err(db)?,
            deadline: Some(row.get::<_, Millis>(10).map_err(db)?).filter(|d| *d != Millis::MAX),
            // FK5.
            forked_from: match row.get::<_, Option<String>>(11).map_err(db)? {
                Some(session) => Some(ForkOrigin {
                    session,
                    index: count(12)?,
                }),
                None => None,
            },
            session_id: name,
        });
    }
    let cursor = if more {
        sessions.last().map(|s| s.session_id.clone())
    } else {
        None
    };
    Ok(SessionList { sessions, cursor })
}

/// S1: the snapshot and the events after it, in the caller's one read
/// transaction.
pub fn read_state(conn: &Connection, name: &str, reducer: &str, now: Millis) -> Result<StateRead> {
    let snapshot = conn
        .prepare_cached("SELECT idx, state FROM snapshots WHERE session = ?1 AND reducer = ?2")
        .map_err(db)?
        .query_row(params![name, reducer], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
        })
        .optional()
        .map_err(db)?
        .map(|(index, state)| -> Result<Snapshot> {
            Ok(Snapshot {
                index: to_u64(index)?,
                state: json(&state)?,
            })
        })
        .transpose()?;
    let after = snapshot.as_ref().map_or(0, |s| s.index);
    Ok(StateRead {
        events: events_after(conn, name, after, usize::MAX, now)?,
        snapshot,
    })
}

/// I3.
pub fn list_snapshots(conn: &Connection, name: &str, now: Millis) -> Result<Vec<SnapshotInfo>> {
    // EX3: an expired session's snapshots are gone with it.
    let expired = crate::ops::session_row(conn, name)?
        .is_some_and(|s| rules::lifecycle::expired(s.deadline, now));
    if expired {
        return Ok(Vec::new());
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT reducer, idx, updated_at FROM snapshots WHERE session = ?1 ORDER BY reducer",
        )
        .map_err(db)?;
    let rows = stmt
        .query_map([name], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?, row.get(2)?))
        })
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;
    rows.into_iter()
        .map(|(reducer, index, updated_at)| {
            Ok(SnapshotInfo {
                reducer,
                index: to_u64(index)?,
                updated_at,
            })
        })
        .collect()
}

/// P3 on a read connection: the live entries of `ns` by participant then
/// field, and whether expired ones remain to prune.
pub fn presence(conn: &Connection, ns: &str, now: Millis) -> Result<(Vec<PresenceEntry>, bool)> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT participant, field, value, seen, at, expires_at FROM presence
             WHERE ns = ?1 ORDER BY participant, field",
        )
        .map_err(db)?;
    let rows = stmt
        .query_map([ns], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, Millis>(4)?,
                row.get::<_, Millis>(5)?,
            ))
        })
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;
    let mut expired = false;
    let mut entries = Vec::with_capacity(rows.len());
    for (participant, field, value, seen, at, expires_at) in rows {
        if expires_at <= now {
            expired = true;
            continue;
        }
        entries.push(PresenceEntry {
            participant,
            field,
            value: json(&value)?,
            seen,
            at,
            expires_at,
        });
    }
    Ok((entries, expired))
}
