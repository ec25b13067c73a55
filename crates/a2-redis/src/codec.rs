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

/// An unsigned integer reply, or a string holding one: what a script
/// hands back as the text it was given, up to `u64::MAX` (beyond a Lua
/// number's exact range).
pub fn uint_text(value: Value) -> Result<u64> {
    match value {
        Value::Int(n) => u64::try_from(n).map_err(|_| broken("expected a non-negative integer")),
        other => {
            let text = string(other)?;
            text.parse()
                .map_err(|_| broken(format!("expected a non-negative integer, got {text:?}")))
        }
    }
}

/// The index of a stream entry id `{index}-0`.
pub fn entry_index(id: &str) -> Result<u64> {
    id.strip_suffix("-0")
        .and_then(|index| index.parse().ok())
        .ok_or_else(|| broken(format!("stream entry id {id:?}")))
}

/// The immutable part of a log entry, plus its lane and cause.
pub struct Entry {
    /// The event, with its lane and cause.
    pub event: Event,
}

/// Decodes a stream entry `{entry id, {field, value, ...}}` of `session`.
/// An entry that does not decode (a field missing, a payload that is not
/// JSON, a bad cause) is `Corrupted` (E1): retrying cannot help.
pub fn entry(session: &str, id: Value, fields: Value) -> Result<Entry> {
    let index = entry_index(&string(id)?)?;
    let bad = |what: String| {
        Error::corrupted(
            format!("log entry {index} of session {session:?}: {what}"),
            Some(session),
            Some(index),
        )
    };
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
                payload =
                    Some(serde_json::from_str(&value).map_err(|e| bad(format!("payload: {e}")))?)
            }
            "created_at" => {
                created_at = Some(
                    value
                        .parse::<Millis>()
                        .map_err(|_| bad(format!("created_at {value:?}")))?,
                )
            }
            "lane" => lane = Some(value),
            "cause" => {
                cause = Some(parse_cause(&value).ok_or_else(|| bad(format!("cause {value:?}")))?)
            }
            // `settled`: only the claim script reads it.
            _ => {}
        }
    }
    Ok(Entry {
        event: Event {
            id: event_id.ok_or_else(|| bad("no id".into()))?,
            event_type: event_type.ok_or_else(|| bad("no type".into()))?,
            payload: payload.ok_or_else(|| bad("no payload".into()))?,
            index,
            session_id: session.to_owned(),
            created_at: created_at.ok_or_else(|| bad("no created_at".into()))?,
            cause,
            lane,
        },
    })
}

