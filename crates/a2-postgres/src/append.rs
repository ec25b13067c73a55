//! `append`, `append_and_claim` and `append_with` (A1, A2, A3, A4, A5, A6,
//! A7, A8, A9, A10, A11, A13, AC1, AC2, AC3, AC4, AC5, EX2, CL2, CL6, DL1,
//! DL2, DL3), in a transaction the caller owns: the store's own, or the
//! application's (`PostgresStore::append_in`). The decisions are
//! [`rules::append`]'s, [`rules::lifecycle`]'s and [`rules::delay`]'s.

use std::collections::{HashMap, HashSet};

use crate::sql::Conn;
use a2_core::{
    AppendClaim, AppendOptions, AppendOutcome, AppendRequest, Expiry, Millis, NewEvent, Result,
    StoredEvent, rules,
};
use tokio_postgres::types::ToSql;

use crate::notify::Notices;
use crate::plan::Plan;
use crate::rows;
use crate::session::{self, SessionRow, bound};
use crate::sql::owned;
use crate::sql::{Sql, Text, text};
use crate::writes::Writes;

/// What an append does besides appending.
#[derive(Default, Clone, Copy)]
pub(crate) struct Extras<'a> {
    /// Lease the new events that are ready at once (AC2).
    pub(crate) claim: Option<&'a AppendClaim>,
    /// The session's expiry to set (EX2).
    pub(crate) expiry: Option<Expiry>,
    /// The store's expiry for a session the append creates.
    pub(crate) default_expiry: Option<Expiry>,
    /// The frontier the append expects (A13).
    pub(crate) if_frontier: Option<u64>,
    /// Close the session at its new frontier (CL6).
    pub(crate) close: bool,
}

impl<'a> Extras<'a> {
    /// What `options` ask of an append, with the store's expiry for a
    /// session it creates.
    pub(crate) fn of(options: &'a AppendOptions, default_expiry: Option<Expiry>) -> Self {
        Self {
            claim: options.claim.as_ref(),
            expiry: options.expiry,
            default_expiry,
            if_frontier: options.if_frontier,
            close: options.close,
        }
    }
}

