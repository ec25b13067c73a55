//! The reads of the log: `read` (R1) and `read_history` (R2).

use serde::{Deserialize, Serialize};

use super::*;

/// The range of [`crate::Store::read`]: `after_index < index ≤ through_index`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRange {
    /// Exclusive lower bound; 0 reads from the start.
    pub after_index: u64,
    /// Inclusive upper bound; `None` reads to the frontier.
    pub through_index: Option<u64>,
}

/// Options of [`crate::Store::read_history`]: `HistoryOptions::new(limit)`,
/// then the setters (each takes its field's type).
///
/// ```
/// let page = a2_core::HistoryOptions::new(20).before_index(Some(101));
/// assert_eq!((page.limit, page.before_index), (20, Some(101)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HistoryOptions {
    /// Exclusive upper bound; `None` means after the frontier.
    pub before_index: Option<u64>,
    /// How many events at most (must be ≥ 1).
    pub limit: usize,
}

impl HistoryOptions {
    /// The newest `limit` events of the session.
    pub fn new(limit: usize) -> Self {
        Self {
            before_index: None,
            limit,
        }
    }

    /// Only events before this index (`None`: after the frontier).
    pub fn before_index(mut self, before_index: Option<u64>) -> Self {
        self.before_index = before_index;
        self
    }
}

/// A page of [`crate::Store::read_history`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryPage {
    /// The newest events before the bound, in index order.
    pub events: Vec<StoredEvent>,
    /// Whether older events exist.
    pub has_more: bool,
    /// The session's first retained index: 1 until it is trimmed. A page
    /// that reached it has `has_more = false` (TR3).
    #[serde(default = "first_index_default")]
    pub first_index: u64,
}

impl HistoryPage {
    /// The page of a session that has no events (R2): empty, nothing
    /// older, first index 1.
    pub fn empty() -> Self {
        Self {
            events: Vec::new(),
            has_more: false,
            first_index: 1,
        }
    }
}
