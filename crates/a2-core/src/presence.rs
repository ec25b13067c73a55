//! Bookkeeping every store's presence subscriptions share (P4).
//!
//! A subscription must be able to recover: after it may have missed patches
//! (it fell behind, its connection came back, its subscription only just
//! took effect) it re-reads the namespace and reports what changed since
//! what it last showed. [`PresenceView`] keeps what it showed and computes
//! that difference, so that every store reports recovery the same way.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::{PresenceEntry, PresencePatch};

/// What one subscriber has been shown of a namespace: the last value of each
/// `(participant, field)`.
///
/// ```
/// use a2_core::presence::PresenceView;
/// use a2_core::{PresenceEntry, PresencePatch};
/// use serde_json::json;
///
/// let entry = |participant: &str, field: &str, value, at| PresenceEntry {
///     participant: participant.into(),
///     field: field.into(),
///     value,
///     seen: at,
///     at,
///     expires_at: 60_000,
/// };
/// // The baseline: ann is typing.
/// let mut view = PresenceView::from_entries([entry("ann", "typing", json!(true), 1)]);
/// // Patches missed meanwhile: ann stopped, bob arrived.
/// let patches = view.resync(vec![entry("bob", "here", json!(1), 5)]);
/// assert_eq!(patches, [
///     PresencePatch {
///         participant: "ann".into(),
///         values: [("typing".to_owned(), None)].into(),
///         seen: 0,
///         at: 0,
///     },
///     PresencePatch {
///         participant: "bob".into(),
///         values: [("here".to_owned(), Some(json!(1)))].into(),
///         seen: 5,
///         at: 5,
///     },
/// ]);
/// assert_eq!(view.get("bob", "here"), Some(&json!(1)));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PresenceView {
    values: BTreeMap<(String, String), Value>,
}

impl PresenceView {
    /// A view of a namespace as `entries` show it: a subscription's
    /// baseline, whose entries it does not report.
    pub fn from_entries(entries: impl IntoIterator<Item = PresenceEntry>) -> Self {
        Self {
            values: entries
                .into_iter()
                .map(|e| ((e.participant, e.field), e.value))
                .collect(),
        }
    }

    /// The value shown for `participant`'s `field`, if any.
    pub fn get(&self, participant: &str, field: &str) -> Option<&Value> {
        self.values.get(&(participant.to_owned(), field.to_owned()))
    }

    /// How many `(participant, field)` entries the view holds.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the view holds no entry.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Records that the subscriber was shown `patch`: its values replace
    /// those of the view, its `None`s delete.
    pub fn apply(&mut self, patch: &PresencePatch) {
        for (field, value) in &patch.values {
            let key = (patch.participant.clone(), field.clone());
            match value {
                Some(value) => {
                    self.values.insert(key, value.clone());
                }
                None => {
                    self.values.remove(&key);
                }
            }
        }
    }

    /// Makes the view what `entries` (the live entries of the namespace,
    /// just read) show, and returns the patches that take a subscriber from
    /// the view to them (P4 recovery): per participant, in participant
    /// order, one patch with the fields whose value is new or changed (its
    /// `seen` and `at` those of its newest such entry) and `None` for the
    /// fields that are gone. A participant with only deletions gets `seen`
    /// and `at` 0: nothing it sent says when.
    pub fn resync(&mut self, entries: Vec<PresenceEntry>) -> Vec<PresencePatch> {
        self.resync_reporting(entries, |_, _| false)
    }

