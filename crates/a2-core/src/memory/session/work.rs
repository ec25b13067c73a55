//! What claims, renewals, releases, completions, failures and revives do to
//! a session's records, ready sets and counters (C2, RN2, RL1, CO2, F6,
//! RV2), once the rules in `crate::rules` have decided them.

use super::*;
use crate::memory::row::Work;

impl SessionState {
    /// C1, C2, C3, C4, C7 for one session.
    pub(in crate::memory) fn claim(
        &mut self,
        now: Millis,
        holder: &str,
        expires_at: Millis,
        exclude: &HashSet<u64>,
        limit: usize,
    ) -> Result<ClaimOutcome> {
        if !self.has_pending() {
            return Ok(ClaimOutcome::Settled);
        }
        // Leases and retry times that have come due: their events are free.
        while let Some(&(at, index)) = self.timed.first() {
            if at > now {
                break;
            }
            self.set_slot(index, Slot::Free);
        }
        let mut picked = Vec::new();
        let mut not_yet = Vec::new();
        for index in self.free.iter() {
            if exclude.contains(&index) {
                continue;
            }
            match self.get(index) {
                // Only after the clock was moved backward can a free record
                // hold a lease or retry time still in the future.
                Some(rec) if !rec.claimable_at(now) => not_yet.push(index),
                Some(_) => {
                    picked.push(index);
                    if picked.len() == limit {
                        break;
                    }
                }
                None => {}
            }
        }
        for index in not_yet {
            self.reslot(index);
        }
        // C3, C7: the earliest time among the leased and waiting events not
        // excluded (those picked are not leased yet).
        let next_at = self
            .timed
            .iter()
            .find(|(_, i)| !exclude.contains(i))
            .map(|&(at, _)| at);
        if picked.is_empty() {
            return Ok(match next_at {
                Some(retry_at) => ClaimOutcome::Busy { retry_at },
                None => ClaimOutcome::Settled,
            });
        }
        for &index in &picked {
            self.lease(index, now, holder, expires_at);
        }
        self.touch(now);
        let claimed = picked.into_iter().filter_map(|index| self.stored(index));
        Ok(ClaimOutcome::Claimed {
            events: claimed.collect::<Result<_>>()?,
            next_at,
        })
    }

    /// C2 for one ready event: a new attempt, leased to `holder`.
    fn lease(&mut self, index: u64, now: Millis, holder: &str, expires_at: Millis) {
        let Some(rec) = self.get_mut(index) else {
            return;
        };
        let ev = &mut rec.ev;
        ev.attempt_count += 1;
        let work = ev.work_mut();
        work.first_claimed_at.get_or_insert(now);
        work.last_claimed_at = Some(now);
        work.claim_holder = Some(holder.to_owned());
        work.claim_expires_at = Some(expires_at);
        // The wait for the retry time is over: this claim consumed it.
        work.retry_at = None;
        self.set_slot(index, Slot::At(expires_at));
        self.counters.attempt_count += 1;
    }

    /// AC2: leases to `holder`, in index order and up to `limit`, the events
    /// from `first` to the frontier (just appended) that are ready: pending
    /// and lane-less, or heading their lane, and not delayed (a delayed
    /// event sits in `timed`, DL3). Returns their indexes.
    pub(in crate::memory) fn claim_appended(
        &mut self,
        first: u64,
        now: Millis,
        holder: &str,
        expires_at: Millis,
        limit: usize,
    ) -> Vec<u64> {
        let ready: Vec<u64> = (first..=self.frontier())
            .filter(|&index| {
                self.get(index)
                    .is_some_and(|rec| matches!(rec.slot, Slot::Free))
            })
            .take(limit)
            .collect();
        for &index in &ready {
            self.lease(index, now, holder, expires_at);
        }
        ready
    }

    /// RN2: moves the lease of `index` to `expires_at`.
    pub(in crate::memory) fn renew(&mut self, index: u64, expires_at: Millis) {
        if let Some(rec) = self.get_mut(index) {
            rec.ev.work_mut().claim_expires_at = Some(expires_at);
        }
        self.reslot(index);
    }

    /// RL1: ends the lease of `index`; the event is claimable at once.
    pub(in crate::memory) fn release(&mut self, index: u64) {
        if let Some(rec) = self.get_mut(index) {
            let work = rec.ev.work_mut();
            work.claim_holder = None;
            work.claim_expires_at = None;
        }
        self.reslot(index);
    }

    /// CO2: marks `index` processed by `attempt` and lets the next event of
    /// its lane become ready.
    pub(in crate::memory) fn complete(
        &mut self,
        index: u64,
        attempt: u32,
        returned_ids: Vec<String>,
        now: Millis,
    ) {
        self.settle(index, now, false, |work| {
            work.processed_by_attempt = Some(attempt);
            work.returned_event_ids = returned_ids;
        });
    }

