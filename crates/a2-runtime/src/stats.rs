//! Counters and per-attempt reports (RT7).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use a2_core::Millis;

/// How many attempts this application saw, by outcome, since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Events claimed (one per attempt started).
    pub claimed: u64,
    /// Attempts completed: the event is processed.
    pub completed: u64,
    /// Attempts that failed and left the event to be retried.
    pub failed: u64,
    /// Attempts whose failure dead-lettered the event.
    pub dead_lettered: u64,
    /// Attempts whose result came too late: a newer attempt existed (CO5).
    pub superseded: u64,
    /// Attempts cancelled because their lease was lost.
    pub lost: u64,
    /// Attempts whose lease was released by a graceful shutdown (RL1).
    pub released: u64,
    /// Attempts stopped because their event was cancelled (RT17, CN1):
    /// running handlers told and dropped, and claimed events that had not
    /// started.
    pub cancelled: u64,
    /// Store errors while claiming, renewing or recording an outcome.
    pub store_errors: u64,
    /// Claims asked of the store (`claim_available`), whatever they found:
    /// how often this application looked for work it had not appended
    /// itself (RT13).
    pub claim_calls: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) claimed: AtomicU64,
    pub(crate) completed: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    pub(crate) superseded: AtomicU64,
    pub(crate) lost: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) store_errors: AtomicU64,
    pub(crate) claim_calls: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            claimed: get(&self.claimed),
            completed: get(&self.completed),
            failed: get(&self.failed),
            dead_lettered: get(&self.dead_lettered),
            superseded: get(&self.superseded),
            lost: get(&self.lost),
            released: get(&self.released),
            cancelled: get(&self.cancelled),
            store_errors: get(&self.store_errors),
            claim_calls: get(&self.claim_calls),
        }
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Processed; this many events were returned and appended.
    Completed {
        /// How many events the handler returned.
        returned: usize,
    },
    /// Failed; the event will be retried from `retry_at` (store clock).
    Failed {
        /// The handler's error.
        error: String,
        /// When the event may be claimed again.
        retry_at: Millis,
        /// The event's failure count so far.
        failures: u32,
    },
    /// Failed for the last time: the event is dead-lettered.
    DeadLettered {
        /// The handler's error.
        error: String,
        /// The event's failure count.
        failures: u32,
    },
    /// The result arrived after a newer attempt took over; it was dropped.
    Superseded,
    /// The lease was lost while the handler ran; the handler was cancelled.
    Lost,
    /// A graceful shutdown ended the handler and released its lease.
    Released,
    /// The event was cancelled while the handler ran (RT17, CN1): the
    /// handler was told, and nothing of the attempt was recorded.
    Cancelled,
    /// The outcome could not be recorded; the lease will run out and the
    /// event will be retried.
    StoreError {
        /// The store's error.
        error: String,
    },
}

impl Outcome {
    /// A short name: `completed`, `failed`, `dead_lettered`, `superseded`,
    /// `lost`, `released`, `cancelled` or `store_error` (the span's
    /// `outcome` field).
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "completed",
            Outcome::Failed { .. } => "failed",
            Outcome::DeadLettered { .. } => "dead_lettered",
            Outcome::Superseded => "superseded",
            Outcome::Lost => "lost",
            Outcome::Released => "released",
            Outcome::Cancelled => "cancelled",
            Outcome::StoreError { .. } => "store_error",
        }
    }
}

/// One finished attempt, as passed to an observer
/// ([`crate::AppBuilder::on_attempt`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptReport {
    /// The session.
    pub session: String,
    /// The event's index.
    pub index: u64,
    /// The attempt number.
    pub attempt: u32,
    /// The event's type.
    pub event_type: String,
    /// How it ended.
    pub outcome: Outcome,
    /// How long the handler and the outcome's write took.
    pub elapsed: Duration,
}

/// A callback that sees every finished attempt.
pub(crate) type Observer = Arc<dyn Fn(&AttemptReport) + Send + Sync>;
