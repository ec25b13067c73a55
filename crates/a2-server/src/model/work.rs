//! The work API: pending sessions, claims, renewals, completions,
//! failures, releases and revives.

use a2_core::StoredEvent;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::*;

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
    pub session: Option<String>,
    /// At most this many events (default 1).
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
    /// With `claimed`: when the next event of the session that waits for a
    /// lease, a retry or a due time comes due (store-clock ms, C7), if any.
    pub next_at: Option<i64>,
}

impl ClaimResponse {
    pub(crate) fn claimed(session: String, events: Vec<StoredEvent>, next_at: Option<i64>) -> Self {
        Self {
            outcome: ClaimKind::Claimed,
            session: Some(session),
            events: rows(events),
            retry_at: None,
            next_at,
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
        let (outcome, row) = match o {
            a2_core::ReviveOutcome::Revived(row) => (ReviveKind::Revived, row),
            a2_core::ReviveOutcome::NotDeadLettered(row) => (ReviveKind::NotDeadLettered, row),
        };
        Self {
            outcome,
            event: row.into(),
        }
    }
}

/// The body of a cancel (CN1): why, kept with the event.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Why the event is cancelled (at most 1 024 bytes); kept as its
    /// `cancel_reason`.
    pub reason: Option<String>,
}

/// What a cancel did (CN1, CN3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CancelKind {
    /// The event was pending, delayed, leased or dead-lettered and is
    /// cancelled now; a handler running it is told to stop.
    Cancelled,
    /// The event was settled already: nothing was written.
    NotPending,
}

/// The answer to a cancel.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CancelResponse {
    /// What happened.
    pub outcome: CancelKind,
    /// The event's row after the call.
    pub event: StoredEventBody,
}

impl From<a2_core::CancelOutcome> for CancelResponse {
    fn from(o: a2_core::CancelOutcome) -> Self {
        let (outcome, row) = match o {
            a2_core::CancelOutcome::Cancelled(row) => (CancelKind::Cancelled, row),
            a2_core::CancelOutcome::NotPending(row) => (CancelKind::NotPending, row),
        };
        Self {
            outcome,
            event: row.into(),
        }
    }
}

/// A cancelled attempt, as `/v1/work/cancellations` streams it (CN5): the
/// worker running it stops.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CancellationBody {
    /// The session.
    pub session: String,
    /// The cancelled event.
    pub index: u64,
    /// Its attempt that was running.
    pub attempt: u32,
}

impl From<a2_core::Cancellation> for CancellationBody {
    fn from(c: a2_core::Cancellation) -> Self {
        Self {
            session: c.session,
            index: c.index,
            attempt: c.attempt,
        }
    }
}
