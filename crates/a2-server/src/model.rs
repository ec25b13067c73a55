//! The JSON shapes of the HTTP API, each with its OpenAPI schema.
//!
//! They mirror the store's types (`a2_core`) field for field, with tagged
//! outcomes (`{"outcome": "claimed", …}`) where the store has enums, and
//! they are what is serialized, so the published document describes
//! exactly what goes over the wire.

use std::collections::BTreeMap;

use a2_core::{
    AppendOutcome, Cause, Event, EventsPage, HistoryPage, NewEvent, PresenceEntry, PresencePatch,
    SessionList, SessionSummary, SnapshotInfo, StateRead, StoredEvent,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

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
    #[serde(default)]
    pub id: Option<String>,
    /// The event type: non-empty, at most 256 bytes.
    #[serde(rename = "type")]
    #[schema(min_length = 1, max_length = 256)]
    pub event_type: String,
    /// Any JSON value.
    #[serde(default)]
    pub payload: Value,
    /// The FIFO lane the event waits in.
    #[serde(default)]
    pub lane: Option<String>,
    /// Processed at append, never claimable (A8).
    #[serde(default)]
    pub settled: bool,
    /// The attempt that produced this event (A7).
    #[serde(default)]
    pub cause: Option<CauseBody>,
}

impl From<NewEventBody> for NewEvent {
    fn from(e: NewEventBody) -> Self {
        let mut event = NewEvent::new(e.event_type, e.payload);
        event.id = e.id;
        event.lane = e.lane;
        event.settled = e.settled;
        event.cause = e.cause.map(Cause::from);
        event
    }
}

/// The body of an append.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendBody {
    /// The batch, appended atomically (A1).
    pub events: Vec<NewEventBody>,
}

/// The processing state of an event, derived from its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventState {
    /// Neither processed nor dead-lettered.
    Pending,
    /// Processed (or settled at append).
    Processed,
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
    /// Pending, processed or dead-lettered.
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
}

impl From<StoredEvent> for StoredEventBody {
    fn from(s: StoredEvent) -> Self {
        let state = if s.failed_at.is_some() {
            EventState::DeadLettered
        } else if s.processed_at.is_some() {
            EventState::Processed
        } else {
            EventState::Pending
        };
        Self {
            id: s.event.id,
            event_type: s.event.event_type,
            payload: s.event.payload,
            index: s.event.index,
            session_id: s.event.session_id,
            created_at: s.event.created_at,
            state,
            cause: s.cause.map(CauseBody::from),
            lane: s.lane,
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
        }
    }
}

fn rows(events: Vec<StoredEvent>) -> Vec<StoredEventBody> {
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

/// Query of the session list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListSessionsQuery {
    /// Only sessions whose id starts with this.
    pub prefix: Option<String>,
    /// Start after this session id (the previous page's `cursor`).
    pub cursor: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// A session with its counters.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionSummaryBody {
    /// The session id.
    pub session_id: String,
    /// Events it holds.
    pub event_count: u64,
    /// Pending events.
    pub pending_count: u64,
    /// Dead-lettered events.
    pub failed_count: u64,
    /// Claims handed out over all its events.
    pub attempt_count: u64,
    /// Failures recorded over all its events.
    pub failure_count: u64,
    /// `created_at` of its first event.
    pub first_event_at: i64,
    /// Store clock of its last write.
    pub updated_at: i64,
}

impl From<SessionSummary> for SessionSummaryBody {
    fn from(s: SessionSummary) -> Self {
        Self {
            session_id: s.session_id,
            event_count: s.event_count,
            pending_count: s.pending_count,
            failed_count: s.failed_count,
            attempt_count: s.attempt_count,
            failure_count: s.failure_count,
            first_event_at: s.first_event_at,
            updated_at: s.updated_at,
        }
    }
}

/// A page of sessions.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionListResponse {
    /// Sessions in byte order of id.
    pub sessions: Vec<SessionSummaryBody>,
    /// The cursor of the next page, or null at the end.
    pub cursor: Option<String>,
}

