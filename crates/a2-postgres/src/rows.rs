//! Events as stored: a log row with its processing record, read into a
//! [`StoredEvent`], and the check that a range read has no hole (E1).

use a2_core::{Cause, Event, Result, StoredEvent, rules};
use tokio_postgres::{GenericClient, Row};

use crate::session::bound;
use crate::sql::{Sql, attempt_of, corrupt, index_of};

/// The columns [`stored`] reads, `e` the log row and `r` its record.
pub(crate) const COLUMNS: &str = "e.idx, e.id, e.type, e.payload, e.created_at, e.lane, \
     e.cause_index, e.cause_attempt, e.cause_batch, r.idx IS NOT NULL, r.processed_at, \
     r.processed_by_attempt, r.returned_ids, r.first_claimed_at, r.last_claimed_at, \
     r.attempt_count, r.claim_holder, r.claim_expires_at, r.retry_at, r.failure_count, \
     r.last_failed_at, r.last_failed_attempt, r.last_error, r.failed_at, r.cancelled_at, \
     r.cancel_reason";

/// The rows a `SELECT {COLUMNS} FROM` reads from.
pub(crate) fn from(s: &str) -> String {
    format!("{s}.events e LEFT JOIN {s}.records r ON r.sid = e.sid AND r.idx = e.idx")
}

/// One row of [`COLUMNS`] as the event of session `name`. An event without
/// a record was appended settled: processed as it was written (A8).
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
    let event = Event {
        id: row.get(1),
        event_type: row.get(2),
        payload,
        index,
        session_id: name.to_owned(),
        created_at,
        cause,
        lane: row.get(5),
    };
    let has_record: bool = row.get(9);
    if !has_record {
        return Ok(StoredEvent {
            event,
            processed_at: Some(created_at),
            processed_by_attempt: None,
            returned_event_ids: Vec::new(),
            first_claimed_at: None,
            last_claimed_at: None,
            attempt_count: 0,
            claim_holder: None,
            claim_expires_at: None,
            retry_at: None,
            failure_count: 0,
            last_failed_at: None,
            last_failed_attempt: None,
            last_error: None,
            failed_at: None,
            cancelled_at: None,
            cancel_reason: None,
        });
    }
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
        claim_holder: row.get(16),
        claim_expires_at: row.get(17),
        retry_at: row.get(18),
        failure_count: attempt_of(row.get::<_, Option<i32>>(19).unwrap_or(0))?,
        last_failed_at: row.get(20),
        last_failed_attempt: attempt(21)?,
        last_error: row.get(22),
        failed_at: row.get(23),
        cancelled_at: row.get(24),
        cancel_reason: row.get(25),
    })
}

/// The events of session `sid` (named `name`) after `after` through
/// `through`, at most `limit`, in index order; a missing index among them
/// is `Corrupted` (E1).
pub(crate) async fn range(
    sql: &Sql<'_>,
    client: &impl GenericClient,
    name: &str,
    sid: i64,
    after: u64,
    through: u64,
    limit: usize,
) -> Result<Vec<StoredEvent>> {
    if through <= after || limit == 0 {
        return Ok(Vec::new());
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = sql
        .query(
            client,
            "reading events",
            &format!(
                "SELECT {COLUMNS} FROM {from} WHERE e.sid = $1 AND e.idx > $2 AND e.idx <= $3
                 ORDER BY e.idx LIMIT $4",
                from = from(sql.schema)
            ),
            &[&sid, &bound(after), &bound(through), &limit],
        )
        .await?;
    let events = rows
        .iter()
        .map(|row| stored(name, row))
        .collect::<Result<Vec<_>>>()?;
    // E1: dense from `after + 1`, up to the bound or the limit.
    let want = (through - after).min(u64::try_from(limit).unwrap_or(u64::MAX));
    for (expected, event) in (after + 1..).zip(&events) {
        if event.event.index != expected {
            return Err(rules::read::missing(name, expected));
        }
    }
    if (events.len() as u64) < want {
        return Err(rules::read::missing(name, after + events.len() as u64 + 1));
    }
    Ok(events)
}
