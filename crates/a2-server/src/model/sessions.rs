//! Listings, pages, reducer state and presence.

use std::collections::BTreeMap;

use a2_core::{
    EventsPage, HistoryPage, PresenceEntry, PresencePatch, SessionList, SessionSummary,
    SnapshotInfo, StateRead,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::*;

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
    /// The first index the session keeps: 1 until it is trimmed (TR5).
    #[serde(default = "first_index")]
    pub first_index: u64,
    /// When the session was closed, if it is (CL5).
    pub closed_at: Option<i64>,
    /// When the session expires, if it does (EX1).
    pub deadline: Option<i64>,
    /// The session and index it was forked from, if it is a fork (FK5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOriginBody>,
    /// Live feeds of the session open in this server process now (ST7):
    /// SSE, long-poll and Durable Streams readers.
    #[serde(default)]
    pub followers: u64,
}

fn first_index() -> u64 {
    1
}

/// Where a fork came from (FK5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ForkOriginBody {
    /// The source session.
    pub session: String,
    /// The last index the fork shares with it.
    pub index: u64,
}

impl From<a2_core::ForkOrigin> for ForkOriginBody {
    fn from(o: a2_core::ForkOrigin) -> Self {
        Self {
            session: o.session,
            index: o.index,
        }
    }
}

impl From<ForkOriginBody> for a2_core::ForkOrigin {
    fn from(o: ForkOriginBody) -> Self {
        Self {
            session: o.session,
            index: o.index,
        }
    }
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
            first_index: s.first_index,
            closed_at: s.closed_at,
            deadline: s.deadline,
            forked_from: s.forked_from.map(Into::into),
            followers: 0,
        }
    }
}

/// What a client of the API reads back (`followers` aside).
impl From<SessionSummaryBody> for SessionSummary {
    fn from(b: SessionSummaryBody) -> Self {
        SessionSummary {
            session_id: b.session_id,
            event_count: b.event_count,
            pending_count: b.pending_count,
            failed_count: b.failed_count,
            attempt_count: b.attempt_count,
            failure_count: b.failure_count,
            first_event_at: b.first_event_at,
            updated_at: b.updated_at,
            first_index: b.first_index,
            closed_at: b.closed_at,
            deadline: b.deadline,
            forked_from: b.forked_from.map(Into::into),
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
    /// The session's first retained index: 1 until it is trimmed; history
    /// never reaches back past it (TR3).
    #[serde(default = "first_index")]
    pub first_index: u64,
}

impl From<HistoryPage> for HistoryResponse {
    fn from(p: HistoryPage) -> Self {
        Self {
            events: rows(p.events),
            has_more: p.has_more,
            first_index: p.first_index,
        }
    }
}

/// What a close did (CL1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CloseKind {
    /// The session is closed now.
    Closed,
    /// It was closed before; nothing changed.
    AlreadyClosed,
}

/// The answer to a close (CL1).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CloseResponse {
    /// What happened.
    pub outcome: CloseKind,
    /// The last index of the session's final log.
    pub frontier: u64,
    /// When it was closed (store clock, ms).
    pub closed_at: i64,
}

impl From<a2_core::CloseOutcome> for CloseResponse {
    fn from(o: a2_core::CloseOutcome) -> Self {
        let outcome = match o {
            a2_core::CloseOutcome::Closed { .. } => CloseKind::Closed,
            a2_core::CloseOutcome::AlreadyClosed { .. } => CloseKind::AlreadyClosed,
        };
        Self {
            outcome,
            frontier: o.frontier(),
            closed_at: o.closed_at(),
        }
    }
}

/// The body of a trim (TR1).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TrimBody {
    /// Remove the settled events 1 … this index (at most 10 000 per call).
    pub through_index: u64,
    /// Trim even when some reducers' snapshots are older than the trim
    /// point, whose state can then no longer be read (RT19). Without it
    /// such a trim is refused (409 `SnapshotsBehind`), nothing written.
    #[serde(default)]
    pub allow_stale_snapshots: bool,
}

/// The answer to a trim (TR1).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TrimResponse {
    /// The first index the session keeps now; trim again when it is not
    /// past `through_index` yet.
    pub first_index: u64,
}

/// The body of a fork (FK1).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// The last index of the source the fork shares.
    pub at_index: u64,
    /// The new session's id.
    pub target: String,
}

/// What a fork did (FK1, FK3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ForkKind {
    /// The target was created.
    Forked,
    /// The target is this fork, made before; nothing changed.
    AlreadyForked,
}

/// The answer to a fork (FK1, FK3).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ForkResponse {
    /// What happened.
    pub outcome: ForkKind,
    /// The fork's first index (the source's first retained one), when it
    /// was created now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_index: Option<u64>,
}

impl From<a2_core::ForkOutcome> for ForkResponse {
    fn from(o: a2_core::ForkOutcome) -> Self {
        match o {
            a2_core::ForkOutcome::Forked { first_index } => Self {
                outcome: ForkKind::Forked,
                first_index: Some(first_index),
            },
            a2_core::ForkOutcome::AlreadyForked => Self {
                outcome: ForkKind::AlreadyForked,
                first_index: None,
            },
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
    /// The events after the snapshot's index, at most `limit` of them.
    pub events: Vec<EventBody>,
    /// The frontier the read saw: the state is the fold up to it.
    #[serde(default)]
    pub through_index: u64,
    /// Whether more events follow up to `through_index`: read them with
    /// `GET …/events?after_index={last index}&through_index={through_index}`.
    #[serde(default)]
    pub has_more: bool,
}

impl StateResponse {
    /// The answer to a state read, with at most `limit` events.
    pub fn paged(s: StateRead, limit: usize) -> Self {
        let base = s.snapshot.as_ref().map_or(0, |s| s.index);
        let through_index = s.events.last().map_or(base, |e| e.index);
        let has_more = s.events.len() > limit;
        Self {
            snapshot: s.snapshot.map(|s| SnapshotBody {
                index: s.index,
                state: s.state,
            }),
            events: s.events.into_iter().take(limit).map(Into::into).collect(),
            through_index,
            has_more,
        }
    }
}

/// The query of a state read.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StateQuery {
    /// Events at most, 1 to 1000 (default 1000).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
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

impl From<Vec<SnapshotInfo>> for SnapshotsResponse {
    fn from(list: Vec<SnapshotInfo>) -> Self {
        Self {
            snapshots: list.into_iter().map(Into::into).collect(),
        }
    }
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

impl From<Vec<PresenceEntry>> for PresenceResponse {
    fn from(entries: Vec<PresenceEntry>) -> Self {
        Self {
            entries: entries.into_iter().map(Into::into).collect(),
        }
    }
}
