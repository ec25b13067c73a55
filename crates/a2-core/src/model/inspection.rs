//! Inspection (§7): session listings, event pages and snapshot infos.

use serde::{Deserialize, Serialize};

use super::*;
use crate::clock::Millis;

/// Options of [`crate::Store::list_sessions`]: `ListSessionsOptions::new(limit)`,
/// then the setters (each takes its field's type).
///
/// ```
/// let page = a2_core::ListSessionsOptions::new(100).prefix(Some("chat-".into()));
/// assert_eq!((page.limit, page.prefix.as_deref(), page.cursor), (100, Some("chat-"), None));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ListSessionsOptions {
    /// Only sessions whose id starts with this.
    pub prefix: Option<String>,
    /// Start after this session id.
    pub cursor: Option<String>,
    /// At most this many (must be ≥ 1).
    pub limit: usize,
}

impl ListSessionsOptions {
    /// The first `limit` sessions, every prefix.
    pub fn new(limit: usize) -> Self {
        Self {
            prefix: None,
            cursor: None,
            limit,
        }
    }

    /// Only sessions whose id starts with this (`None`: all).
    pub fn prefix(mut self, prefix: Option<String>) -> Self {
        self.prefix = prefix;
        self
    }

    /// Start after this session id (the previous page's cursor).
    pub fn cursor(mut self, cursor: Option<String>) -> Self {
        self.cursor = cursor;
        self
    }
}

/// Per-session counters of [`crate::Store::list_sessions`] (I1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// The session id.
    pub session_id: String,
    /// How many events it holds.
    pub event_count: u64,
    /// How many are pending.
    pub pending_count: u64,
    /// How many are dead-lettered.
    pub failed_count: u64,
    /// Claims handed out over all its events.
    pub attempt_count: u64,
    /// Failures recorded over all its events.
    pub failure_count: u64,
    /// `created_at` of its first event.
    pub first_event_at: Millis,
    /// Store clock of its last write.
    pub updated_at: Millis,
    /// The first index it keeps: 1 until it is trimmed (TR5).
    #[serde(default = "first_index_default")]
    pub first_index: u64,
    /// When it was closed, if it is (CL5).
    #[serde(default)]
    pub closed_at: Option<Millis>,
    /// When it expires, if it does (EX1).
    #[serde(default)]
    pub deadline: Option<Millis>,
    /// The session and index it was forked from, if it is a fork (FK5).
    #[serde(default)]
    pub forked_from: Option<crate::model::ForkOrigin>,
}

/// A page of [`crate::Store::list_sessions`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionList {
    /// Summaries in byte order of session id.
    pub sessions: Vec<SessionSummary>,
    /// The cursor of the next page, or `None` at the end.
    pub cursor: Option<String>,
}

/// Options of [`crate::Store::read_events`] (I2):
/// `ReadEventsOptions::new(limit)`, then the setters (each takes its field's
/// type).
///
/// ```
/// let page = a2_core::ReadEventsOptions::new(500).after_index(1_000).through_index(Some(2_000));
/// assert_eq!((page.after_index, page.through_index, page.limit), (1_000, Some(2_000), 500));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReadEventsOptions {
    /// Exclusive lower bound.
    pub after_index: u64,
    /// Inclusive upper bound: pass the `through_index` of the first page to
    /// keep pagination stable; `None` takes the current frontier.
    pub through_index: Option<u64>,
    /// At most this many events (must be ≥ 1).
    pub limit: usize,
}

impl ReadEventsOptions {
    /// The first `limit` events, up to the current frontier.
    pub fn new(limit: usize) -> Self {
        Self {
            after_index: 0,
            through_index: None,
            limit,
        }
    }

    /// Only events after this index.
    pub fn after_index(mut self, after_index: u64) -> Self {
        self.after_index = after_index;
        self
    }

    /// Only events up to this index (the first page's `through_index`);
    /// `None` takes the current frontier.
    pub fn through_index(mut self, through_index: Option<u64>) -> Self {
        self.through_index = through_index;
        self
    }
}

/// A page of [`crate::Store::read_events`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventsPage {
    /// Up to `limit` events after `after_index`.
    pub events: Vec<StoredEvent>,
    /// The frozen upper bound to pass to the next page.
    pub through_index: u64,
}

impl EventsPage {
    /// The page of a session that has no events (I2): empty, through 0.
    pub fn empty() -> Self {
        Self {
            events: Vec::new(),
            through_index: 0,
        }
    }
}

/// One row of [`crate::Store::list_snapshots`] (I3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    /// The reducer's name.
    pub reducer: String,
    /// The snapshot's index.
    pub index: u64,
    /// Store clock when it was written.
    pub updated_at: Millis,
}

/// What the live feeds of one store instance have done, and what is open
/// now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FeedStats {
    /// Reads of the log made by feeds: the shared readers' reads, and those
    /// of followers catching up on their own.
    pub reads: u64,
    /// Events handed to followers.
    pub deliveries: u64,
    /// Feeds open now.
    pub followers: u64,
    /// Sessions with a shared reader now.
    pub readers: u64,
}
