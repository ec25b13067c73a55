//! How the memory store keeps one stored event: [`Row`].
//!
//! # Why not keep a [`StoredEvent`]?
//! A row is written once per appended event and kept for the life of the
//! session, so it is kept small and cheap to write rather than ready to hand
//! out:
//! - The payload is kept as the compact JSON text that validation measured
//!   (and had to write anyway), not as a [`Value`]: a `{"n": 1}` object is a
//!   B-tree node of over 600 bytes, its text 7 bytes. The session keeps the
//!   text with the id in its texts (see `texts`). The caller's `Value` goes
//!   back in the append's reply as it is, where a kept `Value` would cost a
//!   deep copy per event. JSON text reads back exactly (`float_roundtrip`,
//!   J2), as on the stores that keep text anyway.
//! - The session id and index are not repeated per row: the log's position
//!   gives the index and the session holds its id. Types and lanes repeat
//!   from row to row: the session keeps each once and rows share it.
//! - What only claims, failures and completions set is kept out of line in
//!   a [`Work`], made at the first claim: many rows are never claimed
//!   (settled events, replies), and a row takes at most 128 bytes where a
//!   `StoredEvent` takes 376.
//!
//! The price is on reads: parsing a payload costs more than copying a
//! `Value` did. In instructions per event read (callgrind), a `{"n": 1}`
//! payload went from about 1 460 to 2 520 and a 150-byte chat message from
//! 2 470 to 5 000, while the append of one such event saves about 2 500 and
//! 2 200, and most of its memory and page faults. The memory store's work
//! cycle, which reads every event when it is claimed, got faster.
//!
//! The processing record keeps the fields and meaning of [`StoredEvent`]'s.

use std::sync::Arc;

use serde_json::Value;

use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::model::{Cause, Event, NewEvent, StoredEvent};
use crate::rules::Record;

use super::texts::{TextRef, Texts};

/// One stored event: the event without its session and index, and its
/// processing record (the fields of [`StoredEvent`], same names, same
/// meaning).
#[derive(Debug)]
pub(super) struct Row {
    /// Where the session's texts keep the id and the payload, compact JSON
    /// as validation wrote it.
    pub(super) text: TextRef,
    /// Shared with the session's other rows of this type.
    pub(super) event_type: Arc<str>,
    pub(super) created_at: Millis,
    pub(super) cause: Option<Cause>,
    /// Shared with the session's other rows of this lane.
    pub(super) lane: Option<Arc<str>>,
    pub(super) processed_at: Option<Millis>,
    pub(super) attempt_count: u32,
    pub(super) failure_count: u32,
    /// The rest of the record, from the first claim on: `None` reads as
    /// [`Work::NONE`].
    work: Option<Box<Work>>,
}

/// The part of the processing record that only claims, failures and
/// completions set, kept out of line: most rows are never claimed (settled
/// events, replies), and a row is copied and kept whole for every append.
#[derive(Debug, Clone)]
pub(super) struct Work {
    pub(super) processed_by_attempt: Option<u32>,
    pub(super) returned_event_ids: Vec<String>,
    pub(super) first_claimed_at: Option<Millis>,
    pub(super) last_claimed_at: Option<Millis>,
    pub(super) claim_holder: Option<String>,
    pub(super) claim_expires_at: Option<Millis>,
    pub(super) retry_at: Option<Millis>,
    pub(super) last_failed_at: Option<Millis>,
    pub(super) last_failed_attempt: Option<u32>,
    pub(super) last_error: Option<String>,
    pub(super) failed_at: Option<Millis>,
    pub(super) cancelled_at: Option<Millis>,
    pub(super) cancel_reason: Option<String>,
}

impl Work {
    /// The record of an event never claimed.
    const NONE: Work = Work {
        processed_by_attempt: None,
        returned_event_ids: Vec::new(),
        first_claimed_at: None,
        last_claimed_at: None,
        claim_holder: None,
        claim_expires_at: None,
        retry_at: None,
        last_failed_at: None,
        last_failed_attempt: None,
        last_error: None,
        failed_at: None,
        cancelled_at: None,
        cancel_reason: None,
    };
}

/// What [`Row::work`] lends for a row without one.
static NO_WORK: Work = Work::NONE;

impl Row {
    /// The row of `new`, appended at `now` with its id and payload kept at
    /// `text` and the session's copies of its type and lane (A1, A8, A11).
    /// `cause` is the attempt whose completion returned it (CO2), standing
    /// in for the event's own, as in [`StoredEvent::appended`].
    pub(super) fn appended(
        text: TextRef,
        new: &NewEvent,
        event_type: Arc<str>,
        lane: Option<Arc<str>>,
        now: Millis,
        cause: Option<Cause>,
    ) -> Row {
        // DL1: a delayed event waits for its due time as for a retry.
        let work = crate::rules::delay::due(new, now).map(|at| {
            Box::new(Work {
                retry_at: Some(at),
                ..Work::NONE
            })
        });
        Row {
            text,
            event_type,
            created_at: now,
            cause: cause.or(new.cause),
            lane,
            processed_at: new.settled.then_some(now),
            attempt_count: 0,
            failure_count: 0,
            work,
        }
    }