impl From<SessionList> for SessionListResponse {
    fn from(l: SessionList) -> Self {
        Self {
            sessions: l.sessions.into_iter().map(Into::into).collect(),
            cursor: l.cursor,
        }
    }
}

/// Query of a page of events.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadEventsQuery {
    /// Only events after this index (default 0).
    pub after_index: Option<u64>,
    /// Only events up to this index: pass the first page's
    /// `through_index` to keep pagination stable.
    pub through_index: Option<u64>,
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// A page of events.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventsPageResponse {
    /// Up to `limit` events after `after_index`.
    pub events: Vec<StoredEventBody>,
    /// The frozen upper bound to pass to the next page.
    pub through_index: u64,
}

impl From<EventsPage> for EventsPageResponse {
    fn from(p: EventsPage) -> Self {
        Self {
            events: rows(p.events),
            through_index: p.through_index,
        }
    }
}

/// Query of a page of history.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Only events before this index (default: the newest).
    pub before_index: Option<u64>,
    /// Page size, 1 to 1000 (default 50).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// A page of history: the newest events before a bound.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HistoryResponse {
    /// The events, in index order.
    pub events: Vec<StoredEventBody>,
    /// Whether older events exist.
    pub has_more: bool,
}

impl From<HistoryPage> for HistoryResponse {
    fn from(p: HistoryPage) -> Self {
        Self {
            events: rows(p.events),
            has_more: p.has_more,
        }
    }
}

/// A reducer's cached state.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotBody {
    /// The last event folded into `state`.
    pub index: u64,
    /// The reducer's state.
    pub state: Value,
}

/// A reducer's snapshot and the events after it (S1): fold them onto the
/// snapshot's state to get the current state.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StateResponse {
    /// The stored snapshot, or null.
    pub snapshot: Option<SnapshotBody>,
    /// Every event after the snapshot's index, up to the frontier.
    pub events: Vec<EventBody>,
}

impl From<StateRead> for StateResponse {
    fn from(s: StateRead) -> Self {
        Self {
            snapshot: s.snapshot.map(|s| SnapshotBody {
                index: s.index,
                state: s.state,
            }),
            events: s.events.into_iter().map(Into::into).collect(),
        }
    }
}

/// A snapshot to store: kept only if newer than the stored one (S2).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSnapshotBody {
    /// The last folded index (at most the frontier).
    pub index: u64,
    /// The state.
    pub state: Value,
}

/// One snapshot's metadata.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotInfoBody {
    /// The reducer.
    pub reducer: String,
    /// The snapshot's index.
    pub index: u64,
    /// Store clock when it was written.
    pub updated_at: i64,
}

impl From<SnapshotInfo> for SnapshotInfoBody {
    fn from(s: SnapshotInfo) -> Self {
        Self {
            reducer: s.reducer,
            index: s.index,
            updated_at: s.updated_at,
        }
    }
}

/// A session's snapshots by reducer name (I3).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotsResponse {
    /// The snapshots.
    pub snapshots: Vec<SnapshotInfoBody>,
}

/// Query of a live feed.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LiveQuery {
    /// Deliver events after this index (default 0). A reconnecting
    /// `EventSource` sends `Last-Event-ID` instead, which wins.
    pub after_index: Option<u64>,
}

/// A presence write (P1, P2).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PresenceSetBody {
    /// Field → value; null deletes the field.
    pub values: BTreeMap<String, Option<Value>>,
    /// The sender's own "last seen" marker, carried as is (default 0).
    #[serde(default)]
    pub seen: i64,
    /// The sender's timestamp, which orders writes (default: the store's now).
    #[serde(default)]
    pub at: Option<i64>,
    /// Entries expire this many ms after the store's now (at least 1).
    #[schema(minimum = 1)]
    pub ttl_ms: u64,
}

/// The applied part of a presence write, as subscribers receive it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PresencePatchBody {
    /// Whose values.
    pub participant: String,
    /// Field → value; null deleted the field.
    pub values: BTreeMap<String, Option<Value>>,
    /// The sender's marker.
    pub seen: i64,
    /// The sender's timestamp.
    pub at: i64,
}

