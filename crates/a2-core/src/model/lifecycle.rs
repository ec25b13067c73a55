//! Lifecycle (§10): a session's expiry, closing it, and trimming its settled
//! prefix.

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

/// Outcome of [`crate::Store::set_expiry`] (EX2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpiryOutcome {
    /// When the session expires now, if it does.
    pub deadline: Option<Millis>,
}
