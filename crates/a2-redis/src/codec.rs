//! Decoding script replies into model types. A reply that does not have the
//! shape the scripts promise is `StoreUnavailable` ("returned data that
//! breaks an invariant"), never a panic.

use a2_core::{Cause, Error, Event, Millis, Result, StoredEvent};
use redis::Value;

/// A reply that breaks the scripts' contract.
pub fn broken(what: impl std::fmt::Display) -> Error {
    Error::unavailable(format!("unexpected reply from Redis: {what}"))
}

/// The elements of an array reply.
pub fn array(value: Value) -> Result<Vec<Value>> {
    match value {
        Value::Array(items) | Value::Set(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        other => Err(broken(format!("expected an array, got {other:?}"))),
    }
}

/// Bytes of a string reply, or `None` for nil.
pub fn opt_bytes(value: Value) -> Result<Option<Vec<u8>>> {
    match value {
        Value::Nil => Ok(None),
        Value::BulkString(bytes) => Ok(Some(bytes)),
        Value::SimpleString(s) => Ok(Some(s.into_bytes())),
        Value::VerbatimString { text, .. } => Ok(Some(text.into_bytes())),
        Value::Int(n) => Ok(Some(n.to_string().into_bytes())),
        Value::Okay => Ok(Some(b"OK".to_vec())),
        other => Err(broken(format!("expected a string, got {other:?}"))),
    }
}

/// A string reply, or `None` for nil.
pub fn opt_string(value: Value) -> Result<Option<String>> {
    opt_bytes(value)?
        .map(|bytes| String::from_utf8(bytes).map_err(|_| broken("a string is not UTF-8")))
        .transpose()
}

/// A string reply.
pub fn string(value: Value) -> Result<String> {
    opt_string(value)?.ok_or_else(|| broken("expected a string, got nil"))
}

/// An integer reply (or a string holding one), or `None` for nil.
pub fn opt_int(value: Value) -> Result<Option<i64>> {
    match value {
        Value::Int(n) => Ok(Some(n)),
        Value::Nil => Ok(None),
        other => {
            let s = string(other)?;
            s.parse()
                .map(Some)
                .map_err(|_| broken(format!("expected an integer, got {s:?}")))
        }
    }
}

/// An integer reply.
pub fn int(value: Value) -> Result<i64> {
    opt_int(value)?.ok_or_else(|| broken("expected an integer, got nil"))
}

/// An unsigned integer reply.
pub fn uint(value: Value) -> Result<u64> {
    u64::try_from(int(value)?).map_err(|_| broken("expected a non-negative integer"))
}

fn opt_u32(value: Value) -> Result<Option<u32>> {
    opt_int(value)?
        .map(|n| u32::try_from(n).map_err(|_| broken("count out of range")))
        .transpose()
}

/// The index of a stream entry id `{index}-0`.
pub fn entry_index(id: &str) -> Result<u64> {
    id.strip_suffix("-0")
        .and_then(|index| index.parse().ok())
        .ok_or_else(|| broken(format!("stream entry id {id:?}")))
}

/// The immutable part of a log entry, plus its lane and cause.
pub struct Entry {
    /// The event.
    pub event: Event,
    /// Its lane.
    pub lane: Option<String>,
    /// Its cause.
    pub cause: Option<Cause>,
}

/// Decodes a stream entry `{entry id, {field, value, ...}}` of `session`.
pub fn entry(session: &str, id: Value, fields: Value) -> Result<Entry> {
    let index = entry_index(&string(id)?)?;
    let mut event_id = None;
    let mut event_type = None;
    let mut payload = None;
    let mut created_at = None;
    let mut lane = None;
    let mut cause = None;
    let mut fields = array(fields)?.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        let value = string(value)?;
        match string(name)?.as_str() {
            "id" => event_id = Some(value),
            "type" => event_type = Some(value),
            "payload" => {
                payload = Some(
                    serde_json::from_str(&value).map_err(|e| broken(format!("payload: {e}")))?,
                )
            }
            "created_at" => {
                created_at = Some(value.parse::<Millis>().map_err(|_| broken("created_at"))?)
            }
            "lane" => lane = Some(value),
            "cause" => cause = Some(parse_cause(&value)?),
            _ => {}
        }
    }
    Ok(Entry {
        event: Event {
            id: event_id.ok_or_else(|| broken("entry without id"))?,
            event_type: event_type.ok_or_else(|| broken("entry without type"))?,
            payload: payload.ok_or_else(|| broken("entry without payload"))?,
            index,
            session_id: session.to_owned(),
            created_at: created_at.ok_or_else(|| broken("entry without created_at"))?,
        },
        lane,
        cause,
    })
}

