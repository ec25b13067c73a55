//! Presence (§5).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock::Millis;

/// Sender-side metadata of a presence write (§5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresenceMeta {
    /// The sender's own "last seen" marker, carried as is.
    pub seen: i64,
    /// The sender's timestamp: orders writes (P1, last writer wins).
    pub at: Millis,
    /// Entries expire at store-now + ttl (P2); must be ≥ 1.
    pub ttl_ms: u64,
}

/// A presence write that [`crate::validate::presence_set`] accepted: what a
/// store applies in [`crate::Store::presence_apply`] (P1, P2).
#[derive(Debug, Clone, PartialEq)]
pub struct PresenceRequest<'a> {
    /// The namespace.
    pub ns: &'a str,
    /// Whose values.
    pub participant: &'a str,
    /// The fields to set; `None` deletes one.
    pub values: BTreeMap<String, Option<Value>>,
    /// The sender's metadata.
    pub meta: PresenceMeta,
}

/// The applied part of a presence write (P1), as subscribers receive it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PresencePatch {
    /// Whose values.
    pub participant: String,
    /// Field → value; `None` deletes the field.
    pub values: BTreeMap<String, Option<Value>>,
    /// The sender's marker.
    pub seen: i64,
    /// The sender's timestamp.
    pub at: Millis,
}

/// One live presence entry (P3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PresenceEntry {
    /// The participant.
    pub participant: String,
    /// The field.
    pub field: String,
    /// The value.
    pub value: Value,
    /// The sender's marker.
    pub seen: i64,
    /// The sender's timestamp.
    pub at: Millis,
    /// Store-clock expiry.
    pub expires_at: Millis,
}