impl From<PresencePatch> for PresencePatchBody {
    fn from(p: PresencePatch) -> Self {
        Self {
            participant: p.participant,
            values: p.values,
            seen: p.seen,
            at: p.at,
        }
    }
}

/// The answer to a presence write.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PresenceSetResponse {
    /// What applied, or null when nothing did (an older write, or no values).
    pub patch: Option<PresencePatchBody>,
}

/// One live presence entry.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PresenceEntryBody {
    /// The participant.
    pub participant: String,
    /// The field.
    pub field: String,
    /// The value.
    pub value: Value,
    /// The sender's marker.
    pub seen: i64,
    /// The sender's timestamp.
    pub at: i64,
    /// Store-clock expiry.
    pub expires_at: i64,
}

impl From<PresenceEntry> for PresenceEntryBody {
    fn from(e: PresenceEntry) -> Self {
        Self {
            participant: e.participant,
            field: e.field,
            value: e.value,
            seen: e.seen,
            at: e.at,
            expires_at: e.expires_at,
        }
    }
}

/// The live entries of a presence namespace.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PresenceResponse {
    /// By participant, then field.
    pub entries: Vec<PresenceEntryBody>,
}

/// Query of the pending-session list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PendingQuery {
    /// Start after this session id.
    pub cursor: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// Sessions with pending events (PS1).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PendingResponse {
    /// Session ids in byte order.
    pub sessions: Vec<String>,
    /// The cursor of the next page, or null at the end.
    pub cursor: Option<String>,
}

/// A claim request (C1, C2, C3, C4, C5, C6).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    /// Who holds the leases (a worker id).
    #[schema(min_length = 1, max_length = 1024)]
    pub holder: String,
    /// How long the leases last, in ms (at least 1).
    #[schema(minimum = 1)]
    pub ttl_ms: u64,
    /// The session to claim in; left out, the server looks through the
    /// sessions with pending work and claims in the first that has some.
    #[serde(default)]
    pub session: Option<String>,
    /// At most this many events (default 1).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub limit: Option<usize>,
    /// Indexes not to claim (with `session`).
    #[serde(default)]
    pub exclude_indexes: Vec<u64>,
}

/// What a claim got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClaimKind {
    /// `events` are now leased to the holder.
    Claimed,
    /// Nothing claimable now; try again at `retry_at`.
    Busy,
    /// Nothing to do.
    Settled,
}

/// The answer to a claim.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ClaimResponse {
    /// What happened.
    pub outcome: ClaimKind,
    /// The session the events belong to (null when none were claimed
    /// without a session named).
    pub session: Option<String>,
    /// The claimed events in index order; each one's `attempt_count` is
    /// the attempt to complete, fail, renew or release.
    pub events: Vec<StoredEventBody>,
    /// With `busy`: when something may become claimable (store-clock ms).
    pub retry_at: Option<i64>,
}

impl ClaimResponse {
    pub(crate) fn claimed(session: String, events: Vec<StoredEvent>) -> Self {
        Self {
            outcome: ClaimKind::Claimed,
            session: Some(session),
            events: rows(events),
            retry_at: None,
        }
    }
}

/// One claimed attempt.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRef {
    /// The event's index.
    pub index: u64,
    /// The attempt number the claim handed out.
    pub attempt: u32,
}

impl From<ClaimRef> for a2_core::Claim {
    fn from(c: ClaimRef) -> Self {
        a2_core::Claim {
            index: c.index,
            attempt: c.attempt,
        }
    }
}

/// A lease renewal (RN1, RN2, RN3).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenewBody {
    /// The session.
    #[schema(min_length = 1, max_length = 1024)]
    pub session: String,
    /// The holder that claimed them.
    #[schema(min_length = 1, max_length = 1024)]
    pub holder: String,
    /// The attempts to renew.
    pub claims: Vec<ClaimRef>,
    /// The new lease, in ms from the store's now (at least 1).
    #[schema(minimum = 1)]
    pub ttl_ms: u64,
}

