//! New events on their way into a script (`append.lua`, `complete.lua`):
//! ids assigned, payloads serialized once, the wake-up built.

use a2_core::{Cause, IdSource, Millis, NewEvent, Result, StoredEvent};

use super::Args;
use crate::layout::encode;

/// A batch ready to write: ids assigned, payloads serialized.
pub(crate) struct Batch {
    pub(crate) ids: Vec<String>,
    pub(crate) events: Vec<NewEvent>,
    pub(crate) payloads: Vec<String>,
    /// Each event's due time (DL1), once [`Batch::schedule`] knew the
    /// store's now; empty when no event waits.
    due: Vec<Option<Millis>>,
}

impl Batch {
    /// Gives every event its final id (A11, A3: the shared
    /// [`a2_core::rules::append::assign_ids`]).
    pub(crate) fn new(mut events: Vec<NewEvent>, ids: &dyn IdSource) -> Result<Self> {
        a2_core::rules::append::assign_ids(&mut events, ids)?;
        let ids: Vec<String> = events
            .iter_mut()
            .map(|e| e.id.take().unwrap_or_default())
            .collect();
        let payloads = events.iter().map(|e| e.payload.to_string()).collect();
        Ok(Self {
            ids,
            events,
            payloads,
            due: Vec::new(),
        })
    }

    /// DL1: the events' due times at the store's `now`, checked (a
    /// `not_before` more than 100 years ahead is `InvalidArgument`).
    pub(crate) fn schedule(&mut self, now: Millis) -> Result<()> {
        self.due = a2_core::rules::delay::due_times(&self.events, now)?.unwrap_or_default();
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// The bytes of the events' ids, types and payloads.
    pub(crate) fn bytes(&self) -> usize {
        self.ids
            .iter()
            .zip(&self.events)
            .zip(&self.payloads)
            .map(|((id, e), p)| id.len() + e.event_type.len() + p.len())
            .sum()
    }

    /// The events as a wake-up carries them, `[[id, type, payload], ...]`,
    /// or `""` when that is over `cap` bytes (ST2). An event with a lane or
    /// a cause (`cause` overrides the events' own, as in [`Batch::encode`])
    /// carries them after its payload: `[id, type, payload, lane | null,
    /// cause | null]`, the cause as the log stores it ([`encode_cause`]).
    pub(crate) fn wake(&self, cap: usize, cause: Option<Cause>) -> String {
        // One buffer, sized up front; the strings are escaped into it
        // directly (a wake-up is built for every append).
        let size: usize = self
            .ids
            .iter()
            .zip(&self.events)
            .zip(&self.payloads)
            .map(|((id, e), p)| id.len() + e.event_type.len() + p.len() + 8)
            .sum();
        if size > cap.saturating_add(cap / 2 + 64) {
            return String::new();
        }
        let mut out = Vec::with_capacity(size + 2);
        out.push(b'[');
        for (k, (id, event)) in self.ids.iter().zip(&self.events).enumerate() {
            if k > 0 {
                out.push(b',');
            }
            out.push(b'[');
            // Writing a `str` into a `Vec` cannot fail.
            let _ = serde_json::to_writer(&mut out, id.as_str());
            out.push(b',');
            let _ = serde_json::to_writer(&mut out, event.event_type.as_str());
            out.push(b',');
            out.extend_from_slice(self.payloads[k].as_bytes());
            let cause = cause.or(event.cause);
            if event.lane.is_some() || cause.is_some() {
                out.push(b',');
                let _ = serde_json::to_writer(&mut out, &event.lane);
                out.push(b',');
                let _ = serde_json::to_writer(&mut out, &cause.map(encode_cause));
            }
            out.push(b']');
            if out.len() > cap {
                return String::new();
            }
        }
        out.push(b']');
        // Only JSON text went in.
        String::from_utf8(out).unwrap_or_default()
    }

    /// `EVENT_STRIDE` arguments per event (`append_events` in helpers.lua),
    /// each named `events`: id, type, payload and [`extras`]; `cause`
    /// overrides the events' own.
    pub(crate) fn encode(&self, args: &mut Args, cause: Option<Cause>) {
        for (k, event) in self.events.iter().enumerate() {
            args.s("events", &self.ids[k])
                .s("events", &event.event_type)
                .s("events", &self.payloads[k])
                .s(
                    "events",
                    extras(
                        event,
                        cause.or(event.cause),
                        self.due.get(k).copied().flatten(),
                    ),
                );
        }
    }

    /// Rows of the events a script just appended from `first` on, at the
    /// `now` [`Batch::schedule`] was given, with the due times it decided.
    pub(crate) fn rows(
        self,
        session: &str,
        first: u64,
        now: Millis,
        cause: Option<Cause>,
    ) -> Vec<StoredEvent> {
        let due = self.due;
        self.ids
            .into_iter()
            .zip(self.events)
            .enumerate()
            .map(|(k, (id, e))| {
                let due = due.get(k).copied().flatten();
                StoredEvent::appended(id, e, session, first + k as u64, now, due, cause)
            })
            .collect()
    }
}

/// An event's rarer attributes in one argument (`extras` in helpers.lua):
/// empty for an event without lane, cause, `settled` or due time, else
/// `{1 if settled else 0}|{due}|{cause}|{encoded lane}|{lane}`. Neither a
/// due time, a cause nor an encoded lane holds `|`, and the raw lane comes
/// last, so the script splits at the first three after the flag.
pub(crate) fn extras(event: &NewEvent, cause: Option<Cause>, due: Option<Millis>) -> String {
    let lane = event.lane.as_deref().unwrap_or("");
    if lane.is_empty() && cause.is_none() && !event.settled && due.is_none() {
        return String::new();
    }
    format!(
        "{}|{}|{}|{}|{lane}",
        if event.settled { '1' } else { '0' },
        due.map(|at| at.to_string()).unwrap_or_default(),
        cause.map(encode_cause).unwrap_or_default(),
        if lane.is_empty() {
            String::new()
        } else {
            encode(lane)
        },
    )
}

/// A cause as the log stores it: `{index}:{attempt}`, and `:{batch size}`
/// when the causing attempt handled a batch (B1). Scripts read the first
/// two parts only.
pub(crate) fn encode_cause(cause: Cause) -> String {
    match cause.batch_size {
        Some(batch) => format!("{}:{}:{batch}", cause.index, cause.attempt),
        None => format!("{}:{}", cause.index, cause.attempt),
    }
}
