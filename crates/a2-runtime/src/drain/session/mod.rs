//! The drain of one session: its loop of claims, starts, renewals and
//! releases (RT2, RT3, RT6, RT13).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cancel::Stop;

mod leases;
use crate::shared::Shared;
use crate::stats::Counters;
use a2_core::Result;
use a2_core::{Claim, ClaimOutcome, ClaimRequest, ErrorCode, Lease, Millis, StoredEvent};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::task::JoinSet;

use super::*;

/// A running attempt, as its drain knows it.
pub(super) struct Running {
    attempt: u32,
    stop: Stop,
    task: tokio::task::Id,
}

pub(super) struct Drain {
    app: Arc<Shared>,
    session: String,
    wake: Arc<Notify>,
    /// Each task yields the indexes it ran (one, or a batch's, RT9) and
    /// whether its outcome may have made events claimable (RT13).
    tasks: JoinSet<(Vec<u64>, bool)>,
    running: BTreeMap<u64, Running>,
    /// Events claimed at append that wait for a permit, in index order,
    /// each holding its place of the prefetch; their leases are renewed
    /// like the running ones' (RT13).
    waiting: VecDeque<(StoredEvent, Option<OwnedSemaphorePermit>)>,
    /// The last claim was full: more may be claimable (RT13).
    backlog: bool,
    /// When the last claim said the next waiting event comes due (C7): the
    /// drain claims then once its attempts are done (RT18).
    next_at: Option<Instant>,
    /// The next claim is a light one (RT13): the claim after a light claim
    /// that came back full (a claim at a time is light too).
    /// Like a claim at a time, it takes one slot and half of the free
    /// places and never waits for room: it is expected to find a few
    /// events that are due, and waiting behind other drains' claims would
    /// make them late.
    light: bool,
}

/// The longest a due claim waits for room in the prefetch (RT13): long
/// enough for a busy process to free many places, short against any
/// handler's run.
const HOLD_MAX: Duration = Duration::from_millis(10);

/// When the drain claims next.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Right away.
    Now,
    /// At this instant (the store said `Busy`, or the store failed).
    At(Instant),
    /// Only when woken or when an attempt finishes.
    Idle,
}

impl Drain {
    pub(super) fn new(app: Arc<Shared>, session: String, wake: Arc<Notify>) -> Self {
        Self {
            app,
            session,
            wake,
            tasks: JoinSet::new(),
            running: BTreeMap::new(),
            waiting: VecDeque::new(),
            backlog: false,
            next_at: None,
            light: false,
        }
    }