    /// FK1, FK2: this row in a fork, with its id and payload kept at `text`
    /// and the fork's copies of its type and lane: the same event and
    /// record, its lease released (RL1).
    pub(super) fn forked(
        &self,
        text: TextRef,
        event_type: Arc<str>,
        lane: Option<Arc<str>>,
    ) -> Row {
        let work = self.work.as_deref().map(|work| {
            Box::new(Work {
                claim_holder: None,
                claim_expires_at: None,
                ..work.clone()
            })
        });
        Row {
            text,
            event_type,
            created_at: self.created_at,
            cause: self.cause,
            lane,
            processed_at: self.processed_at,
            attempt_count: self.attempt_count,
            failure_count: self.failure_count,
            work,
        }
    }

    /// The part of the record set by claims, failures and completions.
    pub(super) fn work(&self) -> &Work {
        self.work.as_deref().unwrap_or(&NO_WORK)
    }

    /// [`Row::work`] to change, made on first use.
    pub(super) fn work_mut(&mut self) -> &mut Work {
        self.work.get_or_insert_with(|| Box::new(Work::NONE))
    }

    /// What the rules read of the processing record.
    pub(super) fn record(&self) -> Record<'_> {
        let work = self.work();
        Record {
            attempt_count: self.attempt_count,
            processed_at: self.processed_at,
            processed_by_attempt: work.processed_by_attempt,
            returned_event_ids: &work.returned_event_ids,
            claim_holder: work.claim_holder.as_deref(),
            claim_expires_at: work.claim_expires_at,
            retry_at: work.retry_at,
            failure_count: self.failure_count,
            last_failed_attempt: work.last_failed_attempt,
            failed_at: work.failed_at,
            cancelled_at: work.cancelled_at,
        }
    }

    /// Neither processed nor dead-lettered.
    pub(super) fn is_pending(&self) -> bool {
        self.processed_at.is_none() && self.work().failed_at.is_none()
    }

    /// The payload, read back from its text in `texts`.
    pub(super) fn payload(&self, texts: &Texts, session_id: &str, index: u64) -> Result<Value> {
        // The text is serde_json's own output for a `Value` nested at most
        // MAX_JSON_DEPTH (64) levels, below its parser's limit (128): it
        // always parses. Should it ever not, the row is broken.
        serde_json::from_str(texts.payload(self.text)).map_err(|e| {
            Error::corrupted(
                format!("stored payload does not parse: {e}"),
                Some(session_id),
                Some(index),
            )
        })
    }

    /// The event as stored at `index` of `session_id`, with its texts in
    /// `texts`.
    pub(super) fn event(&self, texts: &Texts, session_id: &str, index: u64) -> Result<Event> {
        Ok(Event {
            id: String::from(texts.id(self.text)),
            event_type: String::from(&*self.event_type),
            payload: self.payload(texts, session_id, index)?,
            index,
            session_id: session_id.to_owned(),
            created_at: self.created_at,
            cause: self.cause,
            lane: self.lane.as_deref().map(String::from),
        })
    }

    /// The event and its processing record, stored at `index` of
    /// `session_id`, with its texts in `texts`.
    pub(super) fn stored(
        &self,
        texts: &Texts,
        session_id: &str,
        index: u64,
    ) -> Result<StoredEvent> {
        let work = self.work();
        Ok(StoredEvent {
            event: self.event(texts, session_id, index)?,
            processed_at: self.processed_at,
            processed_by_attempt: work.processed_by_attempt,
            returned_event_ids: work.returned_event_ids.clone(),
            first_claimed_at: work.first_claimed_at,
            last_claimed_at: work.last_claimed_at,
            attempt_count: self.attempt_count,
            claim_holder: work.claim_holder.clone(),
            claim_expires_at: work.claim_expires_at,
            retry_at: work.retry_at,
            failure_count: self.failure_count,
            last_failed_at: work.last_failed_at,
            last_failed_attempt: work.last_failed_attempt,
            last_error: work.last_error.clone(),
            failed_at: work.failed_at,
            cancelled_at: work.cancelled_at,
            cancel_reason: work.cancel_reason.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_stays_small() {
        // What the module's docs promise, on 64-bit targets.
        if cfg!(target_pointer_width = "64") {
            assert!(std::mem::size_of::<Row>() <= 128);
        }
    }
}
