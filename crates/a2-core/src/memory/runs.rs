//! [`Runs`]: a set of event indexes kept as runs of consecutive indexes.
//!
//! A session's claimable-at-once events (`free` in `session`) are mostly
//! events appended one after another and not claimed yet: one run. Adding
//! the new highest index extends the last run in place, where a
//! `BTreeSet<u64>` would search its way down to a leaf and insert a key for
//! every appended event. Every operation is O(log runs); a set without two
//! consecutive members costs about what a `BTreeSet` does.

use std::collections::BTreeMap;

/// A set of indexes, as disjoint, non-adjacent runs `start..end`.
#[derive(Debug, Default)]
pub(super) struct Runs {
    /// Run start → run end (exclusive).
    runs: BTreeMap<u64, u64>,
}

impl Runs {
    /// How many indexes the set holds: O(runs), for tests.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.runs
            .iter()
            .map(|(&start, &end)| end - start)
            .sum::<u64>() as usize
    }

    /// The run holding `index`, as `(start, end)`, if any.
    fn run_of(&self, index: u64) -> Option<(u64, u64)> {
        let (&start, &end) = self.runs.range(..=index).next_back()?;
        (index < end).then_some((start, end))
    }

    /// Whether `index` is in the set.
    #[cfg(test)]
    pub(super) fn contains(&self, index: u64) -> bool {
        self.run_of(index).is_some()
    }

    /// Adds `index`; false when it was there already.
    pub(super) fn insert(&mut self, index: u64) -> bool {
        // The common case: the index right after the last run.
        if let Some(mut last) = self.runs.last_entry() {
            if *last.get() == index {
                *last.get_mut() = index + 1;
                return true;
            }
            if *last.get() < index {
                self.runs.insert(index, index + 1);
                return true;
            }
        }
        let before = self.runs.range(..=index).next_back().map(|(&s, &e)| (s, e));
        if before.is_some_and(|(_, end)| index < end) {
            return false;
        }
        let after = self.runs.get(&(index + 1)).copied();
        if after.is_some() {
            self.runs.remove(&(index + 1));
        }
        let end = after.unwrap_or(index + 1);
        match before {
            // Joins the run ending right before it.
            Some((start, prev_end)) if prev_end == index => {
                self.runs.insert(start, end);
            }
            _ => {
                self.runs.insert(index, end);
            }
        }
        true
    }

    /// Removes `index`; false when it was not there.
    pub(super) fn remove(&mut self, index: u64) -> bool {
        let Some((start, end)) = self.run_of(index) else {
            return false;
        };
        if start == index {
            self.runs.remove(&start);
        } else {
            self.runs.insert(start, index);
        }
        if index + 1 < end {
            self.runs.insert(index + 1, end);
        }
        true
    }

    /// The indexes in ascending order.
    pub(super) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs.iter().flat_map(|(&start, &end)| start..end)
    }

    /// The runs are disjoint, non-empty and never adjacent (adjacent ones
    /// would have been joined).
    #[cfg(test)]
    pub(super) fn check_invariants(&self) {
        let mut previous_end = None;
        for (&start, &end) in &self.runs {
            assert!(start < end, "empty run {start}..{end}");
            if let Some(previous_end) = previous_end {
                assert!(previous_end < start, "runs meet or overlap at {start}");
            }
            previous_end = Some(end);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn appended_indexes_form_one_run() {
        let mut runs = Runs::default();
        for index in 1..=1000 {
            assert!(runs.insert(index));
        }
        assert_eq!(runs.runs.len(), 1);
        assert!(runs.remove(500));
        assert_eq!(runs.runs.len(), 2);
        assert!(runs.insert(500));
        assert_eq!(runs.runs.len(), 1);
        assert_eq!(runs.len(), 1000);
        runs.check_invariants();
    }

    proptest! {
        /// The same answers as a `BTreeSet` for any sequence of inserts and
        /// removals of nearby indexes (so runs form, split and join).
        #[test]
        fn behaves_like_a_btree_set(ops in prop::collection::vec((any::<bool>(), 1u64..40), 0..200)) {
            let mut runs = Runs::default();
            let mut model = BTreeSet::new();
            for (insert, index) in ops {
                if insert {
                    prop_assert_eq!(runs.insert(index), model.insert(index));
                } else {
                    prop_assert_eq!(runs.remove(index), model.remove(&index));
                }
                runs.check_invariants();
                prop_assert_eq!(runs.len(), model.len());
                prop_assert!(runs.iter().eq(model.iter().copied()));
                for probe in 0..41 {
                    prop_assert_eq!(runs.contains(probe), model.contains(&probe));
                }
            }
        }
    }
}