    /// CN1: settles `index` as cancelled at `now` (`rules::cancel::decide`
    /// decided it; `dead` when it was a dead letter) and lets the next event
    /// of its lane become ready.
    pub(in crate::memory) fn cancel(
        &mut self,
        index: u64,
        reason: Option<String>,
        dead: bool,
        now: Millis,
    ) {
        self.settle(index, now, dead, |work| {
            work.cancelled_at = Some(now);
            work.cancel_reason = reason;
            work.failed_at = None;
        });
    }

    /// Settles `index` at `now` (CO2, CN1): processed, its lease and retry
    /// cleared and `mark` applied to its work; it leaves the ready set and
    /// the pending count (the failed count when it was `dead`), and the
    /// next event of its lane becomes ready.
    fn settle(&mut self, index: u64, now: Millis, dead: bool, mark: impl FnOnce(&mut Work)) {
        let Some(rec) = self.get_mut(index) else {
            return;
        };
        let ev = &mut rec.ev;
        ev.processed_at = Some(now);
        let work = ev.work_mut();
        work.claim_holder = None;
        work.claim_expires_at = None;
        work.retry_at = None;
        mark(work);
        let lane = ev.lane.clone();
        self.set_slot(index, Slot::Out);
        let count = if dead {
            &mut self.counters.failed_count
        } else {
            &mut self.counters.pending_count
        };
        *count = count.saturating_sub(1);
        self.touch(now);
        self.advance_lane(index, lane);
    }

    /// `index` of `lane` settled (CO2, CN1): it leaves its lane, and the
    /// next event becomes ready unless it is dead-lettered.
    fn advance_lane(&mut self, index: u64, lane: Option<Arc<str>>) {
        let Some(lane) = lane else {
            return;
        };
        let Some(queue) = self.lanes.get_mut(&lane) else {
            return;
        };
        let mut next = None;
        if queue.front() == Some(&index) {
            queue.pop_front();
            next = queue.front().copied();
        } else {
            // Only a lane head is ever ready, hence claimed, hence completed;
            // this keeps the lane consistent should that ever not hold.
            queue.retain(|&i| i != index);
        }
        if queue.is_empty() {
            self.lanes.remove(&lane);
        }
        if let Some(next) = next
            && self
                .get(next)
                .is_some_and(|r| r.ev.work().failed_at.is_none())
        {
            self.reslot(next);
        }
    }

    /// F6: records a failure of the current attempt of `index`, as
    /// `rules::fail::decide` decided it: the event now has `failure_count`
    /// failures and is dead-lettered when `dead` (its lane stays blocked),
    /// else ready again, at once or from `retry_at`.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::memory) fn fail(
        &mut self,
        index: u64,
        attempt: u32,
        error: String,
        (failure_count, dead): (u32, bool),
        retry_at: Option<Millis>,
        now: Millis,
    ) {
        let Some(rec) = self.get_mut(index) else {
            return;
        };
        let ev = &mut rec.ev;
        ev.failure_count = failure_count;
        let work = ev.work_mut();
        work.last_error = Some(error);
        work.last_failed_at = Some(now);
        work.last_failed_attempt = Some(attempt);
        work.claim_holder = None;
        work.claim_expires_at = None;
        if dead {
            work.failed_at = Some(now);
            work.retry_at = None;
        } else {
            work.retry_at = retry_at;
        }
        self.counters.failure_count += 1;
        self.touch(now);
        if dead {
            self.set_slot(index, Slot::Out);
            self.counters.pending_count = self.counters.pending_count.saturating_sub(1);
            self.counters.failed_count += 1;
        } else {
            self.reslot(index);
        }
    }

    /// RV2: makes the dead-lettered `index` (`rules::revive::revives`
    /// decided it) pending again with no failures. It is ready at once
    /// when lane-less or at the front of its lane, which a dead
    /// letter always is (only a lane head is ever claimed, hence failed,
    /// and a dead head stays at the front).
    pub(in crate::memory) fn revive(&mut self, index: u64, now: Millis) {
        let Some(rec) = self.get_mut(index) else {
            return;
        };
        let ev = &mut rec.ev;
        let failures = u64::from(ev.failure_count);
        ev.failure_count = 0;
        let work = ev.work_mut();
        work.failed_at = None;
        work.retry_at = None;
        work.claim_holder = None;
        work.claim_expires_at = None;
        let lane = ev.lane.clone();
        self.counters.pending_count += 1;
        self.counters.failed_count = self.counters.failed_count.saturating_sub(1);
        self.counters.failure_count = self.counters.failure_count.saturating_sub(failures);
        self.touch(now);
        let heads = match &lane {
            None => true,
            Some(lane) => self.lanes.get(lane).and_then(|q| q.front()) == Some(&index),
        };
        if heads {
            self.reslot(index);
        }
    }
}
