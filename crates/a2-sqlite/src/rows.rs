//! Between SQLite rows and a2's types: the column list of a stored event,
//! integer conversions, and the mapping of SQLite errors.

use a2_core::{Cause, Error, Event, Millis, Result, StoredEvent};
use rusqlite::Row;
use serde_json::Value;

/// The columns of `events` that make a [`StoredEvent`], in the order
/// [`stored_event`] reads them.
pub const EVENT_COLUMNS: &str = "idx, id, type, payload, created_at, lane, cause_index, \
    cause_attempt, processed_at, processed_by_attempt, returned_ids, first_claimed_at, \
    last_claimed_at, attempt_count, claim_holder, claim_expires_at, retry_at, failure_count, \
    last_failed_at, last_failed_attempt, last_error, failed_at, cause_batch, cancelled_at, \
    cancel_reason";

/// A SQLite failure while serving an operation, classified by SQLite's
/// own error code: a damaged file (`SQLITE_CORRUPT`, `SQLITE_NOTADB`) is
/// `Corrupted` (stop and alert); anything else (a busy or locked file, I/O,
/// a full disk) makes the store unavailable. The SQLite error is kept.
pub fn db(error: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode as Code;
    match error.sqlite_error_code() {
        Some(Code::DatabaseCorrupt | Code::NotADatabase) => {
            Error::corrupted(format!("the SQLite file is damaged: {error}"), None, None)
        }
        _ => Error::unavailable_from("SQLite failed", error),
    }
}

/// Data read back that breaks an invariant (a payload that is not JSON, a
/// negative index): the file was altered behind a2's back. `Corrupted`
/// (E1): no retry can mend it.
pub fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::corrupted(
        format!("the SQLite database holds invalid data: {what}"),
        None,
        None,
    )
}

/// An index or count as SQLite stores it. Indexes beyond `i64::MAX` exist
/// nowhere, so callers treat the `None` as "no such row".
pub fn sql_index(index: u64) -> Option<i64> {
    i64::try_from(index).ok()
}

/// An index bound for a range query: beyond `i64::MAX` is the same as
/// `i64::MAX`, since no row lies there.
pub fn sql_bound(index: u64) -> i64 {
    i64::try_from(index).unwrap_or(i64::MAX)
}

/// A stored index or count back as `u64`.
pub fn to_u64(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| corrupt(format!("negative count or index {value}")))
}

fn to_u32(value: i64) -> Result<u32> {
    u32::try_from(value).map_err(|_| corrupt(format!("attempt number {value} out of range")))
}

fn opt_u32(value: Option<i64>) -> Result<Option<u32>> {
    value.map(to_u32).transpose()
}

/// Parses stored JSON.
pub fn json(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| corrupt(format!("stored JSON does not parse: {e}")))
}

/// Compact JSON text for storage.
pub fn json_text(value: &Value) -> String {
    // Serializing a `Value` to a string cannot fail: every `Value` is valid
    // JSON and the sink is memory.
    serde_json::to_string(value).unwrap_or_default()
}

/// The raw columns of one event row; converted to a [`StoredEvent`] outside
/// rusqlite's row callback so that our own errors keep their codes.
pub struct RawEvent {
    idx: i64,
    id: String,
    event_type: String,
    payload: String,
    created_at: Millis,
    lane: Option<String>,
    cause_index: Option<i64>,
    cause_attempt: Option<i64>,
    cause_batch: Option<i64>,
    processed_at: Option<Millis>,
    processed_by_attempt: Option<i64>,
    returned_ids: Option<String>,
    first_claimed_at: Option<Millis>,
    last_claimed_at: Option<Millis>,
    attempt_count: i64,
    claim_holder: Option<String>,
    claim_expires_at: Option<Millis>,
    retry_at: Option<Millis>,
    failure_count: i64,
    last_failed_at: Option<Millis>,
    last_failed_attempt: Option<i64>,
    last_error: Option<String>,
    failed_at: Option<Millis>,
    cancelled_at: Option<Millis>,
    cancel_reason: Option<String>,
}

impl RawEvent {
    /// The row's index, as stored.
    pub fn index(&self) -> i64 {
        self.idx
    }

    /// Reads the columns of [`EVENT_COLUMNS`], starting at column 0.
    pub fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            idx: row.get(0)?,
            id: row.get(1)?,
            event_type: row.get(2)?,
            payload: row.get(3)?,
            created_at: row.get(4)?,
            lane: row.get(5)?,
            cause_index: row.get(6)?,
            cause_attempt: row.get(7)?,
            processed_at: row.get(8)?,
            processed_by_attempt: row.get(9)?,
            returned_ids: row.get(10)?,
            first_claimed_at: row.get(11)?,
            last_claimed_at: row.get(12)?,
            attempt_count: row.get(13)?,
            claim_holder: row.get(14)?,
            claim_expires_at: row.get(15)?,
            retry_at: row.get(16)?,
            failure_count: row.get(17)?,
            last_failed_at: row.get(18)?,
            last_failed_attempt: row.get(19)?,
            last_error: row.get(20)?,
            failed_at: row.get(21)?,
            cause_batch: row.get(22)?,
            cancelled_at: row.get(23)?,
            cancel_reason: row.get(24)?,
        })
    }

    /// The event's cause (A7, CO2, B1), from its columns.
    fn cause(&self) -> Result<Option<Cause>> {
        Ok(match (self.cause_index, self.cause_attempt) {
            (Some(index), Some(attempt)) => Some(Cause {
                index: to_u64(index)?,
                attempt: to_u32(attempt)?,
                batch_size: self.cause_batch.map(to_u32).transpose()?,
            }),
            _ => None,
        })
    }

    /// Only the immutable event.
    pub fn into_event(self, session: &str) -> Result<Event> {
        let cause = self.cause()?;
        Ok(Event {
            id: self.id,
            event_type: self.event_type,
            payload: json(&self.payload)?,
            index: to_u64(self.idx)?,
            session_id: session.to_owned(),
            created_at: self.created_at,
            cause,
            lane: self.lane,
        })
    }

    /// The stored event of `session`.
    pub fn into_stored(mut self, session: &str) -> Result<StoredEvent> {
        let returned_event_ids = match &self.returned_ids {
            Some(text) => serde_json::from_str(text)
                .map_err(|e| corrupt(format!("returned ids do not parse: {e}")))?,
            None => Vec::new(),
        };
        let attempt_count = to_u32(self.attempt_count)?;
        let failure_count = to_u32(self.failure_count)?;
        let processed_by_attempt = opt_u32(self.processed_by_attempt)?;
        let last_failed_attempt = opt_u32(self.last_failed_attempt)?;
        let claim_holder = self.claim_holder.take();
        let last_error = self.last_error.take();
        let cancel_reason = self.cancel_reason.take();
        Ok(StoredEvent {
            processed_at: self.processed_at,
            processed_by_attempt,
            returned_event_ids,
            first_claimed_at: self.first_claimed_at,
            last_claimed_at: self.last_claimed_at,
            attempt_count,
            claim_holder,
            claim_expires_at: self.claim_expires_at,
            retry_at: self.retry_at,
            failure_count,
            last_failed_at: self.last_failed_at,
            last_failed_attempt,
            last_error,
            failed_at: self.failed_at,
            cancelled_at: self.cancelled_at,
            cancel_reason,
            // Last: it takes the rest of the row.
            event: self.into_event(session)?,
        })
    }
}