    /// [`resync`](Self::resync), except that a live entry for which
    /// `report(participant, field)` holds is reported even when the view
    /// already has its value: for entries the subscriber may hold a stale
    /// copy of, whatever the value says.
    pub fn resync_reporting(
        &mut self,
        entries: Vec<PresenceEntry>,
        mut report: impl FnMut(&str, &str) -> bool,
    ) -> Vec<PresencePatch> {
        let old = std::mem::take(&mut self.values);
        let mut patches: BTreeMap<String, PresencePatch> = BTreeMap::new();
        for entry in entries {
            let key = (entry.participant.clone(), entry.field.clone());
            let unchanged =
                old.get(&key) == Some(&entry.value) && !report(&entry.participant, &entry.field);
            self.values.insert(key, entry.value.clone());
            if unchanged {
                continue;
            }
            let patch = patches
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
        for (participant, field) in old.into_keys() {
            if self
                .values
                .contains_key(&(participant.clone(), field.clone()))
            {
                continue;
            }
            patches
                .entry(participant.clone())
                .or_insert_with(|| PresencePatch {
                    participant,
                    values: BTreeMap::new(),
                    seen: 0,
                    at: 0,
                })
                .values
                .insert(field, None);
        }
        patches.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(participant: &str, field: &str, value: Value, seen: i64, at: i64) -> PresenceEntry {
        PresenceEntry {
            participant: participant.into(),
            field: field.into(),
            value,
            seen,
            at,
            expires_at: 1_000_000,
        }
    }

    fn patch(
        participant: &str,
        values: &[(&str, Option<Value>)],
        seen: i64,
        at: i64,
    ) -> PresencePatch {
        PresencePatch {
            participant: participant.into(),
            values: values
                .iter()
                .map(|(f, v)| ((*f).to_owned(), v.clone()))
                .collect(),
            seen,
            at,
        }
    }

    #[test]
    fn the_baseline_is_not_reported() {
        let entries = vec![
            entry("ann", "a", json!(1), 1, 1),
            entry("bob", "b", json!(2), 2, 2),
        ];
        let mut view = PresenceView::from_entries(entries.clone());
        assert_eq!(view.len(), 2);
        assert!(view.resync(entries).is_empty());
        assert!(PresenceView::default().is_empty());
    }

    #[test]
    fn apply_sets_and_deletes() {
        let mut view = PresenceView::default();
        view.apply(&patch(
            "ann",
            &[("a", Some(json!(1))), ("b", Some(json!(2)))],
            1,
            1,
        ));
        view.apply(&patch("ann", &[("a", None), ("b", Some(json!(3)))], 2, 2));
        assert_eq!(view.get("ann", "a"), None);
        assert_eq!(view.get("ann", "b"), Some(&json!(3)));
        assert_eq!(view.len(), 1);
        // A patch already shown leaves nothing to recover.
        assert!(
            view.resync(vec![entry("ann", "b", json!(3), 2, 2)])
                .is_empty()
        );
    }

    #[test]
    fn resync_groups_changes_per_participant_with_the_newest_time() {
        let mut view = PresenceView::from_entries([
            entry("ann", "same", json!(0), 1, 1),
            entry("ann", "old", json!(0), 1, 1),
        ]);
        let patches = view.resync(vec![
            entry("ann", "new", json!(1), 7, 30),
            entry("ann", "old", json!(2), 8, 40),
            entry("ann", "same", json!(0), 1, 1),
            entry("zed", "z", json!(3), 9, 10),
        ]);
        assert_eq!(
            patches,
            [
                patch(
                    "ann",
                    &[("new", Some(json!(1))), ("old", Some(json!(2)))],
                    8,
                    40
                ),
                patch("zed", &[("z", Some(json!(3)))], 9, 10),
            ]
        );
        assert_eq!(view.len(), 4);
    }

    #[test]
    fn resync_reports_fields_gone_as_deletions() {
        let mut view = PresenceView::from_entries([
            entry("ann", "a", json!(1), 1, 1),
            entry("ann", "b", json!(1), 1, 1),
            entry("bob", "c", json!(1), 1, 1),
        ]);
        let patches = view.resync(vec![entry("ann", "a", json!(2), 5, 5)]);
        assert_eq!(
            patches,
            [
                patch("ann", &[("a", Some(json!(2))), ("b", None)], 5, 5),
                patch("bob", &[("c", None)], 0, 0),
            ]
        );
        assert_eq!(view.get("bob", "c"), None);
        assert!(
            view.resync(vec![entry("ann", "a", json!(2), 5, 5)])
                .is_empty()
        );
    }

    #[test]
    fn resync_reporting_reports_chosen_entries_even_unchanged() {
        let mut view = PresenceView::from_entries([
            entry("ann", "a", json!(1), 1, 1),
            entry("bob", "b", json!(1), 1, 1),
        ]);
        let patches = view.resync_reporting(
            vec![
                entry("ann", "a", json!(1), 1, 1),
                entry("bob", "b", json!(1), 1, 1),
            ],
            |participant, _| participant == "bob",
        );
        assert_eq!(patches, [patch("bob", &[("b", Some(json!(1)))], 1, 1)]);
    }
}
