//! Presence subscriptions (P4), the loop written once for every store.
//!
//! A store gives a [`PresenceTail`]: the patches it hears, in the order
//! they applied, and a re-read of the namespace. A subscription must be
//! able to recover: after it may have missed patches (it fell behind, or
//! its connection came back) it re-reads the namespace and reports what
//! changed since what it last showed. [`PresenceView`] keeps what it
//! showed and computes that difference, and [`subscription`] runs the loop,
//! so that every store reports patches and recovery the same way.

use std::collections::{BTreeMap, VecDeque};

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::model::{PresenceEntry, PresencePatch};
use crate::store::PresenceStream;

/// What a store's presence subscription heard.
#[derive(Debug)]
pub enum Heard {
    /// A patch applied to the namespace, in order.
    Patch(PresencePatch),
    /// Patches may have been missed: re-read and report the difference.
    Missed,
    /// The subscription ends with this error (the store closed, its
    /// connection failed for good).
    End(Error),
}

/// A store's side of one presence subscription, live when created: every
/// patch applied after its baseline read is heard, or [`Heard::Missed`].
#[async_trait]
pub trait PresenceTail: Send + 'static {
    /// The next thing heard.
    async fn next(&mut self) -> Heard;

    /// The namespace's live entries now, for a recovery: a patch heard
    /// after this returns applied after the read, one applied before is
    /// in it (or, over a connection that came back, may be both).
    async fn reread(&mut self) -> Result<Vec<PresenceEntry>>;
}

/// P4: the patches `tail` hears after `baseline` (the namespace as read
/// when the subscription went live), with recoveries reported as the
/// difference from what the subscriber was shown.
pub fn subscription(tail: Box<dyn PresenceTail>, baseline: Vec<PresenceEntry>) -> PresenceStream {
    struct Subscription {
        tail: Box<dyn PresenceTail>,
        view: PresenceView,
        out: VecDeque<PresencePatch>,
        done: bool,
    }
    impl Subscription {
        async fn step(&mut self) -> Result<PresencePatch> {
            loop {
                if let Some(patch) = self.out.pop_front() {
                    return Ok(patch);
                }
                match self.tail.next().await {
                    Heard::Patch(patch) => {
                        self.view.apply(&patch);
                        return Ok(patch);
                    }
                    Heard::Missed => {
                        let entries = self.tail.reread().await?;
                        self.out.extend(self.view.resync(entries));
                    }
                    Heard::End(error) => return Err(error),
                }
            }
        }
    }
    let subscription = Subscription {
        tail,
        view: PresenceView::from_entries(baseline),
        out: VecDeque::new(),
        done: false,
    };
    futures::stream::unfold(subscription, |mut sub| async move {
        if sub.done {
            return None;
        }
        let item = sub.step().await;
        sub.done = item.is_err();
        Some((item, sub))
    })
    .boxed()
}

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
        let old = std::mem::take(&mut self.values);
        let mut patches: BTreeMap<String, PresencePatch> = BTreeMap::new();
        for entry in entries {
            let key = (entry.participant.clone(), entry.field.clone());
            let unchanged = old.get(&key) == Some(&entry.value);
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
}
