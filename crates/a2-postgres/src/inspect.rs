//! Reads beyond R1: history pages (R2), a live feed's reads (ST1, ST6),
//! and inspection (I1, I2, I3). Each runs in one snapshot
//! (`REPEATABLE READ`), so the session's row and its events agree.

use crate::sql::Conn;
use a2_core::feed::LogPage;
use a2_core::{
    EventsPage, ForkOrigin, HistoryOptions, HistoryPage, ListSessionsOptions, Millis,
    ReadEventsOptions, Result, SessionList, SessionSummary, SnapshotInfo, rules, validate,
};

use crate::op::On;
use crate::rows;
use crate::session;
use crate::sql::{Text, index_of, text, text_opt};
use crate::state::DEADLINE;

/// R2: the page of events before `before_index` (or up to the frontier),
/// newest last, reaching back at most to the first retained event (TR3).
pub(crate) async fn history(
    on: On<'_, impl Conn>,
    (name, mut options): (String, HistoryOptions),
) -> Result<HistoryPage> {
    options.limit = validate::page_limit(options.limit)?;
    let Some(current) = session::read(&on.sql, on.client, &name, on.now).await? else {
        return Ok(HistoryPage::empty());
    };
    let (frontier, first) = (current.log.frontier, current.log.first_index);
    let through = match options.before_index {
        Some(before) => before.saturating_sub(1).min(frontier),
        None => frontier,
    };
    let limit = u64::try_from(options.limit).unwrap_or(u64::MAX);
    let after = through.saturating_sub(limit).max(first - 1);
    let key = (name.as_str(), current.sid);
    let events = rows::range(&on.sql, on.client, key, (after, through), options.limit).await?;
    Ok(HistoryPage {
        events,
        has_more: after + 1 > first,
        first_index: first,
    })
}

/// I2: the events after `after_index` through `through_index` (or the
/// frontier), at most `limit`.
pub(crate) async fn events(
    on: On<'_, impl Conn>,
    at: (String, ReadEventsOptions),
) -> Result<EventsPage> {
    let (name, mut options) = at;
    options.limit = validate::page_limit(options.limit)?;
    let Some(current) = session::read(&on.sql, on.client, &name, on.now).await? else {
        return Ok(EventsPage::empty());
    };
    rules::lifecycle::check_retained(&name, current.log.first_index, options.after_index)?;
    let frontier = current.log.frontier;
    let through = options.through_index.unwrap_or(frontier).min(frontier);
    let span = (options.after_index, through);
    let key = (name.as_str(), current.sid);
    Ok(EventsPage {
        events: rows::range(&on.sql, on.client, key, span, options.limit).await?,
        through_index: through,
    })
}

/// A live feed's read of `name` after `after`, at most `limit` events;
/// with `check`, starting at the event at `after` itself (ST6) when it is
/// still retained. `Trimmed` when the events after `after` were trimmed
/// (TR3).
pub(crate) async fn feed(
    on: On<'_, impl Conn>,
    (name, after, check, limit): (String, u64, bool, usize),
) -> Result<LogPage> {
    let Some(current) = session::read(&on.sql, on.client, &name, on.now).await? else {
        return Ok(LogPage {
            checked: check,
            ..LogPage::default()
        });
    };
    rules::lifecycle::check_retained(&name, current.log.first_index, after)?;
    let checked = check && after >= current.log.first_index;
    let from = if checked { after - 1 } else { after };
    let span = (from, current.log.frontier);
    let events = rows::range(&on.sql, on.client, (&name, current.sid), span, limit).await?;
    Ok(LogPage {
        checked,
        events: events.into_iter().map(|e| e.event).collect(),
        deadline: current.deadline,
        closed: current.closed.map(|(frontier, _)| frontier),
    })
}

/// I1: sessions by name from the cursor (or the prefix), in byte order,
/// an expired one not listed (EX3): one range scan of `sessions`' name
/// index.
pub(crate) async fn sessions(
    on: On<'_, impl Conn>,
    mut options: ListSessionsOptions,
) -> Result<SessionList> {
    options.limit = validate::page_limit(options.limit)?;
    let prefix = options.prefix.clone().unwrap_or_default();
    let (after, start) = match options.cursor.clone() {
        Some(cursor) if cursor >= prefix => (true, cursor),
        _ => (false, prefix.clone()),
    };
    let statement = format!(
        "SELECT name, frontier, pending_count, failed_count, attempt_count, failure_count,
            first_event_at, updated_at, first_index, closed_at, {DEADLINE},
            forked_from, forked_index
         FROM {s}.sessions
         WHERE name >= $1 AND (name <> $1 OR NOT $2) AND starts_with(name, $3)
            AND {DEADLINE} > $4
         ORDER BY name LIMIT $5",
        s = on.sql.schema
    );
    let take = i64::try_from(options.limit.saturating_add(1)).unwrap_or(i64::MAX);
    let found = on
        .sql
        .query(
            on.client,
            "listing sessions",
            &statement,
            &[&Text(&start), &after, &Text(&prefix), &on.now, &take],
        )
        .await?;
    let mut sessions = Vec::with_capacity(found.len());
    for row in found.iter().take(options.limit) {
        let count = |i: usize| index_of(row.get(i));
        let deadline: Millis = row.get(10);
        sessions.push(SessionSummary {
            session_id: text(row, 0),
            event_count: count(1)?,
            pending_count: count(2)?,
            failed_count: count(3)?,
            attempt_count: count(4)?,
            failure_count: count(5)?,
            first_event_at: row.get(6),
            updated_at: row.get(7),
            // TR5, CL5.
            first_index: count(8)?,
            closed_at: row.get(9),
            deadline: Some(deadline).filter(|d| *d != Millis::MAX),
            // FK5.
            forked_from: match text_opt(row, 11) {
                Some(session) => Some(ForkOrigin {
                    session,
                    index: index_of(row.get(12))?,
                }),
                None => None,
            },
        });
    }
    let cursor = if found.len() > options.limit {
        sessions.last().map(|s| s.session_id.clone())
    } else {
        None
    };
    Ok(SessionList { sessions, cursor })
}

/// I3: the session's snapshots by reducer name; an expired session's are
/// gone with it (EX3).
pub(crate) async fn snapshots(on: On<'_, impl Conn>, name: String) -> Result<Vec<SnapshotInfo>> {
    let expired = session::fetch(&on.sql, on.client, &name, "")
        .await?
        .is_some_and(|s| s.expired(on.now));
    if expired {
        return Ok(Vec::new());
    }
    let statement = format!(
        "SELECT reducer, idx, updated_at FROM {s}.snapshots WHERE session = $1 ORDER BY reducer",
        s = on.sql.schema
    );
    let found = on
        .sql
        .query(on.client, "listing snapshots", &statement, &[&Text(&name)])
        .await?;
    found
        .iter()
        .map(|row| {
            Ok(SnapshotInfo {
                reducer: text(row, 0),
                index: index_of(row.get(1))?,
                updated_at: row.get(2),
            })
        })
        .collect()
}
