//! Events as stored: a log row with its processing record, read into a
//! [`StoredEvent`], and the check that a range read has no hole (E1).

use std::collections::HashMap;

use a2_core::{Cause, Event, NewEvent, Result, StoredEvent, rules};
use tokio_postgres::Row;

use crate::sql::Conn;

use crate::session::{self, SessionRow, bound};
use crate::sql::{Sql, Text, attempt_of, corrupt, index_of, text, text_opt};

/// The columns [`stored`] reads, `e` the log row and `r` its record.
pub(crate) const COLUMNS: &str = "e.idx, e.id, e.type, e.payload, e.created_at, e.lane, \
     e.cause_index, e.cause_attempt, e.cause_batch, r.idx IS NOT NULL, r.processed_at, \
     r.processed_by_attempt, r.returned_ids, r.first_claimed_at, r.last_claimed_at, \
     r.attempt_count, r.claim_holder, r.claim_expires_at, r.retry_at, r.failure_count, \
     r.last_failed_at, r.last_failed_attempt, r.last_error, r.failed_at, r.cancelled_at, \
     r.cancel_reason";

/// How many columns [`COLUMNS`] names: the index of a column a statement
/// selects after them.
pub(crate) const WIDTH: usize = 26;

/// The rows a `SELECT {COLUMNS} FROM` reads from.
pub(crate) fn from(s: &str) -> String {
    format!("{s}.events e LEFT JOIN {s}.records r ON r.sid = e.sid AND r.idx = e.idx")
}

/// One row of [`COLUMNS`] as the event of session `name`. An event without
/// a record was appended settled.
pub(crate) fn stored(name: &str, row: &Row) -> Result<StoredEvent> {
    let index = index_of(row.get(0))?;
    let payload: String = row.get(3);
    let payload = serde_json::from_str(&payload).map_err(|e| {
        corrupt(format!(
            "event {index} of {name:?} has a payload that is not JSON: {e}"
        ))
    })?;
    let cause = match row.get::<_, Option<i64>>(6) {
        Some(cause_index) => Some(Cause {
            index: index_of(cause_index)?,
            attempt: attempt_of(row.get::<_, Option<i32>>(7).unwrap_or(0))?,
            batch_size: row.get::<_, Option<i32>>(8).map(attempt_of).transpose()?,
        }),
        None => None,
    };
    let created_at: i64 = row.get(4);
    let has_record: bool = row.get(9);
    if !has_record {
        // Appended settled: processed as it was written (A8).
        let mut new = NewEvent::new(text(row, 2), payload);
        new.settled = true;
        new.lane = text_opt(row, 5);
        return Ok(StoredEvent::appended(
            text(row, 1),
            new,
            name,
            index,
            created_at,
            None,
            cause,
        ));
    }
    let event = Event {
        id: text(row, 1),
        event_type: text(row, 2),
        payload,
        index,
        session_id: name.to_owned(),
        created_at,
        cause,
        lane: text_opt(row, 5),
    };
    let attempt = |at: usize| -> Result<Option<u32>> {
        row.get::<_, Option<i32>>(at).map(attempt_of).transpose()
    };
    let returned: Option<String> = row.get(12);
    let returned_event_ids = match returned {
        Some(text) => serde_json::from_str(&text).map_err(|e| {
            corrupt(format!(
                "event {index} of {name:?} has returned ids that are not a JSON list: {e}"
            ))
        })?,
        None => Vec::new(),
    };
    Ok(StoredEvent {
        event,
        processed_at: row.get(10),
        processed_by_attempt: attempt(11)?,
        returned_event_ids,
        first_claimed_at: row.get(13),
        last_claimed_at: row.get(14),
        attempt_count: attempt_of(row.get::<_, Option<i32>>(15).unwrap_or(0))?,
        claim_holder: text_opt(row, 16),
        claim_expires_at: row.get(17),
        retry_at: row.get(18),
        failure_count: attempt_of(row.get::<_, Option<i32>>(19).unwrap_or(0))?,
        last_failed_at: row.get(20),
        last_failed_attempt: attempt(21)?,
        last_error: text_opt(row, 22),
        failed_at: row.get(23),
        cancelled_at: row.get(24),
        cancel_reason: text_opt(row, 25),
    })
}

