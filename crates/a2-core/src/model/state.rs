//! Reducer state (§4): snapshots.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::*;

/// A reducer's cached state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The index of the last event folded into `state`.
    pub index: u64,
    /// The reducer's state.
    pub state: Value,
}

/// Result of [`crate::Store::read_state`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateRead {
    /// The stored snapshot, if any.
    pub snapshot: Option<Snapshot>,
    /// Every event after the snapshot's index, up to the frontier (S1).
    pub events: Vec<Event>,
}

/// One snapshot to store with [`crate::Store::put_snapshots`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotWrite {
    /// The reducer's name (non-empty).
    pub reducer: String,
    /// The last folded index (≤ the frontier).
    pub index: u64,
    /// The state.
    pub state: Value,
}
