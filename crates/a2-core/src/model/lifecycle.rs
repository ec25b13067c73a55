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