/// Appends validated `events` with their final ids (A3, A11) to session
/// `name` in the transaction `client` is in, and queues the notices the
/// commit sends. A refusal may come after some statements ran: the caller
/// rolls the transaction (or its savepoint) back, so nothing is written.
pub(crate) async fn append(
    sql: &Sql<'_>,
    client: &impl Conn,
    notices: &mut Notices,
    request: &AppendRequest<'_>,
    extras: Extras<'_>,
    now: Millis,
) -> Result<AppendOutcome> {
    let (name, events) = (request.session, &request.events);
    // AC1, EX1, DL1: before anything is read or written.
    let (lease, expiry) = rules::append::times(extras.claim, extras.expiry, events, now)?;
    let (locked, looked) = lock_and_look(sql, client, name, events).await?;
    let expired = locked.as_ref().filter(|s| s.expired(now)).map(|s| s.sid);
    if events.is_empty() {
        // A2, AC3.
        let has_pending = locked
            .as_ref()
            .is_some_and(|s| expired.is_none() && s.pending_count > 0);
        return Ok(AppendOutcome::nothing(has_pending));
    }
    if let Some(sid) = expired {
        // EX3: an expired session is gone; this append starts a new one
        // (the deletion is undone with the rest if the append is refused).
        session::delete(sql, client, (name, Some(sid)), false).await?;
    }
    // A session this append starts is created — or, when another
    // transaction created it meanwhile, locked once that one ended —
    // before anything is checked, so the checks see every append that
    // committed before this one (A4, A13).
    // What was looked up with the lock holds for the row locked, not for
    // one this append creates or finds created.
    let (current, mut looked) = match locked.filter(|_| expired.is_none()) {
        Some(s) => (s, Some(looked)),
        None => (session::create(sql, client, name, now).await?, None),
    };
    let fresh = current.log.frontier == 0;
    let existing = (!fresh).then_some(&current);
    // A4, A5, A6: the batch's ids in this session, looked up at once.
    if let Some(current) = existing {
        let found = match looked.as_mut() {
            Some(looked) => std::mem::take(&mut looked.ids),
            None => ids_found(sql, client, current.sid, events).await?,
        };
        match rules::append::existing(events, |id| Ok(found.get(id).copied()))? {
            rules::append::Existing::All(indexes) => {
                return replay(sql, client, name, current, events, &indexes).await;
            }
            rules::append::Existing::None => {}
        }
    }
    check(sql, client, name, existing, events, extras.if_frontier).await?;
    let expiry = rules::append::expiry(expiry, extras.default_expiry, fresh, now)?;
    let before = current.pending_count;
    // PS2: pending work none of which is claimable now is announced as if
    // the count rose from zero.
    let idle = before > 0
        && !match &looked {
            Some(looked) => looked.earliest.is_some_and(|due| due <= now),
            None => claimable_now(sql, client, current.sid, now).await?,
        };
    let mut writes = Writes::default();
    let Inserted {
        rows,
        claimed,
        pending: pending_new,
    } = insert(
        sql,
        client,
        name,
        &current,
        events,
        lease,
        0,
        now,
        &mut writes,
    )
    .await?;
    writes.defer(sql, client, "appending events").await?;
    let frontier = current.log.frontier + events.len() as u64;
    if let Some(expiry) = expiry {
        session::write_expiry(sql, client, current.sid, expiry).await?;
    }
    if extras.close {
        // CL6: closed at the frontier it reached, in the same transaction.
        crate::lifecycle::mark_closed(sql, client, current.sid, frontier, now).await?;
    }
    // A log that replaced an expired one, or closed, is read (ST6, CL4).
    notices.appended(name, frontier, extras.close || expired.is_some());
    // PS2, AC5: announced unless its appender claimed all of it.
    if (before == 0 || idle) && pending_new > claimed.len() as i64 {
        notices.work(name);
    }
    Ok(AppendOutcome {
        has_pending: before > 0 || rows.iter().any(StoredEvent::is_pending),
        events: rows,
        claimed,
    })
}

/// What an append reads of a session besides its row, sent with the
/// statement that locks the row (one round trip), each keyed by the
/// session's name: they run after the lock is granted, so they see every
/// append committed before it.
struct Looked {
    /// The indexes of the batch's ids the session has (A4, A5).
    ids: HashMap<String, u64>,
    /// The earliest due time in the ready set (PS2).
    earliest: Option<Millis>,
}

/// Locks the row of session `name` (`None`: it has none) and reads what
/// [`Looked`] says in the same round trip.
async fn lock_and_look(
    sql: &Sql<'_>,
    client: &impl Conn,
    name: &str,
    events: &[NewEvent],
) -> Result<(Option<SessionRow>, Looked)> {
    let s = sql.schema;
    let sid = session::sid_of(s);
    let ids = Ids::of(events);
    let ids_statement = ids.statement(s, &sid);
    let earliest = earliest_due(s, &sid);
    let named = Text(name);
    let (row, answers) = session::lock_with(
        sql,
        client,
        name,
        &[
            (
                "looking up the batch's ids",
                &ids_statement,
                &[&named, ids.param()],
            ),
            ("looking for claimable work", &earliest, &[&named]),
        ],
    )
    .await?;
    let ids = Ids::found(&answers[0])?;
    let earliest = answers[1].first().map(|r| r.get(0));
    Ok((row, Looked { ids, earliest }))
}

/// What [`insert`] wrote.
pub(crate) struct Inserted {
    /// The new rows, in index order.
    pub(crate) rows: Vec<StoredEvent>,
    /// The indexes leased at once (AC2), ascending.
    pub(crate) claimed: Vec<u64>,
    /// How many of them are pending.
    pub(crate) pending: i64,
}