/// The answer to a renewal; indexes ascend.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RenewResponse {
    /// Leases that moved.
    pub renewed: Vec<u64>,
    /// Claims a newer attempt replaced: stop working on them.
    pub superseded: Vec<u64>,
}

/// A completion (CO1, CO2, CO3, CO4, CO5, CO6).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    /// The session.
    #[schema(min_length = 1, max_length = 1024)]
    pub session: String,
    /// The completed event.
    #[schema(minimum = 1)]
    pub index: u64,
    /// The attempt that completes it.
    pub attempt: u32,
    /// Events the handler returned, appended with `cause = {index, attempt}`
    /// (they may not carry a `cause` of their own).
    #[serde(default)]
    pub events: Vec<NewEventBody>,
    /// When the handler processed a batch, how many events (B1).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub batch_size: Option<u32>,
}

/// What a completion did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompleteKind {
    /// Processed; `events` are the returned events as stored.
    Completed,
    /// This attempt may no longer complete the event.
    Superseded,
}

/// The answer to a completion.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CompleteResponse {
    /// What happened.
    pub outcome: CompleteKind,
    /// The returned events as stored (empty when superseded).
    pub events: Vec<StoredEventBody>,
}

impl CompleteResponse {
    pub(crate) fn completed(events: Vec<StoredEvent>) -> Self {
        Self {
            outcome: CompleteKind::Completed,
            events: rows(events),
        }
    }
}

/// A failed attempt (F1, F2, F3, F4, F5, F6).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailBody {
    /// The session.
    #[schema(min_length = 1, max_length = 1024)]
    pub session: String,
    /// The failed event.
    #[schema(minimum = 1)]
    pub index: u64,
    /// The attempt that failed.
    pub attempt: u32,
    /// The error message.
    pub error: String,
    /// Dead-letter once the failure count reaches this (at least 1).
    #[schema(minimum = 1)]
    pub max_failures: u32,
    /// Not claimable again for this many ms (backoff); default: at once.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

/// What a failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailKind {
    /// Recorded; the event will be retried.
    Failed,
    /// The event is dead-lettered.
    DeadLettered,
    /// The attempt was not current.
    Superseded,
}

/// The answer to a failure.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FailResponse {
    /// What happened.
    pub outcome: FailKind,
    /// The event's failure count afterwards.
    pub failure_count: u32,
}

impl From<a2_core::FailOutcome> for FailResponse {
    fn from(o: a2_core::FailOutcome) -> Self {
        let outcome = match o.outcome {
            a2_core::FailKind::Failed => FailKind::Failed,
            a2_core::FailKind::DeadLettered => FailKind::DeadLettered,
            a2_core::FailKind::Superseded => FailKind::Superseded,
        };
        Self {
            outcome,
            failure_count: o.failure_count,
        }
    }
}

/// A release of leases (RL1).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    /// The session.
    #[schema(min_length = 1, max_length = 1024)]
    pub session: String,
    /// The holder whose leases end.
    #[schema(min_length = 1, max_length = 1024)]
    pub holder: String,
    /// The attempts to release.
    pub claims: Vec<ClaimRef>,
}

/// The answer to a release.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReleaseResponse {
    /// The released indexes, ascending.
    pub released: Vec<u64>,
}

/// What a revive did (RV1, RV2, RV3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReviveKind {
    /// The event was dead-lettered and is pending again, failures reset.
    Revived,
    /// The event is not dead-lettered (pending, revived already, or
    /// processed): nothing was written.
    NotDeadLettered,
}

/// The answer to a revive.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReviveResponse {
    /// What happened.
    pub outcome: ReviveKind,
    /// The event's row after the call.
    pub event: StoredEventBody,
}

impl From<a2_core::ReviveOutcome> for ReviveResponse {
    fn from(o: a2_core::ReviveOutcome) -> Self {
        match o {
            a2_core::ReviveOutcome::Revived(row) => Self {
                outcome: ReviveKind::Revived,
                event: row.into(),
            },
            a2_core::ReviveOutcome::NotDeadLettered(row) => Self {
                outcome: ReviveKind::NotDeadLettered,
                event: row.into(),
            },
        }
    }
}
