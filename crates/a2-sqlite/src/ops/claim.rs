//! `claim_available` (C1, C2, C3, C4, C5, C7) and the lease it writes
//! (`append_and_claim` writes the same lease as it inserts, see `insert`).

use std::collections::BTreeSet;

use a2_core::*;
use rusqlite::{Connection, params};

use super::*;
use crate::rows::{EVENT_COLUMNS, RawEvent, db, sql_index};

/// C1, C2, C3, C4, C5, C7 (validated request).
pub fn claim(conn: &Connection, request: &ClaimRequest, now: Millis) -> Result<ClaimOutcome> {
    let expires_at = validate::claim_expiry(request.lease, now)?;
    let Some(current) = session(conn, &request.session, now)? else {
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
    let picked = pick_free(conn, &current, &exclude, request.limit, now)?;
    // C3, C7: the earliest time among the leased and waiting events not
    // excluded (those picked are not leased yet).
    let next_at = earliest(conn, sid, &exclude)?;
    if picked.is_empty() {
        // C3, C4.
        return Ok(match next_at {
            Some(retry_at) => ClaimOutcome::Busy { retry_at },
            None => ClaimOutcome::Settled,
        });
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
    Ok(ClaimOutcome::Claimed {
        events: claimed,
        next_at,
    })
}

/// C2's write: leases each event at `indexes` (ready ones of session `sid`, named `name`) to
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

/// C2: the free events of the session that are not excluded and
/// claimable at `now`, in index order, up to `limit`: those indexed in
/// `events_free` (`free = 1`) merged with those of its tail (`free = 2`,
/// at or after `tail_from`). A free event whose lease or retry time is
/// still ahead (only after the clock was moved backward) goes back to its
/// due set. The tail's start moves past what the claim looked at; an
/// excluded event it passes is indexed (`free = 1`), so each event of the
/// tail is stepped over once.
fn pick_free(
    conn: &Connection,
    current: &SessionRow,
    exclude: &BTreeSet<i64>,
    limit: usize,
    now: Millis,
) -> Result<Vec<i64>> {
    let sid = current.sid;
    let mut indexed = Vec::new();
    let mut not_yet = Vec::new();
    {
        let mut stmt = conn
            .prepare_cached(
                "SELECT idx, claim_holder IS NOT NULL, claim_expires_at, retry_at FROM events
                 WHERE sid = ?1 AND free = 1 ORDER BY idx",
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
            if at.is_some_and(|at| at > now) {
                not_yet.push(index);
                continue;
            }
            indexed.push(index);
            if indexed.len() == limit {
                break;
            }
        }
    }
    for index in not_yet {
        reslot(conn, sid, index)?;
    }
    // The tail: written free at append, never leased since (a lease, a
    // settlement or a reslot rewrites `free`), so claimable now.
    let frontier = sql_index(current.frontier).unwrap_or(i64::MAX);
    let mut tail = Vec::new();
    let mut passed = None;
    if current.tail_from <= frontier {
        let mut index_excluded = Vec::new();
        {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT idx, free FROM events WHERE sid = ?1 AND idx >= ?2 ORDER BY idx",
                )
                .map_err(db)?;
            let mut rows = stmt.query(params![sid, current.tail_from]).map_err(db)?;
            while let Some(row) = rows.next().map_err(db)? {
                let index: i64 = row.get(0).map_err(db)?;
                passed = Some(index);
                if row.get::<_, Option<i64>>(1).map_err(db)? != Some(TAIL_FREE) {
                    continue;
                }
                if exclude.contains(&index) {
                    index_excluded.push(index);
                    continue;
                }
                tail.push(index);
                if tail.len() == limit {
                    break;
                }
            }
        }
        // Out of the tail, into the ready set its fields call for (free).
        for index in index_excluded {
            reslot(conn, sid, index)?;
        }
    }
    // Both lists are in index order: the first `limit` of the two.
    let mut picked = Vec::with_capacity(limit.min(indexed.len() + tail.len()));
    let (mut i, mut t) = (0, 0);
    while picked.len() < limit && (i < indexed.len() || t < tail.len()) {
        if t == tail.len() || (i < indexed.len() && indexed[i] < tail[t]) {
            picked.push(indexed[i]);
            i += 1;
        } else {
            picked.push(tail[t]);
            t += 1;
        }
    }
    // The tail now starts at its first event not taken, or after all it
    // passed; the events before it are leased, indexed or not free.
    let tail_from = match tail.get(t) {
        Some(&first_left) => first_left,
        None => passed.map_or(current.tail_from, |last| last + 1),
    };
    if tail_from != current.tail_from {
        conn.prepare_cached("UPDATE sessions SET tail_from = ?2 WHERE sid = ?1")
            .and_then(|mut stmt| stmt.execute(params![sid, tail_from]))
            .map_err(db)?;
    }
    Ok(picked)
}

/// C3, C7: the earliest due time of an event that is not excluded, if any.
fn earliest(conn: &Connection, sid: i64, exclude: &BTreeSet<i64>) -> Result<Option<Millis>> {
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
            return Ok(Some(row.get(0).map_err(db)?));
        }
    }
    Ok(None)
}
