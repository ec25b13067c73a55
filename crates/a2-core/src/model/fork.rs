//! Forks (§10): where a fork came from, and what a fork did.

use serde::{Deserialize, Serialize};

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