/// Writes `events` (final ids, checked) after the frontier of `current`
/// (A1, A8, A9, DL1, DL2), leased up to the claim's limit when `lease`
/// says (AC2), and moves the session's row once: frontier, pending count
/// (plus `settled`, the pending events the caller settled in the same
/// step), attempts, last write. What an append and a completion's returned
/// events (CO2) both do. The writes are added to `writes`, for the caller
/// to send; what this reads (the batch's lanes) sees only what was sent.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn insert(
    sql: &Sql<'_>,
    client: &impl Conn,
    name: &str,
    current: &SessionRow,
    events: &[NewEvent],
    lease: Option<(&AppendClaim, Millis)>,
    settled: i64,
    now: Millis,
    writes: &mut Writes,
) -> Result<Inserted> {
    let sid = current.sid;
    let start = current.log.frontier;
    let busy_lanes = busy_lanes(sql, client, sid, events).await?;
    let mut plan = Plan::new(events, start, &busy_lanes, lease, now)?;
    let statement = format!(
        "UPDATE {s}.sessions SET frontier = $2, pending_count = pending_count + $3,
            attempt_count = attempt_count + $4, updated_at = greatest(updated_at, $5)
         WHERE sid = $1",
        s = sql.schema
    );
    let frontier = bound(start + events.len() as u64);
    let attempts = plan.positions.len() as i64;
    let pending = plan.pending_count - settled;
    let (positions, pending_count) = (std::mem::take(&mut plan.positions), plan.pending_count);
    plan.write(writes, sql.schema, sid, lease, now);
    let params = owned![sid, frontier, pending, attempts, now];
    writes.push("sessions", statement, params);
    let mut rows: Vec<StoredEvent> = events
        .iter()
        .zip(start + 1..)
        .map(|(new, index)| {
            let id = rules::append::final_id(new).to_owned();
            let due = rules::delay::due(new, now);
            StoredEvent::appended(id, new.clone(), name, index, now, due, None)
        })
        .collect();
    if let Some((claim, expires_at)) = lease {
        for &at in &positions {
            rows[at].lease(&claim.holder, expires_at, now);
        }
    }
    let claimed = positions.iter().map(|&at| rows[at].event.index).collect();
    Ok(Inserted {
        rows,
        claimed,
        pending: pending_count,
    })
}

/// The indexes of the batch's ids that session `sid` has (A4: its own).
pub(crate) async fn ids_found(
    sql: &Sql<'_>,
    client: &impl Conn,
    sid: i64,
    events: &[NewEvent],
) -> Result<HashMap<String, u64>> {
    if events.is_empty() {
        // Nothing to look up (a completion that returns nothing): no
        // statement, which Postgres would plan anew at each call.
        return Ok(HashMap::new());
    }
    let ids = Ids::of(events);
    let statement = ids.statement(sql.schema, "$1");
    let rows = sql
        .query(
            client,
            "looking up the batch's ids",
            &statement,
            &[&sid, ids.param()],
        )
        .await?;
    Ids::found(&rows)
}

/// A batch's ids as the parameter `$2` of [`Ids::statement`].
enum Ids<'a> {
    /// One id: a plain equality.
    One(Text<'a>),
    /// Several (or none): an array.
    Many(Vec<Text<'a>>),
}

impl<'a> Ids<'a> {
    /// The ids of `events`.
    fn of(events: &'a [NewEvent]) -> Self {
        let mut ids: Vec<Text> = events
            .iter()
            .map(|e| Text(rules::append::final_id(e)))
            .collect();
        match ids.len() {
            1 => Ids::One(ids.remove(0)),
            _ => Ids::Many(ids),
        }
    }

    /// The statement that finds the ids in the session whose sid `sid`
    /// says: one probe of the unique index per id. One id is a plain
    /// equality; several are a subquery per id of `unnest($2)` — written
    /// as a join or `id = ANY($2)`, a generic plan made while the session
    /// was small read its whole log instead, and an array makes Postgres
    /// plan the statement anew at every call (its plan's cost depends on
    /// the array's length).
    fn statement(&self, s: &str, sid: &str) -> String {
        match self {
            Ids::One(_) => format!("SELECT id, idx FROM {s}.events WHERE sid = {sid} AND id = $2"),
            Ids::Many(_) => format!(
                "SELECT id, idx FROM (SELECT u.id,
                    (SELECT e.idx FROM {s}.events e WHERE e.sid = {sid} AND e.id = u.id) AS idx
                 FROM unnest($2::text[]) AS u(id)) AS found WHERE idx IS NOT NULL"
            ),
        }
    }

    /// The parameter `$2` of [`Ids::statement`].
    fn param(&self) -> &(dyn ToSql + Sync) {
        match self {
            Ids::One(one) => one,
            Ids::Many(many) => many,
        }
    }

    /// The indexes found, by id.
    fn found(rows: &[tokio_postgres::Row]) -> Result<HashMap<String, u64>> {
        rows.iter()
            .map(|row| Ok((text(row, 0), crate::sql::index_of(row.get(1))?)))
            .collect()
    }
}

