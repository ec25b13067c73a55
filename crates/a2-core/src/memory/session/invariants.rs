//! The consistency check of a session's maintained structures, for tests.

use super::*;

impl SessionState {
    /// Consistency check of every maintained structure against the log,
    /// for tests: O(n).
    pub(in crate::memory) fn check_invariants(&self) {
        let mut pending = 0;
        let mut failed = 0;
        let mut attempts = 0;
        let mut failures = 0;
        let mut heads: HashMap<&str, u64> = HashMap::default();
        assert_eq!(self.ids.len(), self.log.len(), "one id per event");
        for (index, rec) in (self.first_index()..).zip(&self.log) {
            let ev = &rec.ev;
            assert_eq!(self.index_of(self.texts.id(ev.text)), Some(index));
            attempts += u64::from(ev.attempt_count);
            failures += u64::from(ev.failure_count);
            if ev.work().failed_at.is_some() {
                failed += 1;
            }
            let in_lane = ev.processed_at.is_none() && ev.lane.is_some();
            if let (true, Some(lane)) = (in_lane, ev.lane.as_deref()) {
                heads.entry(lane).or_insert(index);
            }
            if ev.is_pending() {
                pending += 1;
            }
            let ready = ev.is_pending()
                && match ev.lane.as_deref() {
                    None => true,
                    Some(lane) => heads.get(lane) == Some(&index),
                };
            match rec.slot {
                Slot::Out => assert!(!ready, "event {index} is ready but out"),
                Slot::Free => {
                    assert!(ready, "event {index} is free but not ready");
                    assert!(self.free.contains(index));
                }
                Slot::At(at) => {
                    assert!(ready, "event {index} is timed but not ready");
                    assert!(self.timed.contains(&(at, index)));
                }
            }
        }
        let slotted = self.log.iter().filter(|r| r.slot != Slot::Out).count();
        assert_eq!(slotted, self.free.len() + self.timed.len());
        self.free.check_invariants();
        assert_eq!(self.counters.pending_count, pending);
        assert_eq!(self.counters.failed_count, failed);
        assert_eq!(self.counters.attempt_count, attempts);
        assert_eq!(self.counters.failure_count, failures);
        for (lane, queue) in &self.lanes {
            assert_eq!(heads.get(&**lane), queue.front());
        }
    }
}
