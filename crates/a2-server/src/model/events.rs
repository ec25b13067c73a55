//! Events as the API writes and reads them: new events, stored events with
//! their processing record, appends.

use a2_core::{AppendOutcome, Cause, Event, NewEvent, StoredEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// Which attempt of which event produced an event (A7, CO2, B1).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CauseBody {
    /// Index of the causing event in the same session.
    #[schema(minimum = 1)]
    pub index: u64,
    /// The attempt of the causing event that produced this one.
    pub attempt: u32,
    /// How many events the handler processed in the call, when it handled
    /// a batch (B1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub batch_size: Option<u32>,
}

impl From<Cause> for CauseBody {
    fn from(c: Cause) -> Self {
        Self {
            index: c.index,
            attempt: c.attempt,
            batch_size: c.batch_size,
        }
    }
}

impl From<CauseBody> for Cause {
    fn from(c: CauseBody) -> Self {
        Cause {
            index: c.index,
            attempt: c.attempt,
            batch_size: c.batch_size,
        }
    }
}

/// An event to append; only `type` is required.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEventBody {
    /// The event id, unique within the session; generated when left out.
    /// Sending the same ids again is a retry: nothing is written and the
    /// original rows come back (A5).
    pub id: Option<String>,
    /// The event type: non-empty, at most 256 bytes.
    #[serde(rename = "type")]
    #[schema(min_length = 1, max_length = 256)]
    pub event_type: String,
    /// Any JSON value.
    #[serde(default)]
    pub payload: Value,
    /// The FIFO lane the event waits in.
    pub lane: Option<String>,
    /// Processed at append, never claimable (A8).
    #[serde(default)]
    pub settled: bool,
    /// The attempt that produced this event (A7).
    pub cause: Option<CauseBody>,
    /// Not claimable before this time (store clock, ms since the epoch,
    /// DL1); a time already past is ready at once.
    pub not_before: Option<i64>,
    /// Not claimable before this many ms after the append (DL1); at most
    /// one of `not_before` and `delay_ms`.
    pub delay_ms: Option<u64>,
}

impl From<NewEventBody> for NewEvent {
    fn from(e: NewEventBody) -> Self {
        let mut event = NewEvent::new(e.event_type, e.payload);
        event.id = e.id;
        event.lane = e.lane;
        event.settled = e.settled;
        event.cause = e.cause.map(Cause::from);
        event.not_before = e.not_before;
        event.delay_ms = e.delay_ms;
        event
    }
}

/// The body of an append.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendBody {
    /// The batch, appended atomically (A1).
    pub events: Vec<NewEventBody>,
    /// Sets the session's expiry in the same step (EX2): on the append that
    /// creates the session, or a later one.
    pub expiry: Option<ExpiryBody>,
    /// Appends only if the session's last index is this one (0: no events
    /// yet), else 409 `FrontierMoved` and nothing written (A13): a writer
    /// that decided on what it read appends only if nothing came between.
    pub if_frontier: Option<u64>,
    /// Closes the session at the last index this append reaches, in the
    /// same atomic step (CL6): later appends are 409 `SessionClosed` and
    /// live feeds end after these events. The batch must not be empty.
    #[serde(default)]
    pub close: bool,
}

/// A session's expiry (EX1): a sliding ttl, an absolute time, or both;
/// neither removes it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpiryBody {
    /// Expire this long (ms) after the session's last write.
    pub ttl_ms: Option<u64>,
    /// Expire at this time (store clock, ms since the epoch) at the latest.
    pub expires_at: Option<i64>,
}

impl From<ExpiryBody> for a2_core::Expiry {
    fn from(b: ExpiryBody) -> Self {
        a2_core::Expiry {
            ttl_ms: b.ttl_ms,
            expires_at: b.expires_at,
        }
    }
}

/// The answer to setting an expiry (EX2).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExpiryResponse {
    /// When the session expires now (store clock, ms), or null.
    pub deadline: Option<i64>,
}

/// The processing state of an event, derived from its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventState {
    /// Neither processed nor dead-lettered.
    Pending,
    /// Pending, never claimed, with a due time (`retry_at`) set at append
    /// (DL1): it waits for that time, then for a worker.
    Delayed,
    /// Processed (or settled at append).
    Processed,
    /// Cancelled (CN1): settled without running to the end.
    Cancelled,
    /// Dead-lettered: failed too often; blocks its lane.
    DeadLettered,
}

/// An event as appended (the live feeds carry these).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventBody {
    /// Unique within its session.
    pub id: String,
    /// The event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload.
    pub payload: Value,
    /// Dense per session, from 1.
    pub index: u64,
    /// The session.
    pub session_id: String,
    /// Store clock at append, ms since the epoch.
    pub created_at: i64,
    /// The attempt whose handling produced this event (A7, CO2): how a
    /// reply links to the message it answers.
    pub cause: Option<CauseBody>,
    /// The event's lane: how a chat groups its messages.
    pub lane: Option<String>,
}

impl From<Event> for EventBody {
    fn from(e: Event) -> Self {
        Self {
            id: e.id,
            event_type: e.event_type,
            payload: e.payload,
            index: e.index,
            session_id: e.session_id,
            created_at: e.created_at,
            cause: e.cause.map(CauseBody::from),
            lane: e.lane,
        }
    }
}