/// The statement that reads the earliest due time of the ready set of the
/// session whose sid `sid` says (PS2: is anything claimable now): the
/// first entry of `ready_due` (a filter `due_at <= now … LIMIT 1` lets a
/// generic plan scan the whole table).
fn earliest_due(s: &str, sid: &str) -> String {
    format!("SELECT due_at FROM {s}.ready WHERE sid = {sid} ORDER BY due_at LIMIT 1")
}

/// A5: every id of the batch exists; it is a retry if each event has the
/// stored type and payload. The stored rows, by index.
async fn replay(
    sql: &Sql<'_>,
    client: &impl Conn,
    name: &str,
    current: &SessionRow,
    events: &[NewEvent],
    indexes: &[u64],
) -> Result<AppendOutcome> {
    let wanted: Vec<i64> = indexes.iter().map(|&i| bound(i)).collect();
    let mut by_index = rows::by_index(sql, client, name, current.sid, &wanted).await?;
    let stored = indexes
        .iter()
        .map(|index| {
            by_index
                .remove(index)
                .ok_or_else(|| rules::read::missing(name, *index))
        })
        .collect::<Result<Vec<_>>>()?;
    rules::append::replayed(events, stored, current.pending_count > 0)
}

/// CL2, A13, A7: what a batch that is not a replay must pass
/// ([`rules::append::check_new`], with the records of its causes).
async fn check(
    sql: &Sql<'_>,
    client: &impl Conn,
    name: &str,
    current: Option<&SessionRow>,
    events: &[NewEvent],
    if_frontier: Option<u64>,
) -> Result<()> {
    let mut records = HashMap::new();
    if let Some(s) = current {
        for index in rules::append::causes(events) {
            if let Some(row) = rows::one(sql, client, name, s.sid, index).await? {
                records.insert(index, row);
            }
        }
    }
    let target = current.map(|s| s.log);
    rules::append::check_new(name, target, events, if_frontier, |index| {
        records.get(&index).map(Into::into)
    })
}

/// Whether an event of session `sid` can be claimed at `now` (PS2).
pub(crate) async fn claimable_now(
    sql: &Sql<'_>,
    client: &impl Conn,
    sid: i64,
    now: Millis,
) -> Result<bool> {
    let earliest: Option<Millis> = sql
        .query(
            client,
            "looking for claimable work",
            &earliest_due(sql.schema, "$1"),
            &[&sid],
        )
        .await?
        .first()
        .map(|row| row.get(0));
    Ok(earliest.is_some_and(|due| due <= now))
}

/// The lanes of the batch in which session `sid` has an unprocessed event
/// (DL2: the batch's events in them wait behind it).
async fn busy_lanes(
    sql: &Sql<'_>,
    client: &impl Conn,
    sid: i64,
    events: &[NewEvent],
) -> Result<HashSet<String>> {
    let lanes: Vec<Text> = events
        .iter()
        .filter(|e| !e.settled)
        .filter_map(|e| e.lane.as_deref().map(Text))
        .collect();
    if lanes.is_empty() {
        return Ok(HashSet::new());
    }
    let rows = sql
        .query(
            client,
            "looking up the batch's lanes",
            &format!(
                "SELECT DISTINCT lane FROM {s}.records
                 WHERE sid = $1 AND open AND lane IS NOT NULL AND lane = ANY($2)",
                s = sql.schema
            ),
            &[&sid, &lanes],
        )
        .await?;
    Ok(rows.iter().map(|row| text(row, 0)).collect())
}
