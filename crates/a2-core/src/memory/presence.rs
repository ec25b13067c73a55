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
        let expires_at = now.saturating_add(i64::try_from(meta.ttl_ms).unwrap_or(i64::MAX));
        let mut applied = BTreeMap::new();
        for (field, value) in values {
            let key = (participant.to_owned(), field);
            if let Some(stored) = self.entries.get(&key)
                && stored.expires_at > now
                && stored.at > meta.at
            {
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

/// Groups live entries into one patch per participant: what a subscriber
/// that missed patches needs to catch up (P4 recovery). Fields the
/// subscriber last saw but that are gone now are sent as deletions.
pub(super) fn recovery_patches(
    entries: Vec<PresenceEntry>,
    seen_before: &BTreeMap<(String, String), Value>,
) -> Vec<PresencePatch> {
    let mut by_participant: BTreeMap<String, PresencePatch> = BTreeMap::new();
    let mut live = std::collections::BTreeSet::new();
    for entry in entries {
        live.insert((entry.participant.clone(), entry.field.clone()));
        let unchanged = seen_before
            .get(&(entry.participant.clone(), entry.field.clone()))
            .is_some_and(|v| *v == entry.value);
        if unchanged {
            continue;
        }
        let patch = by_participant
            .entry(entry.participant.clone())
            .or_insert_with(|| PresencePatch {
                participant: entry.participant.clone(),
                values: BTreeMap::new(),
                seen: entry.seen,
                at: entry.at,
            });
        if entry.at >= patch.at {
            patch.at = entry.at;
            patch.seen = entry.seen;
        }
        patch.values.insert(entry.field, Some(entry.value));
    }
    for (participant, field) in seen_before.keys() {
        if live.contains(&(participant.clone(), field.clone())) {
            continue;
        }
        by_participant
            .entry(participant.clone())
            .or_insert_with(|| PresencePatch {
                participant: participant.clone(),
                values: BTreeMap::new(),
                seen: 0,
                at: 0,
            })
            .values
            .insert(field.clone(), None);
    }
    by_participant.into_values().collect()
}