/// An event with its processing record (times are store-clock ms).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StoredEventBody {
    /// Unique within its session.
    pub id: String,
    /// The event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload.
    pub payload: Value,
    /// Dense per session, from 1.
    pub index: u64,
    /// The session.
    pub session_id: String,
    /// Store clock at append.
    pub created_at: i64,
    /// Pending, delayed, processed, cancelled or dead-lettered.
    pub state: EventState,
    /// The attempt whose handling produced this event.
    pub cause: Option<CauseBody>,
    /// The event's lane.
    pub lane: Option<String>,
    /// When it was processed.
    pub processed_at: Option<i64>,
    /// Which attempt completed it.
    pub processed_by_attempt: Option<u32>,
    /// Ids of the events its completion appended.
    pub returned_event_ids: Vec<String>,
    /// When it was first claimed.
    pub first_claimed_at: Option<i64>,
    /// When it was last claimed.
    pub last_claimed_at: Option<i64>,
    /// How many times it was claimed: the current attempt number.
    pub attempt_count: u32,
    /// Holder of the current lease.
    pub claim_holder: Option<String>,
    /// Expiry of the current lease.
    pub claim_expires_at: Option<i64>,
    /// Not claimable before this time (retry backoff).
    pub retry_at: Option<i64>,
    /// How many attempts failed.
    pub failure_count: u32,
    /// When the last failure was recorded.
    pub last_failed_at: Option<i64>,
    /// Which attempt failed last.
    pub last_failed_attempt: Option<u32>,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// When it was dead-lettered.
    pub failed_at: Option<i64>,
    /// When it was cancelled (CN1).
    pub cancelled_at: Option<i64>,
    /// Why it was cancelled (CN1).
    pub cancel_reason: Option<String>,
}

impl From<StoredEvent> for StoredEventBody {
    fn from(s: StoredEvent) -> Self {
        let state = match s.state() {
            a2_core::EventState::Pending => EventState::Pending,
            a2_core::EventState::Delayed => EventState::Delayed,
            a2_core::EventState::Processed => EventState::Processed,
            a2_core::EventState::Cancelled => EventState::Cancelled,
            a2_core::EventState::DeadLettered => EventState::DeadLettered,
        };
        Self {
            id: s.event.id,
            event_type: s.event.event_type,
            payload: s.event.payload,
            index: s.event.index,
            session_id: s.event.session_id,
            created_at: s.event.created_at,
            state,
            cause: s.event.cause.map(CauseBody::from),
            lane: s.event.lane,
            processed_at: s.processed_at,
            processed_by_attempt: s.processed_by_attempt,
            returned_event_ids: s.returned_event_ids,
            first_claimed_at: s.first_claimed_at,
            last_claimed_at: s.last_claimed_at,
            attempt_count: s.attempt_count,
            claim_holder: s.claim_holder,
            claim_expires_at: s.claim_expires_at,
            retry_at: s.retry_at,
            failure_count: s.failure_count,
            last_failed_at: s.last_failed_at,
            last_failed_attempt: s.last_failed_attempt,
            last_error: s.last_error,
            failed_at: s.failed_at,
            cancelled_at: s.cancelled_at,
            cancel_reason: s.cancel_reason,
        }
    }
}

/// What a client of the API reads back: the stored event (`state` is
/// derived from the record, so it is not needed).
impl From<StoredEventBody> for StoredEvent {
    fn from(b: StoredEventBody) -> Self {
        StoredEvent {
            event: Event {
                id: b.id,
                event_type: b.event_type,
                payload: b.payload,
                index: b.index,
                session_id: b.session_id,
                created_at: b.created_at,
                cause: b.cause.map(Cause::from),
                lane: b.lane,
            },
            processed_at: b.processed_at,
            processed_by_attempt: b.processed_by_attempt,
            returned_event_ids: b.returned_event_ids,
            first_claimed_at: b.first_claimed_at,
            last_claimed_at: b.last_claimed_at,
            attempt_count: b.attempt_count,
            claim_holder: b.claim_holder,
            claim_expires_at: b.claim_expires_at,
            retry_at: b.retry_at,
            failure_count: b.failure_count,
            last_failed_at: b.last_failed_at,
            last_failed_attempt: b.last_failed_attempt,
            last_error: b.last_error,
            failed_at: b.failed_at,
            cancelled_at: b.cancelled_at,
            cancel_reason: b.cancel_reason,
        }
    }
}

pub(crate) fn rows(events: Vec<StoredEvent>) -> Vec<StoredEventBody> {
    events.into_iter().map(StoredEventBody::from).collect()
}

/// The answer to an append.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AppendResponse {
    /// The stored rows in index order (the originals for a retry, A5).
    pub events: Vec<StoredEventBody>,
    /// Whether the session has pending events after the write.
    pub has_pending: bool,
}

impl From<AppendOutcome> for AppendResponse {
    fn from(o: AppendOutcome) -> Self {
        Self {
            events: rows(o.events),
            has_pending: o.has_pending,
        }
    }
}
