//! The checks of new events (A12, J1), shared by `append` and
//! `complete_attempt`, and the compact JSON text their payloads measure.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::Value;

use super::*;
use crate::error::{Error, Result};
use crate::model::{CompleteRequest, NewEvent};

/// A batch of new events (A3, A12, CO6). `allow_cause` is false for events
/// returned to `complete_attempt`, whose cause the store sets itself.
///
/// Checks, in order: batch length; per event id, type, lane, payload size and
/// cause; then ids repeated within the batch (A3, `PartialDuplicateBatch`).
pub fn batch(events: &[NewEvent], limits: &Limits, allow_cause: bool) -> Result<()> {
    check_batch(events, limits, allow_cause, |position, payload| {
        check_payload(position, payload, limits)
    })
}

/// The payloads of a batch as compact JSON, one text per event.
#[derive(Debug)]
pub(crate) struct Payloads {
    /// The texts, one after another.
    text: String,
    /// Where each event's text ends in `text`.
    ends: Vec<usize>,
}

impl Payloads {
    /// The payload text of the event at `position`.
    pub(crate) fn get(&self, position: usize) -> &str {
        let start = match position.checked_sub(1) {
            Some(before) => self.ends.get(before).copied().unwrap_or_default(),
            None => 0,
        };
        let end = self.ends.get(position).copied().unwrap_or_default();
        // Every end was taken after a whole text was written, so each range
        // is a text; the empty default never shows.
        self.text.get(start..end).unwrap_or_default()
    }
}

/// [`batch`], keeping each payload as the compact JSON text its size was
/// measured on: what a store that keeps payloads as text writes, without
/// serializing them a second time. The same checks in the same order, with
/// the same errors. The text reads back exactly (J2): the workspace builds
/// serde_json with `float_roundtrip`.
pub(crate) fn encode_batch(
    events: &[NewEvent],
    limits: &Limits,
    allow_cause: bool,
) -> Result<Payloads> {
    let mut ends = Vec::with_capacity(events.len());
    let mut buf = Vec::with_capacity(64 * events.len());
    check_batch(events, limits, allow_cause, |position, payload| {
        encode_payload(position, payload, limits, &mut buf)?;
        ends.push(buf.len());
        Ok(())
    })?;
    // serde_json writes UTF-8 only, so this never fails; were it to, the
    // payloads would not be ones the store could keep.
    let text =
        String::from_utf8(buf).map_err(|e| Error::serialization(format!("payloads: {e}")))?;
    Ok(Payloads { text, ends })
}

/// Field `what` of the event at `position`: not empty (`instead` says what
/// to do then, if anything) and at most `max` bytes.
fn event_field(position: usize, what: &str, value: &str, max: usize, instead: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(format!(
            "event {position}: {what} must not be empty{instead}"
        )));
    }
    if value.len() > max {
        return Err(Error::invalid(format!(
            "event {position}: {what} is {} bytes, the limit is {max}",
            value.len()
        )));
    }
    Ok(())
}

/// The checks of [`batch`], with `payload` checking (and perhaps keeping)
/// the payload of the event at a position.
fn check_batch(
    events: &[NewEvent],
    limits: &Limits,
    allow_cause: bool,
    mut payload: impl FnMut(usize, &Value) -> Result<()>,
) -> Result<()> {
    if events.len() > limits.max_batch_len {
        return Err(Error::invalid(format!(
            "batch has {} events, over the limit of {} (max_batch_len of the store's limits)",
            events.len(),
            limits.max_batch_len
        )));
    }
    for (position, event) in events.iter().enumerate() {
        if let Some(id) = &event.id {
            event_field(position, "id", id, MAX_EVENT_ID_BYTES, "")?;
        }
        event_field(position, "type", &event.event_type, MAX_TYPE_BYTES, "")?;
        if let Some(lane) = &event.lane {
            event_field(
                position,
                "lane",
                lane,
                MAX_LANE_BYTES,
                " (use no lane instead)",
            )?;
        }
        payload(position, &event.payload)?;
        if let Some(cause) = event.cause {
            if !allow_cause {
                return Err(Error::invalid(format!(
                    "event {position}: returned events must not set a cause"
                )));
            }
            if cause.index == 0 || cause.attempt == 0 {
                return Err(Error::invalid(format!(
                    "event {position}: cause index and attempt start at 1"
                )));
            }
            if cause.batch_size == Some(0) {
                return Err(Error::invalid(format!(
                    "event {position}: cause batch size must be at least 1"
                )));
            }
        }
        check_delay(position, event)?;
    }
    if let Some(id) = repeated_id(events) {
        return Err(Error::duplicate(format!(
            "id {id:?} appears twice in the batch"
        )));
    }
    Ok(())
}