    pub(super) async fn run(mut self, first: Next) {
        let mut renew = self.renew_timer();
        let stop = self.app.stop.clone();
        let abort = self.app.abort.clone();
        let mut released = false;
        let mut next = first;
        // A claim held back for room (RT13) waited its poll: it goes ahead.
        let mut held = false;
        // However busy the process, a claim is held back at most one poll
        // interval from when it was first held back (RT13).
        let mut hold_cap: Option<Instant> = None;
        self.adopt();
        loop {
            if self.done(&mut next).await {
                return;
            }
            // One clock read per turn: the claim is due, or waits for `claim_at`.
            let now = Instant::now();
            let claim_at = match next {
                Next::Now => Some(now),
                Next::At(at) => Some(at),
                Next::Idle => None,
            };
            let due = claim_at.is_some_and(|at| at <= now);
            // RT13: a claim at a time (`Busy.retry_at`) and a light claim
            // take an eighth of the prefetch's places and half of the other
            // free places, no slot, and go ahead once those are free; any
            // other claim takes a slot, then every free slot and place.
            let light = self.light || matches!(next, Next::At(_));
            // RT13: while most places of the prefetch are taken, a due
            // claim that is not light waits until enough come back, so that
            // it hands out many events rather than one per freed permit.
            // The future exists before the check, so no return of places is
            // missed.
            let shared = self.app.clone();
            let room_changed = shared.room.notified();
            tokio::pin!(room_changed);
            let room = light || self.has_room() || held;
            let holding = due && !room && self.waiting.is_empty();
            if !holding {
                hold_cap = None;
            } else if hold_cap.is_none() {
                hold_cap = Some(now + self.app.options.poll_interval);
            }
            // Held back briefly after the last sign of activity, and never
            // past the cap.
            let hold_until = hold_cap.map(|cap| cap.min(now + HOLD_MAX));
            let light_places = super::light_places(&self.app);
            tokio::select! {
                // Biased, with the abort branch first: once shutdown passes
                // its deadline, the cancelled attempts finish and would be
                // joined (and forgotten) before their leases are released if
                // the branches were polled in random order.
                biased;
                _ = abort.cancelled(), if !released && self.holds_leases() => {
                    released = true;
                    self.release().await;
                }
                Some(joined) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                    // RT13: claim only when something may have become
                    // claimable; a plain completion frees nothing.
                    if self.finished_all(joined) && !stop.is_cancelled() {
                        next = Next::Now;
                    }
                    self.retain();
                }
                _ = renew.tick(), if self.holds_leases() => self.renew().await,
                _ = self.wake.notified() => {
                    if self.adopt() && !stop.is_cancelled() {
                        // New work was announced: whatever claim was next,
                        // this one may find a batch, so it is greedy (RT13).
                        self.light = false;
                        next = Next::Now;
                    }
                }
                _ = stop.cancelled(), if next != Next::Idle => {}
                _ = &mut room_changed, if holding => {}
                // However the places come back, a claim is held back briefly.
                _ = sleep_until(hold_until), if holding => held = true,
                // A light claim waits for its places, never for a slot: the
                // slots stay with handlers while the store answers.
                place = self.app.prefetch.clone().acquire_many_owned(light_places),
                    if due && light && self.waiting.is_empty() =>
                {
                    // The semaphore is never closed.
                    let Ok(place) = place else { continue };
                    held = false;
                    next = self.claim(place, false).await;
                }
                permit = self.app.permits.clone().acquire_owned(),
                    if (due && room && !light) || (!self.waiting.is_empty() && !stop.is_cancelled()) =>
                {
                    // The semaphore is never closed.
                    let Ok(permit) = permit else { continue };
                    if self.waiting.is_empty() {
                        held = false;
                        next = self.claim(permit, !light).await;
                    } else {
                        self.start_waiting(permit);
                    }
                }
                _ = sleep_until(claim_at), if claim_at.is_some() && !due => {}
            }
        }
    }

    /// The timer of lease renewals (RT3): every renew interval, from one
    /// interval from now; a late tick is not made up for.
    fn renew_timer(&self) -> tokio::time::Interval {
        let every = self.app.options.renew_interval;
        let mut renew = tokio::time::interval_at(
            tokio::time::Instant::now() + every,
            every.max(Duration::from_millis(1)),
        );
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        renew
    }

    /// Whether the drain ends now: at shutdown once its attempts are done
    /// (events that never started are handed back at once, RT6, RL1; no
    /// claim follows), else when it is idle with nothing running, waiting
    /// or left to claim.
    async fn done(&mut self, next: &mut Next) -> bool {
        if self.app.stop.is_cancelled() {
            *next = Next::Idle;
            if !self.waiting.is_empty() {
                self.release_waiting().await;
            }
            self.tasks.is_empty()
        } else if *next == Next::Idle && self.tasks.is_empty() && self.waiting.is_empty() {
            // RT18: the last claim named when another event comes due (a
            // lease, a retry, a delay, C7): the drain claims then.
            if let Some(at) = self.next_at.take() {
                *next = Next::At(at);
                return false;
            }
            self.finish_if_clean()
        } else {
            false
        }
    }

    /// RT16: trims the session when its retention is due, in a task of its
    /// own: the drain goes on meanwhile. A trim that fails is only a trim
    /// put off.
    fn retain(&mut self) {
        let Some(retention) = self.app.options.retention else {
            return;
        };
        let Some(highest) = crate::retention::due(&self.app, &self.session, retention) else {
            return;
        };
        let (app, session) = (self.app.clone(), self.session.clone());
        tokio::spawn(async move {
            if let Err(error) = crate::retention::retain(&app, &session, retention, highest).await {
                tracing::warn!(%session, %error, "retention: the session was not trimmed");
            }
        });
    }

    /// Records `joined` and every other attempt that finished meanwhile,
    /// so a burst of completions costs one claim, not one each; whether a
    /// claim may find something (RT13).
    fn finished_all(
        &mut self,
        joined: Result<(tokio::task::Id, (Vec<u64>, bool)), tokio::task::JoinError>,
    ) -> bool {
        let mut again = self.finished(joined);
        while let Some(joined) = self.tasks.try_join_next_with_id() {
            again |= self.finished(joined);
        }
        again || self.backlog
    }

    /// Whether at least half the places of the prefetch are free: a claim
    /// can then hand out many events (RT13).
    fn has_room(&self) -> bool {
        self.app.prefetch.available_permits() * 2 >= self.app.prefetch_size
    }

    /// Places of the prefetch came back: drains holding back a claim look
    /// again.
    fn places_freed(&self) {
        if self.has_room() {
            self.app.room.notify_waiters();
        }
    }

    /// Whether attempts run or events wait: leases to renew or release.
    fn holds_leases(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty()
    }

    /// Starts the events appends handed over (RT13) and stops the
    /// attempts whose events were cancelled (RT17); returns whether the
    /// drain was also told to claim (`dirty`), or a cancel may have moved
    /// a lane.
    fn adopt(&mut self) -> bool {
        let (handoffs, dirty, cancels) = match self.app.drains().get_mut(&self.session) {
            Some(slot) => (
                std::mem::take(&mut slot.handoff),
                slot.dirty,
                std::mem::take(&mut slot.cancels),
            ),
            None => (Vec::new(), false, Vec::new()),
        };
        for handoff in handoffs {
            self.take_claimed(handoff.events, handoff.permits, handoff.reserve);
        }
        let mut moved = false;
        for (index, attempt) in cancels {
            moved |= self.cancelled(index, attempt);
        }
        dirty || moved
    }

    /// Takes over claimed `events`: as many as `permits` allows start, the
    /// rest wait, each holding a place of `reserve`.
    fn take_claimed(
        &mut self,
        mut events: Vec<StoredEvent>,
        permits: Option<OwnedSemaphorePermit>,
        mut reserve: Option<OwnedSemaphorePermit>,
    ) {
        let now = permits
            .as_ref()
            .map_or(0, |p| p.num_permits())
            .min(events.len());
        let later = events.split_off(now);
        if let Some(permits) = permits {
            self.start_claimed(events, permits);
        }
        for event in later {
            let place = reserve.as_mut().and_then(|r| r.split(1));
            self.waiting.push_back((event, place));
        }
        // Places not needed go back.
        drop(reserve);
        self.places_freed();
    }

    /// Starts waiting events with `first` and as many more permits as are
    /// free.
    fn start_waiting(&mut self, first: OwnedSemaphorePermit) {
        let mut permits = first;
        if let Some(more) = take_permits(&self.app.permits, self.waiting.len() - 1) {
            permits.merge(more);
        }
        let n = permits.num_permits().min(self.waiting.len());
        // Each place of the prefetch is given back as its event starts.
        let events: Vec<StoredEvent> = self.waiting.drain(..n).map(|(event, _)| event).collect();
        self.start_claimed(events, permits);
        self.places_freed();
    }

    /// Hands back the leases of the waiting events (shutdown, RL1).
    async fn release_waiting(&mut self) {
        let claims: Vec<Claim> = self
            .waiting
            .drain(..)
            .map(|(e, _)| Claim {
                index: e.event.index,
                attempt: e.attempt_count,
            })
            .collect();
        self.places_freed();
        release_leases(&self.app, &self.session, claims).await;
    }

    /// Forgets a finished attempt; returns whether its outcome may have
    /// made events claimable.
    fn finished(
        &mut self,
        joined: Result<(tokio::task::Id, (Vec<u64>, bool)), tokio::task::JoinError>,
    ) -> bool {
        match joined {
            Ok((_, (indexes, again))) => {
                let highest = indexes.iter().copied().max().unwrap_or(0);
                crate::retention::finished(&self.app, &self.session, indexes.len() as u64, highest);
                for index in indexes {
                    self.running.remove(&index);
                }
                again
            }
            // The attempt task catches handler panics itself; a JoinError
            // means its bookkeeping (an observer, say) panicked after the
            // handler ran. Forget the attempt: its lease runs out and the
            // event is retried.
            Err(error) => {
                tracing::error!(session = %self.session, %error, "attempt task failed");
                let task = error.id();
                self.running.retain(|_, r| r.task != task);
                true
            }
        }
    }

    /// Unless new work was announced since the last claim, removes this
    /// drain's slot (under the same lock an append's `ensure` takes, so no
    /// announcement is lost) and returns true: the drain ends.
    fn finish_if_clean(&self) -> bool {
        let mut drains = self.app.drains();
        if matches!(drains.get(&self.session), Some(slot) if slot.dirty || !slot.handoff.is_empty())
        {
            return false;
        }
        remove_slot(&self.app, &mut drains, &self.session, &self.wake);
        true
    }

    fn clear_dirty(&self) {
        if let Some(slot) = self.app.drains().get_mut(&self.session) {
            slot.dirty = false;
        }
    }

    /// Claims, greedy, with `first` (a slot), every free slot and every
    /// free place of the prefetch, or, light, with `first` (its places)
    /// and half of the other free places; starts an attempt per claimed event
    /// that finds a slot, the others wait in their places. Returns when to
    /// claim next.
    async fn claim(&mut self, first: OwnedSemaphorePermit, greedy: bool) -> Next {
        self.clear_dirty();
        self.light = false;
        let inner: &Shared = &self.app;
        // RT17: no attempt before the cancellations are heard.
        crate::drain::cancel::heard(&self.app).await;
        // Slots and places are each held as one permit; each started
        // attempt splits a slot off, each waiting event a place, and what
        // is left over is returned when it drops (RT13). A light claim
        // (one at a time, `Busy.retry_at` or `next_at`, RT18, C7, or after
        // a light claim came back full) holds no slot while the store
        // answers: drains of other sessions due at the same moment claim
        // meanwhile, their calls sent together (RD7), and what they hand
        // out starts on the slots free when the answer comes (why, in
        // `docs/design.md`).
        let (permits, reserve) = if greedy {
            let mut permits = first;
            if let Some(more) = take_permits(&inner.permits, inner.permits.available_permits()) {
                permits.merge(more);
            }
            let reserve = take_permits(&inner.prefetch, inner.prefetch.available_permits());
            (Some(permits), reserve)
        } else {
            let mut reserve = first;
            if let Some(more) = take_permits(
                &inner.prefetch,
                inner.prefetch.available_permits().div_ceil(2),
            ) {
                reserve.merge(more);
            }
            (None, Some(reserve))
        };
        let limit = permits.as_ref().map_or(0, |p| p.num_permits())
            + reserve.as_ref().map_or(0, |r| r.num_permits());
        let request = ClaimRequest {
            session: self.session.clone(),
            holder: inner.options.holder.clone(),
            lease: Lease::Ttl(millis(inner.options.lease_ttl).max(1)),
            exclude_indexes: self
                .running
                .keys()
                .copied()
                .chain(self.waiting.iter().map(|(e, _)| e.event.index))
                .collect(),
            limit,
        };
        Counters::add(&inner.counters.claim_calls, 1);
        let outcome = inner.store.claim_available(request).await;
        let next = self.claimed(outcome, permits, reserve, limit, greedy);
        // Places this claim did not fill went back.
        self.places_freed();
        next
    }

    /// What a claim's outcome means for the drain: starts what it handed out
    /// and returns when to claim next.
    fn claimed(
        &mut self,
        outcome: Result<ClaimOutcome>,
        permits: Option<OwnedSemaphorePermit>,
        reserve: Option<OwnedSemaphorePermit>,
        limit: usize,
        greedy: bool,
    ) -> Next {
        let inner: &Shared = &self.app;
        match outcome {
            Ok(ClaimOutcome::Claimed { events, next_at }) => {
                let full = events.len() >= limit;
                // A full greedy claim is a backlog: the next claim waits for
                // room to hand out many. A full light claim claims again at
                // once, lightly: the events it left are due now, and a
                // drain that fell behind its due times must not wait
                // behind other drains' claims to catch up (with every full
                // claim counted a backlog, 100 sessions' delayed events
                // started 200–600 ms late at the 99th percentile, 16–65 ms
                // without).
                self.backlog = full && greedy;
                self.light = full && !greedy;
                self.next_at = next_at.map(|at| self.wait_until(at));
                Counters::add(&inner.counters.claimed, events.len() as u64);
                // A light claim's events start on the slots free now.
                let permits = permits.or_else(|| take_permits(&inner.permits, events.len()));
                self.take_claimed(events, permits, reserve);
                if full { Next::Now } else { Next::Idle }
            }
            Ok(ClaimOutcome::Busy { retry_at }) => {
                // RT18: a lease, a retry time or a delayed event's due time
                // (DL3): claim again then, or after a poll interval.
                self.backlog = false;
                self.next_at = None;
                Next::At(self.wait_until(retry_at))
            }
            Ok(ClaimOutcome::Settled) => {
                self.backlog = false;
                self.next_at = None;
                Next::Idle
            }
            Err(error) if error.code() == ErrorCode::Corrupted => {
                // Retrying cannot help (RT11): stop draining this session
                // rather than claim it again and again.
                Counters::add(&inner.counters.store_errors, 1);
                tracing::error!(session = %self.session, %error, "session data is corrupted; not draining it");
                self.app.mark_corrupted(&self.session);
                self.clear_dirty();
                Next::Idle
            }
            Err(error) => {
                Counters::add(&inner.counters.store_errors, 1);
                tracing::warn!(session = %self.session, %error, "claim failed");
                Next::At(Instant::now() + inner.options.poll_interval)
            }
        }
    }

    /// When to claim for an event due at `at` (store clock, RT18): then, or
    /// without push (PS2) after a poll interval if that comes first.
    fn wait_until(&self, at: Millis) -> Instant {
        let inner: &Shared = &self.app;
        let now = inner.store.clock().now_ms();
        let wait = Duration::from_millis(u64::try_from(at - now).unwrap_or(0))
            .max(Duration::from_millis(1));
        let wait = if inner.store.pushes_wakeups() {
            wait
        } else {
            wait.min(inner.options.poll_interval)
        };
        Instant::now() + wait
    }

    /// Starts claimed `events`, one permit each: events of a type with a
    /// batch handler gather into batches of at most its size, in index
    /// order (RT9). Permits left over go back when `permits` drops.
    fn start_claimed(&mut self, events: Vec<StoredEvent>, mut permits: OwnedSemaphorePermit) {
        let mut batches: Vec<(Vec<StoredEvent>, OwnedSemaphorePermit)> = Vec::new();
        for event in events {
            let Some(permit) = permits.split(1) else {
                break;
            };
            let Some(max) = self
                .app
                .batch_handlers
                .get(&event.event.event_type)
                .map(|b| b.max)
            else {
                self.start(vec![event], permit, false);
                continue;
            };
            let open = batches.iter().position(|(batch, _)| {
                batch.len() < max && batch[0].event.event_type == event.event.event_type
            });
            match open {
                Some(i) => {
                    batches[i].0.push(event);
                    batches[i].1.merge(permit);
                }
                None => batches.push((vec![event], permit)),
            }
        }
        for (batch, permit) in batches {
            self.start(batch, permit, true);
        }
    }

    /// Runs `events` (one, or a batch handler's batch) as one task; the
    /// attempts share one [`Stop`], so losing any lease of a batch (or a
    /// cancel of any of its events) stops all of it.
    fn start(&mut self, events: Vec<StoredEvent>, permit: OwnedSemaphorePermit, batch: bool) {
        let stop = Stop::new(&self.app.abort);
        let claims: Vec<Claim> = events
            .iter()
            .map(|e| Claim {
                index: e.event.index,
                attempt: e.attempt_count,
            })
            .collect();
        let indexes: Vec<u64> = claims.iter().map(|c| c.index).collect();
        let app = self.app.clone();
        // The attempt's state machine is large; boxed, the task cell and its
        // stage changes move a pointer instead of copying it around.
        // The attempt gives its permit back when its handler returns (RT14).
        let attempt = Box::pin(run_attempt(app, events, batch, stop.clone(), permit));
        let task = self.tasks.spawn(async move { (indexes, attempt.await) });
        for claim in claims {
            self.running.insert(
                claim.index,
                Running {
                    attempt: claim.attempt,
                    stop: stop.clone(),
                    task: task.id(),
                },
            );
        }
    }
}