/// `{index}:{attempt}` or `{index}:{attempt}:{batch size}` (B1); a batch
/// size of 0 is not one.
pub(crate) fn parse_cause(value: &str) -> Option<Cause> {
    let mut parts = value.split(':');
    let index = parts.next()?.parse().ok()?;
    let attempt = parts.next()?.parse().ok()?;
    let batch_size = match parts.next() {
        Some(batch) => Some(batch.parse().ok().filter(|&b: &u32| b > 0)?),
        None => None,
    };
    if parts.next().is_some() {
        return None;
    }
    Some(Cause {
        index,
        attempt,
        batch_size,
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

/// A stream entry's id and its event's id (the `id` field), from an
/// `XRANGE` reply's entry `[entry id, [field, value, …]]`.
pub fn entry_event_id(value: Value) -> Result<(String, Vec<u8>)> {
    let mut parts = array(value)?.into_iter();
    let (Some(entry_id), Some(fields)) = (parts.next(), parts.next()) else {
        return Err(broken("stream entry"));
    };
    let entry_id = string(entry_id)?;
    let mut fields = array(fields)?.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        if opt_bytes(name)?.as_deref() == Some(b"id") {
            let id = opt_bytes(value)?.ok_or_else(|| broken("an event id is nil"))?;
            return Ok((entry_id, id));
        }
    }
    Err(broken(format!("log entry {entry_id} has no id")))
}

/// A packed processing record as the scripts store it in the session hash
/// (`helpers.lua`): a JSON object whose absent keys are `None`/0. Counts
/// are JSON numbers; times, the holder, the error and the returned ids (a
/// JSON array, kept as text so CO3 compares it byte for byte) are strings,
/// so no value passes through Lua's doubles.
#[derive(Debug, Default, serde::Deserialize)]
struct Record {
    #[serde(default)]
    a: u32,
    fc: Option<String>,
    lc: Option<String>,
    h: Option<String>,
    x: Option<String>,
    r: Option<String>,
    #[serde(default)]
    n: u32,
    lf: Option<String>,
    la: Option<u32>,
    e: Option<String>,
    d: Option<String>,
    p: Option<String>,
    pa: Option<u32>,
    ret: Option<String>,
    c: Option<String>,
    cr: Option<String>,
}

fn time(value: Option<String>, what: &str) -> Result<Option<Millis>> {
    value
        .map(|v| {
            v.parse()
                .map_err(|_| broken(format!("record {what} {v:?}")))
        })
        .transpose()
}

/// Decodes a row `{entry id, fields, record JSON or nil}` (`helpers.lua`,
/// `rows_of`).
pub fn row(session: &str, value: Value) -> Result<StoredEvent> {
    let mut parts = array(value)?.into_iter();
    let (Some(id), Some(fields), Some(record)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(broken("row"));
    };
    let Entry { event } = entry(session, id, fields)?;
    stored(event, opt_bytes(record)?.as_deref())
}

/// An event with its packed record (`None`: a fresh event with no record).
pub fn stored(event: Event, record: Option<&[u8]>) -> Result<StoredEvent> {
    let index = event.index;
    let bad = |what: String| {
        Error::corrupted(
            format!(
                "record of event {index} of session {:?}: {what}",
                event.session_id
            ),
            Some(&event.session_id),
            Some(index),
        )
    };
    let r: Record = match record {
        Some(json) => serde_json::from_slice(json).map_err(|e| bad(e.to_string()))?,
        None => Record::default(),
    };
    let returned_event_ids = match r.ret {
        Some(json) => serde_json::from_str(&json).map_err(|e| bad(format!("returned ids: {e}")))?,
        None => Vec::new(),
    };
    Ok(StoredEvent {
        event,
        processed_at: time(r.p, "processed_at")?,
        processed_by_attempt: r.pa,
        returned_event_ids,
        first_claimed_at: time(r.fc, "first_claimed_at")?,
        last_claimed_at: time(r.lc, "last_claimed_at")?,
        attempt_count: r.a,
        claim_holder: r.h,
        claim_expires_at: time(r.x, "claim_expires_at")?,
        retry_at: time(r.r, "retry_at")?,
        failure_count: r.n,
        last_failed_at: time(r.lf, "last_failed_at")?,
        last_failed_attempt: r.la,
        last_error: r.e,
        failed_at: time(r.d, "failed_at")?,
        cancelled_at: time(r.c, "cancelled_at")?,
        cancel_reason: r.cr,
    })
}

/// Decodes every row of `values`.
pub fn rows(session: &str, values: impl IntoIterator<Item = Value>) -> Result<Vec<StoredEvent>> {
    values.into_iter().map(|v| row(session, v)).collect()
}

/// The numbers of a batch's joined common reply, `ok,{n}[,{n}...]`
/// (`lua::batch`), read where they lie into `out` (at most its length;
/// how many it holds comes back); `None` for any other reply.
pub(crate) fn joined_ok(value: &Value, out: &mut [u64]) -> Option<Result<usize>> {
    let Value::BulkString(joined) = value else {
        return None;
    };
    let rest = joined.strip_prefix(b"ok,")?;
    let not_a_number = || broken("a joined reply with a part that is not a number");
    let mut count = 0;
    for part in rest.split(|b| *b == b',') {
        let Some(slot) = out.get_mut(count) else {
            return Some(Err(broken(
                "a joined reply with more parts than it may have",
            )));
        };
        if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
            return Some(Err(not_a_number()));
        }
        // Up to 19 digits: below 10^19, within u64.
        *slot = part.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
        count += 1;
    }
    Some(Ok(count))
}

/// Splits a reply `{tag, rest...}`; a batch's joined common reply
/// (`ok,…`, see [`joined_ok`]) splits as the array it stands for.
pub fn tagged(value: Value) -> Result<(String, std::vec::IntoIter<Value>)> {
    if let Value::BulkString(joined) = &value
        && joined.starts_with(b"ok,")
    {
        let items: Vec<Value> = joined
            .split(|b| *b == b',')
            .map(|part| Value::BulkString(part.to_vec()))
            .collect();
        let mut items = items.into_iter();
        items.next();
        return Ok(("ok".to_owned(), items));
    }
    let mut items = array(value)?.into_iter();
    let tag = string(items.next().ok_or_else(|| broken("empty reply"))?)?;
    Ok((tag, items))
}

/// An array of indexes.
pub fn indexes(value: Value) -> Result<Vec<u64>> {
    array(value)?.into_iter().map(uint).collect()
}