/// DL1's checks that need no clock: at most one of `not_before` and
/// `delay_ms`, none on a settled event, a delay of at most 100 years.
fn check_delay(position: usize, event: &NewEvent) -> Result<()> {
    if event.not_before.is_none() && event.delay_ms.is_none() {
        return Ok(());
    }
    if event.not_before.is_some() && event.delay_ms.is_some() {
        return Err(Error::invalid(format!(
            "event {position}: give not_before or delay_ms, not both"
        )));
    }
    if event.settled {
        return Err(Error::invalid(format!(
            "event {position}: a settled event is never claimed, so it cannot wait (not_before, delay_ms)"
        )));
    }
    if let Some(delay) = event.delay_ms
        && delay > MAX_TTL_MS
    {
        return Err(Error::invalid(format!(
            "event {position}: delay_ms {delay} is over 100 years ({MAX_TTL_MS} ms)"
        )));
    }
    Ok(())
}

/// The first caller-chosen id of the batch that an earlier event also has.
fn repeated_id(events: &[NewEvent]) -> Option<&str> {
    /// Up to this many events, comparing with every earlier id beats
    /// building a hash set (most batches hold one event).
    const SCAN_UP_TO: usize = 16;
    if events.len() <= SCAN_UP_TO {
        for (position, event) in events.iter().enumerate() {
            let Some(id) = event.id.as_deref() else {
                continue;
            };
            if events[..position]
                .iter()
                .any(|e| e.id.as_deref() == Some(id))
            {
                return Some(id);
            }
        }
        return None;
    }
    let mut seen = HashSet::with_capacity(events.len());
    events
        .iter()
        .filter_map(|e| e.id.as_deref())
        .find(|&id| !seen.insert(id))
}

/// The payload checks of [`batch`] for the event at `position`: its size
/// as compact JSON, then its nesting (J1).
fn check_payload(position: usize, payload: &Value, limits: &Limits) -> Result<()> {
    let size = payload_size(payload);
    if size > limits.max_payload_bytes {
        return Err(payload_too_big(position, size, limits));
    }
    // The message is built only when it is needed: this runs for every
    // event of every append.
    if nested_too_deep(payload) {
        return Err(payload_too_deep(position));
    }
    Ok(())
}

fn payload_too_big(position: usize, size: usize, limits: &Limits) -> Error {
    Error::invalid(format!(
        "event {position}: payload is {size} bytes, over the limit of {} (max_payload_bytes of the store's limits; `a2 serve --max-payload-bytes`)",
        limits.max_payload_bytes
    ))
}

fn payload_too_deep(position: usize) -> Error {
    Error::invalid(format!(
        "event {position}: payload is nested more than {MAX_JSON_DEPTH} levels deep"
    ))
}

/// [`check_payload`] in one walk that also appends the payload's compact
/// JSON to `buf`.
fn encode_payload(
    position: usize,
    payload: &Value,
    limits: &Limits,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let start = buf.len();
    let mut serializer = serde_json::Serializer::with_formatter(&mut *buf, DepthLimited(0));
    if payload.serialize(&mut serializer).is_err() {
        // Too deep (the only error a `Value` into a `Vec` can give): the
        // separate checks report it, or its size, exactly as `batch` does.
        check_payload(position, payload, limits)?;
        return Err(payload_too_deep(position));
    }
    let size = buf.len() - start;
    if size > limits.max_payload_bytes {
        return Err(payload_too_big(position, size, limits));
    }
    Ok(())
}

/// serde_json's compact output, refusing to open an array or object more
/// than [`MAX_JSON_DEPTH`] levels deep: the depth check of J1 done by the
/// walk that writes the text.
struct DepthLimited(usize);

impl DepthLimited {
    fn open<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.0 += 1;
        if self.0 > MAX_JSON_DEPTH {
            return Err(std::io::Error::other("nested too deep"));
        }
        writer.write_all(bracket)
    }

    fn close<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.0 -= 1;
        writer.write_all(bracket)
    }
}

impl serde_json::ser::Formatter for DepthLimited {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"}")
    }
}

/// A completion (CO6, B1): session id, the returned events (without
/// causes), then a batch size of at least 1 when given.
pub fn complete_request(request: &CompleteRequest, limits: &Limits) -> Result<()> {
    complete_request_with(request, |events| batch(events, limits, false))
}

/// [`complete_request`], keeping the returned events' payloads as compact
/// JSON text (see [`encode_batch`]).
pub(crate) fn encode_complete_request(
    request: &CompleteRequest,
    limits: &Limits,
) -> Result<Payloads> {
    complete_request_with(request, |events| encode_batch(events, limits, false))
}

/// The checks of [`complete_request`], with `events` checking the batch.
fn complete_request_with<T>(
    request: &CompleteRequest,
    events: impl FnOnce(&[NewEvent]) -> Result<T>,
) -> Result<T> {
    session_id(&request.session)?;
    let checked = events(&request.events)?;
    if request.batch_size == Some(0) {
        return Err(Error::invalid("batch size must be at least 1"));
    }
    Ok(checked)
}

/// Size of a payload as compact JSON.
pub fn payload_size(payload: &serde_json::Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a `Value` into an in-memory sink cannot fail: every `Value`
    // serializes, and `Counter::write` never errors.
    let _ = serde_json::to_writer(&mut counter, payload);
    counter.0
}