fn parse_cause(value: &str) -> Result<Cause> {
    let (index, attempt) = value
        .split_once(':')
        .ok_or_else(|| broken(format!("cause {value:?}")))?;
    Ok(Cause {
        index: index.parse().map_err(|_| broken("cause index"))?,
        attempt: attempt.parse().map_err(|_| broken("cause attempt"))?,
        batch_size: None,
    })
}

/// Decodes an entry reply `{entry id, fields}`.
pub fn entry_reply(session: &str, value: Value) -> Result<Entry> {
    let mut parts = array(value)?.into_iter();
    let (Some(id), Some(fields)) = (parts.next(), parts.next()) else {
        return Err(broken("stream entry"));
    };
    entry(session, id, fields)
}

/// Decodes a row `{entry id, fields, record attrs}` (`helpers.lua`, `row_of`).
pub fn row(session: &str, value: Value) -> Result<StoredEvent> {
    let mut parts = array(value)?.into_iter();
    let (Some(id), Some(fields), Some(record)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(broken("row"));
    };
    let Entry { event, lane, cause } = entry(session, id, fields)?;
    // The order of `ROW_ATTRS` in helpers.lua.
    let mut r = array(record)?.into_iter();
    let mut next = || r.next().unwrap_or(Value::Nil);
    let attempt_count = opt_u32(next())?.unwrap_or(0);
    let first_claimed_at = opt_int(next())?;
    let last_claimed_at = opt_int(next())?;
    let claim_holder = opt_string(next())?;
    let claim_expires_at = opt_int(next())?;
    let retry_at = opt_int(next())?;
    let failure_count = opt_u32(next())?.unwrap_or(0);
    let last_failed_at = opt_int(next())?;
    let last_failed_attempt = opt_u32(next())?;
    let last_error = opt_string(next())?;
    let failed_at = opt_int(next())?;
    let processed_at = opt_int(next())?;
    let processed_by_attempt = opt_u32(next())?;
    let returned_event_ids = match opt_string(next())? {
        Some(json) => serde_json::from_str(&json).map_err(|e| broken(format!("ids: {e}")))?,
        None => Vec::new(),
    };
    Ok(StoredEvent {
        event,
        cause,
        lane,
        processed_at,
        processed_by_attempt,
        returned_event_ids,
        first_claimed_at,
        last_claimed_at,
        attempt_count,
        claim_holder,
        claim_expires_at,
        retry_at,
        failure_count,
        last_failed_at,
        last_failed_attempt,
        last_error,
        failed_at,
    })
}

/// Decodes every row of `values`.
pub fn rows(session: &str, values: impl IntoIterator<Item = Value>) -> Result<Vec<StoredEvent>> {
    values.into_iter().map(|v| row(session, v)).collect()
}

/// Splits a reply `{tag, rest...}`.
pub fn tagged(value: Value) -> Result<(String, std::vec::IntoIter<Value>)> {
    let mut items = array(value)?.into_iter();
    let tag = string(items.next().ok_or_else(|| broken("empty reply"))?)?;
    Ok((tag, items))
}
