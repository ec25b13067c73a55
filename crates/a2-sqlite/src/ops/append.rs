//! `append` and `append_and_claim` (A1, A2, A3, A4, A5, A6, A7, A8, A9,
//! A10, A11, AC1, AC2, AC3, AC4), with a close (CL6): the decisions are
//! [`rules::append`]'s.

use a2_core::rules;
use a2_core::*;
use rusqlite::Connection;

use super::*;
use crate::effects::Effects;

/// A1, A2, A5, A6, A7, A8, A9, A10 (validated input with final ids, A3,
/// A11); with a `claim`, AC1, AC2, AC3 and AC4 too
/// (a validated lease and a capped limit): in the same transaction, the
/// appended events that are ready at once are leased to the claim's
/// holder, as `claim` leases them (C2), up to its limit.
/// What an append does besides appending: a claim of the new events
/// (AC2), an expiry to set (EX2), and the store's default expiry for a
/// session it creates.
#[derive(Default)]
pub struct Extras<'a> {
    pub claim: Option<&'a AppendClaim>,
    pub expiry: Option<Expiry>,
    pub default_expiry: Option<Expiry>,
    /// The frontier the append expects (A13).
    pub if_frontier: Option<u64>,
    /// Close the session at its new frontier in the same transaction
    /// (CL6).
    pub close: bool,
}

pub fn append(
    conn: &Connection,
    effects: &mut Effects,
    name: &str,
    events: Vec<NewEvent>,
    extras: Extras<'_>,
    now: Millis,
) -> Result<AppendOutcome> {
    let Extras {
        claim,
        expiry,
        default_expiry,
        if_frontier,
        close,
    } = extras;
    // AC1, EX1, DL1: before anything is written.
    let (lease, expiry) = rules::append::times(claim, expiry, &events, now)?;
    let mut current = session_row(conn, name)?;
    let expired = current
        .as_ref()
        .is_some_and(|s| rules::lifecycle::expired(s.deadline, now));
    if expired {
        current = None;
    }
    if events.is_empty() {
        // A2, AC3.
        return Ok(AppendOutcome::nothing(
            current.as_ref().is_some_and(|s| s.pending_count > 0),
        ));
    }
    // A5 / A6 (A4: only this session's ids count). A new session has no
    // ids; in an existing one the lookups are left to the unique index of
    // ids (`events_by_id`), which the insert below consults anyway: only
    // when it refuses an id, or a check fails, is the batch looked up and
    // classified, in the order the rules have (a replay passes CL2, A13
    // and A7; a partial duplicate is refused before them).
    let checks = check(conn, name, current.as_ref(), &events, if_frontier);
    if let Err(error) = checks {
        return match replay(conn, name, current.as_ref(), &events)? {
            Some(replayed) => Ok(replayed),
            None => Err(error),
        };
    }
    // EX2: this append's expiry, or the store's default for a new session.
    let expiry = rules::append::expiry(expiry, default_expiry, current.is_none(), now)?;
    if expired {
        // EX3: an expired session not deleted yet goes now; this append
        // starts a new one.
        clear::delete(conn, effects, name, false)?;
    }
    let before = current.as_ref().map_or(0, |s| s.pending_count);
    // PS2: pending work of which none is claimable (leased, waiting for a
    // time, behind a lane head): new work is announced as if the count
    // rose from zero.
    let idle = match &current {
        Some(s) if before > 0 => !claimable_now(conn, s, now)?,
        _ => false,
    };
    // AC2: only the appended events, never the session's earlier ones,
    // written leased.
    let to = lease.map(|(claim, expires_at)| LeaseTo {
        holder: &claim.holder,
        expires_at,
        limit: claim.limit,
    });
    let Inserted { rows, sid, leased } = match insert_events(
        conn,
        name,
        current.as_ref(),
        events,
        None,
        Ids::Unchecked,
        to,
        SessionDelta::default(),
        now,
    )? {
        Insert::Done(inserted) => inserted,
        Insert::IdTaken(events) => {
            // Its rows are deleted again: a refusal from here on leaves
            // the file as it was.
            effects.restored(conn);
            return match replay(conn, name, current.as_ref(), &events)? {
                Some(replayed) => Ok(replayed),
                // The index refused an id that the lookups cannot find.
                None => Err(crate::rows::corrupt(
                    "the index of ids holds an id that its session lacks",
                )),
            };
        }
    };
    if let Some(expiry) = expiry {
        write_expiry(conn, sid, expiry)?;
    }
    effects.appended(name, &rows);
    if close && let Some(last) = rows.last() {
        // CL6: closed at the frontier it reached, in the same transaction.
        super::lifecycle::mark_closed(conn, effects, name, sid, last.event.index, now)?;
    }
    let has_pending = before > 0 || rows.iter().any(StoredEvent::is_pending);
    let claimed: Vec<u64> = leased.iter().map(|&at| rows[at].event.index).collect();
    // PS2, AC5: announced unless its appender claimed all of it.
    let pending_new = rows.iter().filter(|r| r.is_pending()).count();
    if (before == 0 || idle) && pending_new > claimed.len() {
        effects.announce(conn, sid, name)?;
    }
    Ok(AppendOutcome {
        events: rows,
        has_pending,
        claimed,
    })
}

/// CL2, A13 and A7: what a batch that is not a replay must pass
/// ([`rules::append::check_new`], with the records of its causes).
fn check(
    conn: &Connection,
    name: &str,
    current: Option<&SessionRow>,
    events: &[NewEvent],
    if_frontier: Option<u64>,
) -> Result<()> {
    let mut records = Vec::new();
    if let Some(s) = current {
        for index in rules::append::causes(events) {
            records.push((index, record(conn, s.sid, index)?));
        }
    }
    let target = current.map(|s| rules::append::Target {
        closed: s.is_closed(),
        frontier: s.frontier,
        first_index: s.first_index,
    });
    rules::append::check_new(name, target, events, if_frontier, |index| {
        records
            .iter()
            .find(|(i, _)| *i == index)
            .and_then(|(_, r)| r.as_ref().map(EventRecord::rules))
    })
}

/// A4, A5, A6: the outcome of a batch whose ids all exist in the session
/// and match their rows (a retry); `None` when none exists; a partial
/// duplicate is refused.
fn replay(
    conn: &Connection,
    name: &str,
    current: Option<&SessionRow>,
    events: &[NewEvent],
) -> Result<Option<AppendOutcome>> {
    let Some(current) = current else {
        return Ok(None);
    };
    match rules::append::existing(events, |id| index_of_id(conn, current.sid, id))? {
        rules::append::Existing::All(existing) => {
            retry_rows(conn, name, current, events, &existing).map(Some)
        }
        rules::append::Existing::None => Ok(None),
    }
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
    let rows = existing
        .iter()
        .map(|&index| event_or_gone(conn, name, current.sid, index))
        .collect::<Result<Vec<_>>>()?;
    rules::append::replayed(events, rows, current.pending_count > 0)
}
