//! Processing (§3): leases, claims, renewals, completions, failures,
//! revives, releases and the pending-session listing.

use serde::{Deserialize, Serialize};

use super::*;
use crate::clock::Millis;

/// How long a lease lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Lease {
    /// From the store's now, for this many milliseconds (must be ≥ 1;
    /// more than [`crate::clock::MAX_TTL_MS`] counts as that, X2).
    Ttl(u64),
    /// Until this store-clock time.
    ExpiresAt(Millis),
}

impl Lease {
    /// The expiry this lease gives at `now`.
    pub fn expires_at(self, now: Millis) -> Millis {
        match self {
            Lease::Ttl(ms) => crate::clock::expiry(now, ms),
            Lease::ExpiresAt(at) => at,
        }
    }
}

/// Request of [`crate::Store::claim_available`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRequest {
    /// The session to claim in.
    pub session: String,
    /// Who holds the leases (a worker id).
    pub holder: String,
    /// How long the leases last.
    pub lease: Lease,
    /// Indexes not to claim (for example, ones this worker already runs).
    pub exclude_indexes: Vec<u64>,
    /// At most this many events (must be ≥ 1).
    pub limit: usize,
}

/// Outcome of [`crate::Store::claim_available`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ClaimOutcome {
    /// These events are now leased to the holder, in index order (C2).
    Claimed {
        /// The claimed events.
        events: Vec<StoredEvent>,
        /// The earliest time another ready event that waits for a time
        /// (a lease, a retry or a due time) comes due: what `Busy` would
        /// name to a claim excluding the events handed out; `None` when
        /// none waits (C7).
        next_at: Option<Millis>,
    },
    /// Nothing claimable now; the earliest lease expiry or retry time (C3).
    Busy {
        /// When something may become claimable.
        retry_at: Millis,
    },
    /// Nothing to do (C1, C4).
    Settled,
}

/// One claimed attempt: an event index and the attempt number it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Claim {
    /// The event's index.
    pub index: u64,
    /// The attempt number handed out by `claim_available`.
    pub attempt: u32,
}

/// Request of [`crate::Store::renew_claims`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewRequest {
    /// The session.
    pub session: String,
    /// The holder that claimed them.
    pub holder: String,
    /// The attempts to renew.
    pub claims: Vec<Claim>,
    /// The new lease.
    pub lease: Lease,
}

/// Outcome of [`crate::Store::renew_claims`]: indexes, ascending.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewOutcome {
    /// Leases that moved (RN2).
    pub renewed: Vec<u64>,
    /// Claims a newer attempt replaced (RN1).
    pub superseded: Vec<u64>,
}

/// Request of [`crate::Store::complete_attempt`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompleteRequest {
    /// The session.
    pub session: String,
    /// The completed event.
    pub index: u64,
    /// The attempt that completes it.
    pub attempt: u32,
    /// Events the handler returned; appended with `cause = {index, attempt}`.
    pub events: Vec<NewEvent>,
    /// When the handler processed this event together with others in one
    /// call, how many (at least 1): the returned events' cause carries it
    /// (B1). `None` for an event handled alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
}

impl CompleteRequest {
    /// The completion of `attempt` of event `index` in `session` that
    /// returned no events.
    ///
    /// ```
    /// use a2_core::CompleteRequest;
    ///
    /// let request = CompleteRequest::new("chat-1", 3, 1);
    /// assert!(request.events.is_empty() && request.batch_size.is_none());
    /// ```
    pub fn new(session: impl Into<String>, index: u64, attempt: u32) -> Self {
        Self {
            session: session.into(),
            index,
            attempt,
            events: Vec::new(),
            batch_size: None,
        }
    }
}

/// Outcome of [`crate::Store::complete_attempt`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CompleteOutcome {
    /// Processed; the returned events as stored (CO2, CO3).
    Completed {
        /// The appended (or, for a repeat, original) rows.
        events: Vec<StoredEvent>,
    },
    /// This attempt may no longer complete the event (CO4, CO5).
    Superseded,
}