/// Event `index` of session `sid` (named `name`), if it has one.
pub(crate) async fn one(
    sql: &Sql<'_>,
    client: &impl Conn,
    name: &str,
    sid: i64,
    index: u64,
) -> Result<Option<StoredEvent>> {
    let statement = format!(
        "SELECT {COLUMNS} FROM {from} WHERE e.sid = $1 AND e.idx = $2",
        from = from(sql.schema)
    );
    sql.query(
        client,
        "reading an event",
        &statement,
        &[&sid, &bound(index)],
    )
    .await?
    .into_iter()
    .next()
    .map(|row| stored(name, &row))
    .transpose()
}

/// The row of session `name`, locked ([`session::lock_with`]), and its
/// event `index` as it stood once the lock was granted, in one round trip.
pub(crate) async fn lock_with_event(
    sql: &Sql<'_>,
    client: &impl Conn,
    name: &str,
    index: u64,
) -> Result<(Option<SessionRow>, Option<StoredEvent>)> {
    let statement = format!(
        "SELECT {COLUMNS} FROM {from} WHERE e.sid = {sid} AND e.idx = $2",
        from = from(sql.schema),
        sid = session::sid_of(sql.schema)
    );
    let (named, at) = (Text(name), bound(index));
    let (current, answers) = session::lock_with(
        sql,
        client,
        name,
        &[("reading an event", &statement, &[&named, &at])],
    )
    .await?;
    let event = answers[0]
        .first()
        .map(|row| stored(name, row))
        .transpose()?;
    Ok((current, event))
}

/// The most events one statement of a read returns (R1).
const PAGE: i64 = 1_000;

/// The events of session `sid` (named `name`) in `span` (after, through],
/// at most `limit`, in index order, read a page at a time (R1). A missing
/// index among them is `Corrupted` (E1), never a log with a hole read as
/// if nothing were missing.
pub(crate) async fn range(
    sql: &Sql<'_>,
    client: &impl Conn,
    (name, sid): (&str, i64),
    span: (u64, u64),
    limit: usize,
) -> Result<Vec<StoredEvent>> {
    let (mut after, through) = span;
    let statement = format!(
        "SELECT {COLUMNS} FROM {from} WHERE e.sid = $1 AND e.idx > $2 AND e.idx <= $3
         ORDER BY e.idx LIMIT $4",
        from = from(sql.schema)
    );
    let mut events: Vec<StoredEvent> = Vec::new();
    while after < through && events.len() < limit {
        let page = PAGE.min(i64::try_from(limit - events.len()).unwrap_or(PAGE));
        let rows = sql
            .query(
                client,
                "reading events",
                &statement,
                &[&sid, &bound(after), &bound(through), &page],
            )
            .await?;
        for row in &rows {
            let event = stored(name, row)?;
            // E1: dense from the first index asked for.
            if event.event.index != after + 1 {
                return Err(rules::read::missing(name, after + 1));
            }
            after += 1;
            events.push(event);
        }
        if rows.is_empty() {
            return Err(rules::read::missing(name, after + 1));
        }
    }
    Ok(events)
}

/// The events at `indexes` of session `sid` (named `name`) that exist, by
/// index.
pub(crate) async fn by_index(
    sql: &Sql<'_>,
    client: &impl Conn,
    name: &str,
    sid: i64,
    indexes: &[i64],
) -> Result<HashMap<u64, StoredEvent>> {
    let statement = format!(
        "SELECT {COLUMNS} FROM {from} WHERE e.sid = $1 AND e.idx = ANY($2)",
        from = from(sql.schema)
    );
    let found = sql
        .query(client, "reading events", &statement, &[&sid, &indexes])
        .await?;
    found
        .iter()
        .map(|row| {
            let event = stored(name, row)?;
            Ok((event.event.index, event))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn width_counts_the_columns() {
        assert_eq!(super::COLUMNS.split(',').count(), super::WIDTH);
    }
}
