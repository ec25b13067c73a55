//! Lifecycle (§10): closing a session and trimming its settled prefix.

use serde::{Deserialize, Serialize};

use crate::clock::Millis;

/// Outcome of [`crate::Store::close_session`] (CL1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CloseOutcome {
    /// The session is now closed at this frontier.
    Closed {
        /// The last index of the session's final log.
        frontier: u64,
        /// Store clock of the close.
        closed_at: Millis,
    },
    /// The session was closed already; nothing changed.
    AlreadyClosed {
        /// The frontier of the first close.
        frontier: u64,
        /// Store clock of the first close.
        closed_at: Millis,
    },
}

impl CloseOutcome {
    /// The final log's last index.
    pub fn frontier(&self) -> u64 {
        match *self {
            CloseOutcome::Closed { frontier, .. }
            | CloseOutcome::AlreadyClosed { frontier, .. } => frontier,
        }
    }

    /// When the session was closed.
    pub fn closed_at(&self) -> Millis {
        match *self {
            CloseOutcome::Closed { closed_at, .. }
            | CloseOutcome::AlreadyClosed { closed_at, .. } => closed_at,
        }
    }
}

/// Outcome of [`crate::Store::trim`] (TR1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrimOutcome {
    /// The first index the session keeps now.
    pub first_index: u64,
}

/// The first index of a session never trimmed: what a listing written
/// before trims existed reads as.
pub(crate) fn first_index_default() -> u64 {
    1
}

/// A session's expiry (EX1): a sliding ttl, an absolute time, or both; the
/// session's deadline is the earlier of `expires_at` and its last activity
/// plus `ttl_ms`.
///
/// ```
/// use a2_core::Expiry;
///
/// let both = Expiry::ttl(60_000).until(10_000_000);
/// assert_eq!(both.deadline(1_000), Some(61_000));
/// assert_eq!(both.deadline(9_990_000), Some(10_000_000));
/// assert_eq!(Expiry::none().deadline(1_000), None);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expiry {
    /// Expire this long after the session's last activity (sliding).
    pub ttl_ms: Option<u64>,
    /// Expire at this store-clock time at the latest.
    pub expires_at: Option<Millis>,
}

impl Expiry {
    /// No expiry: the session is kept until it is cleared.
    pub fn none() -> Self {
        Self::default()
    }

    /// A sliding ttl of `ms` milliseconds.
    pub fn ttl(ms: u64) -> Self {
        Self {
            ttl_ms: Some(ms),
            expires_at: None,
        }
    }

    /// An absolute expiry at `at` (store clock).
    pub fn at(at: Millis) -> Self {
        Self {
            ttl_ms: None,
            expires_at: Some(at),
        }
    }

    /// This expiry, expiring at `at` at the latest.
    pub fn until(mut self, at: Millis) -> Self {
        self.expires_at = Some(at);
        self
    }

    /// Whether it sets neither a ttl nor a time.
    pub fn is_none(&self) -> bool {
        self.ttl_ms.is_none() && self.expires_at.is_none()
    }

    /// The deadline of a session with this expiry whose last activity was
    /// at `updated_at` (EX1).
    pub fn deadline(&self, updated_at: Millis) -> Option<Millis> {
        let sliding = self.ttl_ms.map(|ttl| crate::clock::expiry(updated_at, ttl));
        match (sliding, self.expires_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Options of [`crate::Store::append_with`]: a claim of the appended events
/// (AC2), the session's expiry (EX2), the frontier the append expects
/// (A13) and a close of the session at its new frontier (CL6), each
/// optional.
///
/// ```
/// use a2_core::{AppendOptions, Expiry};
///
/// // Append only if nothing came after index 41, and keep the session a day.
/// let options = AppendOptions::new().if_frontier(41).expiry(Expiry::ttl(86_400_000));
/// assert_eq!(options.if_frontier, Some(41));
/// // The last answer of a conversation: appended and closed in one step.
/// assert!(AppendOptions::new().close().close);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AppendOptions {
    /// Lease the appended events that are ready at once, as
    /// [`crate::Store::append_and_claim`] does.
    pub claim: Option<crate::model::AppendClaim>,
    /// Set the session's expiry in the same step.
    pub expiry: Option<Expiry>,
    /// Append only if the session's frontier is this index (0: the session
    /// has no events), else `FrontierMoved` (A13).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_frontier: Option<u64>,
    /// Close the session at its new frontier in the same atomic step
    /// (CL6): the batch (not empty) and the close are written together or
    /// not at all.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close: bool,
}

impl AppendOptions {
    /// A plain append.
    pub fn new() -> Self {
        Self::default()
    }

    /// Claims the appended events that are ready at once (AC2).
    pub fn claim(mut self, claim: crate::model::AppendClaim) -> Self {
        self.claim = Some(claim);
        self
    }

    /// Closes the session at the frontier this append reaches, in the same
    /// atomic step (CL6): later appends are refused (CL2) and its feeds end
    /// after the last event (CL4). The batch must not be empty
    /// (`close_session` closes without appending).
    pub fn close(mut self) -> Self {
        self.close = true;
        self
    }

    /// Sets the session's expiry (EX2).
    pub fn expiry(mut self, expiry: Expiry) -> Self {
        self.expiry = Some(expiry);
        self
    }

    /// Appends only if the session's frontier is `frontier` (A13): a writer
    /// that decided on what it read through `frontier` writes only if
    /// nothing came in between.
    pub fn if_frontier(mut self, frontier: u64) -> Self {
        self.if_frontier = Some(frontier);
        self
    }
}

/// An append that [`crate::validate::append_request`] accepted: what a store
/// writes in [`crate::Store::append_apply`].
#[derive(Debug, Clone, PartialEq)]
pub struct AppendRequest<'a> {
    /// The session appended to.
    pub session: &'a str,
    /// The batch.
    pub events: Vec<crate::model::NewEvent>,
    /// What the append does besides.
    pub options: AppendOptions,
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

/// Outcome of [`crate::Store::set_expiry`] (EX2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpiryOutcome {
    /// When the session expires now, if it does.
    pub deadline: Option<Millis>,
}

/// Where a fork came from (FK5): the session it branched from and the last
/// index it shares with it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ForkOrigin {
    /// The source session.
    pub session: String,
    /// The last index the fork took from it.
    pub index: u64,
}

/// Outcome of [`crate::Store::fork`] (FK1, FK3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ForkOutcome {
    /// The target was created with the source's events `first_index ..=
    /// at_index`.
    Forked {
        /// The first index the fork keeps: the source's first retained
        /// index (1 unless the source was trimmed).
        first_index: u64,
    },
    /// The target was forked from the same source at the same index
    /// before; nothing was written (it may have grown since).
    AlreadyForked,
}
