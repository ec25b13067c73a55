//! Presence namespaces of the memory store (§5).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::clock::Millis;
use crate::model::{PresenceEntry, PresenceMeta, PresencePatch};

#[derive(Debug, Clone)]
struct Stored {
    value: Value,
    seen: i64,
    at: Millis,
    expires_at: Millis,
}

/// One namespace: entries keyed by `(participant, field)`, so iteration is
/// by participant then field.
#[derive(Debug, Default)]
pub(super) struct Namespace {
    entries: BTreeMap<(String, String), Stored>,
}

impl Namespace {
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// P1, P2: applies the fields that win last-writer-wins and returns the
    /// applied part. An entry already expired at `now` counts as absent: it is
    /// no longer visible to any reader, so it cannot win against a write.
    pub(super) fn set(
        &mut self,
        participant: &str,
        values: BTreeMap<String, Option<Value>>,
        meta: PresenceMeta,
        now: Millis,
    ) -> Option<PresencePatch> {
        let expires_at = crate::validate::expiry(now, meta.ttl_ms);
        let mut applied = BTreeMap::new();
        for (field, value) in values {
            let key = (participant.to_owned(), field);
            let stored = self.entries.get(&key).map(|s| (s.at, s.expires_at));
            if !crate::rules::presence::applies(stored, meta.at, now) {
                continue;
            }
            match &value {
                None => {
                    self.entries.remove(&key);
                }
                Some(value) => {
                    self.entries.insert(
                        key.clone(),
                        Stored {
                            value: value.clone(),
                            seen: meta.seen,
                            at: meta.at,
                            expires_at,
                        },
                    );
                }
            }
            applied.insert(key.1, value);
        }
        if applied.is_empty() {
            return None;
        }
        Some(PresencePatch {
            participant: participant.to_owned(),
            values: applied,
            seen: meta.seen,
            at: meta.at,
        })
    }

    /// P3: prunes entries expired at `now` and returns the live ones.
    pub(super) fn read(&mut self, now: Millis) -> Vec<PresenceEntry> {
        self.entries.retain(|_, e| e.expires_at > now);
        self.entries
            .iter()
            .map(|((participant, field), e)| PresenceEntry {
                participant: participant.clone(),
                field: field.clone(),
                value: e.value.clone(),
                seen: e.seen,
                at: e.at,
                expires_at: e.expires_at,
            })
            .collect()
    }
}