/// Request of [`crate::Store::fail_attempt`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailRequest {
    /// The session.
    pub session: String,
    /// The failed event.
    pub index: u64,
    /// The attempt that failed.
    pub attempt: u32,
    /// The error message.
    pub error: String,
    /// Dead-letter once `failure_count` reaches this (must be ≥ 1).
    pub max_failures: u32,
    /// Not claimable again before this time (backoff); `None`: at once.
    pub retry_at: Option<Millis>,
}

/// What [`crate::Store::fail_attempt`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailKind {
    /// Recorded; the event will be retried.
    Failed,
    /// The event is dead-lettered.
    DeadLettered,
    /// The attempt was not current (F2, F5).
    Superseded,
}

/// Outcome of [`crate::Store::fail_attempt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailOutcome {
    /// What happened.
    pub outcome: FailKind,
    /// The event's failure count afterwards.
    pub failure_count: u32,
}

/// Outcome of [`crate::Store::revive`] (RV1, RV2, RV3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReviveOutcome {
    /// The event was dead-lettered and is pending again: its row after the
    /// revive, with `failed_at` cleared and `failure_count` 0 (RV2).
    Revived(StoredEvent),
    /// The event is not dead-lettered (pending, revived already, or
    /// processed): nothing was written; its row as it is (RV3).
    NotDeadLettered(StoredEvent),
}

impl ReviveOutcome {
    /// The event's row, whichever the outcome.
    pub fn row(&self) -> &StoredEvent {
        match self {
            ReviveOutcome::Revived(row) | ReviveOutcome::NotDeadLettered(row) => row,
        }
    }

    /// Whether this call revived the event.
    pub fn is_revived(&self) -> bool {
        matches!(self, ReviveOutcome::Revived(_))
    }
}

/// Request of [`crate::Store::release_claims`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRequest {
    /// The session.
    pub session: String,
    /// The holder whose leases end.
    pub holder: String,
    /// The attempts to release.
    pub claims: Vec<Claim>,
}

/// A page request over session ids, in byte order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRequest {
    /// Start after this session id (the `cursor` of the previous page).
    pub cursor: Option<String>,
    /// At most this many sessions (must be ≥ 1).
    pub limit: usize,
}

/// A page of [`crate::Store::pending_sessions`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionPage {
    /// Session ids with pending events, in byte order.
    pub sessions: Vec<String>,
    /// The cursor of the next page, or `None` at the end.
    pub cursor: Option<String>,
}

/// Outcome of [`crate::Store::cancel`] (CN1, CN3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CancelOutcome {
    /// The event was pending (or dead-lettered) and is cancelled now: its
    /// row after the cancel (CN1).
    Cancelled(StoredEvent),
    /// The event was settled already (processed, settled at append, or
    /// cancelled before): nothing was written; its row as it is (CN3).
    NotPending(StoredEvent),
}

impl CancelOutcome {
    /// The event's row, whichever the outcome.
    pub fn row(&self) -> &StoredEvent {
        match self {
            CancelOutcome::Cancelled(row) | CancelOutcome::NotPending(row) => row,
        }
    }

    /// Whether this call cancelled the event.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, CancelOutcome::Cancelled(_))
    }
}

/// A cancelled attempt, as [`crate::Store::cancellations`] announces it
/// (CN5): the worker holding its lease stops its handler.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cancellation {
    /// The session.
    pub session: String,
    /// The cancelled event.
    pub index: u64,
    /// Its attempt that was running (leased) when it was cancelled.
    pub attempt: u32,
}

/// A cancel that passed validation, its reason `None` or not empty (CN1):
/// what a store writes in [`crate::Store::cancel_apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelRequest<'a> {
    /// The session of the event.
    pub session: &'a str,
    /// The event's index.
    pub index: u64,
    /// Why, if said.
    pub reason: Option<String>,
}
