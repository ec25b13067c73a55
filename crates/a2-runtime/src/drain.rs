//! Draining one session: claim, run, complete or fail, renew, release (RT2,
//! RT3, RT6).
//!
//! Each session being drained in a process has one drain task. It claims as
//! many ready events as it has permits of the process-wide concurrency limit,
//! runs each attempt on its own task, renews their leases while they run,
//! and claims again when one finishes, when told new events arrived, or when
//! the store's `Busy{retry_at}` time comes. The store's lane rule decides
//! which events are ready, so lane order holds across processes.

use std::collections::{BTreeMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::{
    AppendClaim, AppendOutcome, Claim, ClaimOutcome, ClaimRequest, CompleteOutcome,
    CompleteRequest, ErrorCode, FailKind, FailRequest, Lease, ReleaseRequest, RenewRequest,
    StoredEvent,
};
use a2_core::{NewEvent, PresencePatch, Result};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::{Context, Host};
use crate::handler::HandlerError;
use crate::ids::{self, Kind};
use crate::retry;
use crate::shared::{DrainSlot, Handoff, Shared};
use crate::stats::{AttemptReport, Counters, Outcome};

/// Appends to a session and drains it when something is pending (RT2):
/// what a handler's context appends.
pub(crate) async fn append(
    app: &Arc<Shared>,
    session: &str,
    events: Vec<NewEvent>,
) -> Result<AppendOutcome> {
    let outcome = app.store.append(session, events).await?;
    if outcome.has_pending {
        ensure(app, session, true);
    }
    Ok(outcome)
}

/// `App::append` (RT13): appends and claims the new events in one step
/// (AC2), as many as the concurrency limit has free permits for, and hands
/// them to the session's drain, which runs them without claiming. Without
/// a free permit (or while stopping) it is a plain append (RT2).
///
/// The claim goes only where the append's reply can be trusted: an append
/// whose reply was lost claimed events that nobody runs until their lease
/// expires (C5). Progress appends, which the runtime itself retries after
/// a lost reply (RT10), therefore stay plain appends.
pub(crate) async fn append_claiming(
    app: &Arc<Shared>,
    session: &str,
    events: Vec<NewEvent>,
) -> Result<AppendOutcome> {
    let pending = events.iter().filter(|e| !e.settled).count();
    if pending == 0 || app.stop.is_cancelled() || app.corrupted().contains(session) {
        return append(app, session, events).await;
    }
    let permits = take_permits(&app.permits, pending);
    let taken = permits.as_ref().map_or(0, |p| p.num_permits());
    let reserve = take_permits(&app.prefetch, pending - taken);
    let limit = taken + reserve.as_ref().map_or(0, |p| p.num_permits());
    if limit == 0 {
        return append(app, session, events).await;
    }
    let claim = AppendClaim::new(
        app.options.holder.clone(),
        Lease::Ttl(millis(app.options.lease_ttl).max(1)),
        limit,
    );
    let outcome = app.store.append_and_claim(session, events, claim).await?;
    let claimed: Vec<StoredEvent> = outcome.claimed_rows().cloned().collect();
    let unclaimed = outcome.events.iter().filter(|r| r.is_pending()).count() > claimed.len();
    if claimed.is_empty() {
        drop((permits, reserve));
        app.room.notify_waiters();
        if outcome.has_pending {
            ensure(app, session, true);
        }
    } else {
        Counters::add(&app.counters.claimed, claimed.len() as u64);
        let handoff = Handoff {
            events: claimed,
            permits,
            reserve,
        };
        start_drain(app, session, unclaimed, Some(handoff));
    }
    Ok(outcome)
}

/// Up to `wanted` permits of `semaphore` that are free now, as one.
fn take_permits(semaphore: &Arc<Semaphore>, wanted: usize) -> Option<OwnedSemaphorePermit> {
    let n = u32::try_from(semaphore.available_permits().min(wanted)).ok()?;
    if n == 0 {
        return None;
    }
    semaphore.clone().try_acquire_many_owned(n).ok()
}

/// What a handler's context may do (RT4), on the shared state alone.
impl Host for Shared {
    fn append(
        self: Arc<Self>,
        session: String,
        events: Vec<NewEvent>,
    ) -> BoxFuture<'static, Result<AppendOutcome>> {
        Box::pin(async move { append(&self, &session, events).await })
    }

    fn state_json(
        self: Arc<Self>,
        session: String,
        reducer: String,
    ) -> BoxFuture<'static, Result<Value>> {
        Box::pin(async move { Shared::state_json(&self, &session, &reducer).await })
    }

    fn set_presence(
        self: Arc<Self>,
        ns: String,
        participant: String,
        values: BTreeMap<String, Option<Value>>,
    ) -> BoxFuture<'static, Result<Option<PresencePatch>>> {
        Box::pin(async move { Shared::set_presence(&self, &ns, &participant, values).await })
    }
}

/// Starts a drain of `session` unless one runs; with `dirty`, a running
/// drain is told to claim again (new events were appended).
pub(crate) fn ensure(app: &Arc<Shared>, session: &str, dirty: bool) {
    start_drain(app, session, dirty, None);
}

/// [`ensure`], handing the drain events an append claimed for it (RT13). A
/// new drain claims first only when `dirty`.
fn start_drain(app: &Arc<Shared>, session: &str, dirty: bool, handoff: Option<Handoff>) {
    if app.stop.is_cancelled() {
        if let Some(handoff) = handoff {
            release_handoffs(app, session, vec![handoff]);
        }
        return;
    }
    let mut drains = app.drains();
    if let Some(slot) = drains.get_mut(session) {
        let handed = handoff.is_some();
        slot.handoff.extend(handoff);
        if dirty {
            slot.dirty = true;
        }
        if dirty || handed {
            slot.wake.notify_one();
        }
        return;
    }
    let wake = Arc::new(Notify::new());
    let fresh = handoff.is_none() || dirty;
    drains.insert(
        session.to_owned(),
        DrainSlot {
            dirty: false,
            wake: Arc::clone(&wake),
            handoff: handoff.into_iter().collect(),
        },
    );
    app.active.send_modify(|n| *n += 1);
    drop(drains);
    let app = app.clone();
    let session = session.to_owned();
    tokio::spawn(async move {
        // Removes the slot however the drain ends, even by a panic, so a
        // later append starts a new one.
        let _guard = SlotGuard {
            app: app.clone(),
            session: session.clone(),
            wake: Arc::clone(&wake),
        };
        let first = if fresh { Next::Now } else { Next::Idle };
        Drain::new(app, session, wake).run(first).await;
    });
}

/// Hands back, in the background, the leases of claimed events no drain
/// will run (shutdown came first), so others take them at once (RL1).
fn release_handoffs(app: &Arc<Shared>, session: &str, handoffs: Vec<Handoff>) {
    let claims: Vec<Claim> = handoffs
        .iter()
        .flat_map(|h| &h.events)
        .map(|e| Claim {
            index: e.event.index,
            attempt: e.attempt_count,
        })
        .collect();
    if claims.is_empty() {
        return;
    }
    let (app, session) = (app.clone(), session.to_owned());
    tokio::spawn(async move { release_leases(&app, &session, claims).await });
}

/// Hands this process's leases on `claims` back at once (RL1), counting
/// what was released or the store error.
async fn release_leases(app: &Shared, session: &str, claims: Vec<Claim>) {
    let request = ReleaseRequest {
        session: session.to_owned(),
        holder: app.options.holder.clone(),
        claims,
    };
    match app.store.release_claims(request).await {
        Ok(released) => Counters::add(&app.counters.released, released.len() as u64),
        Err(error) => {
            Counters::add(&app.counters.store_errors, 1);
            tracing::warn!(%session, %error, "releasing leases failed");
        }
    }
}

struct SlotGuard {
    app: Arc<Shared>,
    session: String,
    wake: Arc<Notify>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut drains = self.app.drains();
        // Events handed over after the drain's last look (it stopped, or
        // panicked) are released rather than left to expire.
        let left = match drains.get_mut(&self.session) {
            Some(slot) if Arc::ptr_eq(&slot.wake, &self.wake) => std::mem::take(&mut slot.handoff),
            _ => Vec::new(),
        };
        remove_slot(&self.app, &mut drains, &self.session, &self.wake);
        drop(drains);
        if !left.is_empty() {
            release_handoffs(&self.app, &self.session, left);
        }
    }
}

/// Removes the slot of the drain owning `wake`, not a newer drain's.
fn remove_slot(
    app: &Arc<Shared>,
    drains: &mut std::collections::HashMap<String, DrainSlot>,
    session: &str,
    wake: &Arc<Notify>,
) {
    if drains
        .get(session)
        .is_some_and(|slot| Arc::ptr_eq(&slot.wake, wake))
    {
        drains.remove(session);
        app.active.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A running attempt, as its drain knows it.
struct Running {
    attempt: u32,
    cancel: CancellationToken,
    task: tokio::task::Id,
}

struct Drain {
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
}

/// The longest a due claim waits for room in the prefetch (RT13): long
/// enough for a busy process to free many places, short against any
/// handler's run.
const HOLD_MAX: Duration = Duration::from_millis(10);

/// When the drain claims next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Right away.
    Now,
    /// At this instant (the store said `Busy`, or the store failed).
    At(Instant),
    /// Only when woken or when an attempt finishes.
    Idle,
}

impl Drain {
    fn new(app: Arc<Shared>, session: String, wake: Arc<Notify>) -> Self {
        Self {
            app,
            session,
            wake,
            tasks: JoinSet::new(),
            running: BTreeMap::new(),
            waiting: VecDeque::new(),
            backlog: false,
        }
    }

    async fn run(mut self, first: Next) {
        let options = self.app.options.clone();
        let mut renew = tokio::time::interval_at(
            tokio::time::Instant::now() + options.renew_interval,
            options.renew_interval.max(Duration::from_millis(1)),
        );
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let stop = self.app.stop.clone();
        let abort = self.app.abort.clone();
        let mut released = false;
        let mut next = first;
        // A claim held back for room (RT13) waited its poll: it goes ahead.
        let mut held = false;
        self.adopt();
        loop {
            if stop.is_cancelled() {
                next = Next::Idle;
                if !self.waiting.is_empty() {
                    // Never started: handed back at once (RT6, RL1).
                    self.release_waiting().await;
                }
                if self.tasks.is_empty() {
                    return;
                }
            } else if next == Next::Idle
                && self.tasks.is_empty()
                && self.waiting.is_empty()
                && self.finish_if_clean()
            {
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
            // RT13: while most places of the prefetch are taken, a due
            // claim waits until enough come back, so that it hands out many
            // events rather than one per freed permit. The future exists
            // before the check, so no return of places is missed.
            let shared = self.app.clone();
            let room_changed = shared.room.notified();
            tokio::pin!(room_changed);
            let room = self.has_room() || held;
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
                    let mut again = self.finished(joined);
                    // Collect every other attempt that finished meanwhile, so
                    // a burst of completions costs one claim, not one each.
                    while let Some(joined) = self.tasks.try_join_next_with_id() {
                        again |= self.finished(joined);
                    }
                    // RT13: claim only when something may have become
                    // claimable; a plain completion frees nothing.
                    if !stop.is_cancelled() && (again || self.backlog) {
                        next = Next::Now;
                    }
                }
                _ = renew.tick(), if self.holds_leases() => self.renew().await,
                _ = self.wake.notified() => {
                    if self.adopt() && !stop.is_cancelled() {
                        next = Next::Now;
                    }
                }
                _ = stop.cancelled(), if next != Next::Idle => {}
                _ = &mut room_changed, if due && !room && self.waiting.is_empty() => {}
                // However the places come back, a claim is held back briefly.
                _ = tokio::time::sleep(HOLD_MAX),
                    if due && !room && self.waiting.is_empty() =>
                {
                    held = true;
                }
                permit = self.app.permits.clone().acquire_owned(),
                    if (due && room) || (!self.waiting.is_empty() && !stop.is_cancelled()) =>
                {
                    // The semaphore is never closed.
                    let Ok(permit) = permit else { continue };
                    if self.waiting.is_empty() {
                        held = false;
                        next = self.claim(permit).await;
                    } else {
                        self.start_waiting(permit);
                    }
                }
                _ = sleep_until(claim_at), if claim_at.is_some() && !due => {}
            }
        }
    }

    /// Whether at least half the places of the prefetch are free: a claim
    /// can then hand out many events (RT13).
    fn has_room(&self) -> bool {
        self.app.prefetch.available_permits() * 2 >= self.app.options.concurrency
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

    /// Starts the events appends handed over (RT13); returns whether the
    /// drain was also told to claim (`dirty`).
    fn adopt(&mut self) -> bool {
        let (handoffs, dirty) = match self.app.drains().get_mut(&self.session) {
            Some(slot) => (std::mem::take(&mut slot.handoff), slot.dirty),
            None => (Vec::new(), false),
        };
        for handoff in handoffs {
            self.take_claimed(handoff.events, handoff.permits, handoff.reserve);
        }
        dirty
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

    /// Claims with `first` and as many more permits as are free; starts an
    /// attempt per claimed event. Returns when to claim next.
    async fn claim(&mut self, first: OwnedSemaphorePermit) -> Next {
        self.clear_dirty();
        let inner: &Shared = &self.app;
        // `first` and every free permit, held as one; each started attempt
        // splits one off, and what is left over is returned when it drops.
        let mut permits = first;
        let free = inner.permits.available_permits();
        if let Some(more) = u32::try_from(free)
            .ok()
            .filter(|&n| n > 0)
            .and_then(|n| inner.permits.clone().try_acquire_many_owned(n).ok())
        {
            permits.merge(more);
        }
        // Places of the prefetch: events past the permits wait in this
        // drain, so that a claim hands out many events, not one per freed
        // permit (RT13).
        let reserve = take_permits(&inner.prefetch, usize::MAX);
        let limit = permits.num_permits() + reserve.as_ref().map_or(0, |r| r.num_permits());
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
        let outcome = inner.store.claim_available(request).await;
        let next = self.claimed(outcome, permits, reserve, limit);
        // Places this claim did not fill went back.
        self.places_freed();
        next
    }

    /// What a claim's outcome means for the drain: starts what it handed out
    /// and returns when to claim next.
    fn claimed(
        &mut self,
        outcome: Result<ClaimOutcome>,
        permits: OwnedSemaphorePermit,
        reserve: Option<OwnedSemaphorePermit>,
        limit: usize,
    ) -> Next {
        let inner: &Shared = &self.app;
        match outcome {
            Ok(ClaimOutcome::Claimed(events)) => {
                let full = events.len() >= limit;
                self.backlog = full;
                Counters::add(&inner.counters.claimed, events.len() as u64);
                self.take_claimed(events, Some(permits), reserve);
                if full { Next::Now } else { Next::Idle }
            }
            Ok(ClaimOutcome::Busy { retry_at }) => {
                self.backlog = false;
                let now = inner.store.clock().now_ms();
                let wait = Duration::from_millis(u64::try_from(retry_at - now).unwrap_or(0))
                    .clamp(Duration::from_millis(1), inner.options.poll_interval);
                Next::At(Instant::now() + wait)
            }
            Ok(ClaimOutcome::Settled) => {
                self.backlog = false;
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
    /// attempts share one cancellation token, so losing any lease of a
    /// batch cancels all of it.
    fn start(&mut self, events: Vec<StoredEvent>, permit: OwnedSemaphorePermit, batch: bool) {
        let cancel = self.app.abort.child_token();
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
        let attempt = Box::pin(run_attempt(app, events, batch, cancel.clone(), permit));
        let task = self.tasks.spawn(async move { (indexes, attempt.await) });
        for claim in claims {
            self.running.insert(
                claim.index,
                Running {
                    attempt: claim.attempt,
                    cancel: cancel.clone(),
                    task: task.id(),
                },
            );
        }
    }

    /// The leases this drain holds: running attempts and waiting events,
    /// ascending by index.
    fn claims(&self) -> Vec<Claim> {
        let mut claims: Vec<Claim> = self
            .running
            .iter()
            .map(|(&index, r)| Claim {
                index,
                attempt: r.attempt,
            })
            .chain(self.waiting.iter().map(|(e, _)| Claim {
                index: e.event.index,
                attempt: e.attempt_count,
            }))
            .collect();
        claims.sort_by_key(|c| c.index);
        claims
    }

    /// Renews every running lease; cancels the attempts whose lease is gone.
    async fn renew(&mut self) {
        let inner: &Shared = &self.app;
        let claims = self.claims();
        let request = RenewRequest {
            session: self.session.clone(),
            holder: inner.options.holder.clone(),
            claims: claims.clone(),
            lease: Lease::Ttl(millis(inner.options.lease_ttl).max(1)),
        };
        match inner.store.renew_claims(request).await {
            Ok(outcome) => {
                for claim in claims {
                    if outcome.renewed.binary_search(&claim.index).is_err() {
                        // Superseded, expired, or already finished: in every
                        // case this attempt may no longer write its result.
                        if let Some(r) = self.running.get(&claim.index) {
                            r.cancel.cancel();
                        }
                    }
                }
                // A waiting event whose lease is gone is no longer ours to run.
                self.waiting
                    .retain(|(e, _)| outcome.renewed.binary_search(&e.event.index).is_ok());
                self.places_freed();
            }
            Err(error) => {
                Counters::add(&inner.counters.store_errors, 1);
                tracing::warn!(session = %self.session, %error, "lease renewal failed");
            }
        }
    }

    /// Shutdown past its deadline: the attempts are cancelled (their tokens
    /// are children of `abort`); hand their leases back at once (RL1).
    async fn release(&mut self) {
        let claims = self.claims();
        self.waiting.clear();
        self.places_freed();
        release_leases(&self.app, &self.session, claims).await;
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => futures::future::pending().await,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One attempt: run the handler (panics caught, cancellable), then record
/// the outcome with `complete_attempt` or `fail_attempt` (RT3), in a span
/// carrying session, index, attempt, type and outcome (RT7).
async fn run_attempt(
    app: Arc<Shared>,
    events: Vec<StoredEvent>,
    batch: bool,
    cancel: CancellationToken,
    permit: OwnedSemaphorePermit,
) -> bool {
    let Some(event) = events.last() else {
        return false;
    };
    // A lane moves on when its head completes (CO2).
    let laned = events.iter().any(|e| e.lane.is_some());
    let span = tracing::info_span!(
        "a2.attempt",
        session = %event.event.session_id,
        index = event.event.index,
        attempt = event.attempt_count,
        r#type = %event.event.event_type,
        batch = events.len(),
        outcome = tracing::field::Empty,
    );
    // The report's strings are copied only when someone reads the report.
    let report = app.observer.as_ref().map(|_| {
        (
            AttemptReport {
                session: event.event.session_id.clone(),
                index: event.event.index,
                attempt: event.attempt_count,
                event_type: event.event.event_type.clone(),
                outcome: Outcome::Lost,
                elapsed: Duration::ZERO,
            },
            Instant::now(),
        )
    });
    let outcome = attempt(&app, events, batch, cancel, permit)
        .instrument(span.clone())
        .await;
    span.record("outcome", outcome.name());
    let _entered = span.enter();
    match &outcome {
        Outcome::Failed { error, .. } => tracing::info!(%error, "attempt failed"),
        Outcome::DeadLettered { error, .. } => tracing::warn!(%error, "event dead-lettered"),
        Outcome::StoreError { error } => tracing::warn!(%error, "outcome not recorded"),
        other => tracing::debug!(outcome = other.name(), "attempt finished"),
    }
    // RT13: a plain completion frees nothing; anything else may have.
    let again = laned || !matches!(outcome, Outcome::Completed { returned: 0 });
    if let (Some(observer), Some((report, started))) = (&app.observer, report) {
        observer(&AttemptReport {
            outcome,
            elapsed: started.elapsed(),
            ..report
        });
    }
    again
}

/// Runs the handler for `events` (one event, or a batch handler's batch,
/// non-empty, in index order) under `permit`, and records the outcome:
/// completion (the last event with the returned events, the others with
/// none, RT9) or a failure of every attempt. The permit goes back as soon
/// as the handler has returned, for a place of `recording` (RT14).
async fn attempt(
    app: &Arc<Shared>,
    events: Vec<StoredEvent>,
    batch: bool,
    cancel: CancellationToken,
    permit: OwnedSemaphorePermit,
) -> Outcome {
    let inner: &Shared = app;
    let counters = &inner.counters;
    let Some(last) = events.last() else {
        return Outcome::Superseded;
    };
    let session = last.event.session_id.clone();
    let index = last.event.index;
    let attempt = last.attempt_count;
    let event_type = last.event.event_type.clone();
    // (index, attempt, failures so far) of every attempt of the call.
    let attempts: Vec<(u64, u32, u32)> = events
        .iter()
        .map(|e| (e.event.index, e.attempt_count, e.failure_count))
        .collect();
    let batch_size = batch.then(|| u32::try_from(events.len()).unwrap_or(u32::MAX));
    let handler = if batch {
        inner
            .batch_handlers
            .get(&event_type)
            .map(|b| b.handler.clone())
    } else {
        inner
            .handlers
            .get(&event_type)
            .or(inner.fallback.as_ref())
            .cloned()
    };
    let result = match handler {
        None => Ok(Vec::new()),
        Some(handler) => {
            let ctx = if batch {
                let last = last.clone();
                Context::for_batch(app.clone(), last, events, cancel.clone())
            } else {
                let mut events = events;
                let Some(event) = events.pop() else {
                    return Outcome::Superseded;
                };
                Context::new(app.clone(), event, cancel.clone())
            };
            let run = AssertUnwindSafe(async move { handler(ctx).await }).catch_unwind();
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    return if inner.abort.is_cancelled() {
                        Outcome::Released
                    } else {
                        Counters::add(&counters.lost, 1);
                        Outcome::Lost
                    };
                }
                result = run => result.unwrap_or_else(|panic| {
                    Err(HandlerError::new(format!("handler panicked: {}", panic_message(&panic))))
                }),
            }
        }
    };
    // RT14: the handler is done; recording its outcome takes a place of
    // its own, so the next handler can start while the store answers.
    // Taken before the permit goes back, so a slow store holds handlers
    // back rather than letting outcomes pile up.
    let _recording = app.recording.clone().acquire_owned().await;
    drop(permit);
    let error = match result {
        Ok(mut returned) => {
            let count = returned.len();
            // Fixed ids make a retried completion a replay (RT10, CO3).
            ids::fill(&mut returned, &session, index, attempt, Kind::Returned, 0);
            let request = CompleteRequest {
                session: session.clone(),
                index,
                attempt,
                events: returned,
                batch_size,
            };
            let completed =
                retry::when_unavailable(|| inner.store.complete_attempt(request.clone())).await;
            match completed {
                Ok(CompleteOutcome::Completed { .. }) => {
                    // The rest of a batch: completed with nothing returned.
                    let earlier = &attempts[..attempts.len() - 1];
                    for &(index, attempt, _) in earlier {
                        let request = CompleteRequest {
                            session: session.clone(),
                            index,
                            attempt,
                            events: Vec::new(),
                            batch_size,
                        };
                        match retry::when_unavailable(|| {
                            inner.store.complete_attempt(request.clone())
                        })
                        .await
                        {
                            Ok(CompleteOutcome::Completed { .. }) => {
                                Counters::add(&counters.completed, 1);
                            }
                            Ok(CompleteOutcome::Superseded) => {
                                Counters::add(&counters.superseded, 1);
                            }
                            Err(error) => {
                                Counters::add(&counters.store_errors, 1);
                                tracing::warn!(index, %error, "completing an event of the batch failed");
                            }
                        }
                    }
                    Counters::add(&counters.completed, 1);
                    return Outcome::Completed { returned: count };
                }
                Ok(CompleteOutcome::Superseded) => {
                    Counters::add(&counters.superseded, 1);
                    return Outcome::Superseded;
                }
                // Returned events the store refuses (a duplicate id, a
                // `cause` set, a limit) will never complete: fail the attempt
                // so that it is retried and finally dead-lettered.
                Err(e)
                    if matches!(
                        e.code(),
                        ErrorCode::InvalidArgument | ErrorCode::PartialDuplicateBatch
                    ) =>
                {
                    format!("returned events refused: {e}")
                }
                Err(e) => {
                    Counters::add(&counters.store_errors, 1);
                    return Outcome::StoreError {
                        error: e.to_string(),
                    };
                }
            }
        }
        Err(error) => error.message().to_owned(),
    };
    // Every attempt of the call failed; the last one's outcome is reported.
    let mut outcome = Outcome::Superseded;
    for &(index, attempt, failures_before) in &attempts {
        outcome = fail(app, &session, index, attempt, failures_before, &error).await;
    }
    outcome
}

/// Records a failed attempt with its backoff (F6, RT3).
async fn fail(
    app: &Arc<Shared>,
    session: &str,
    index: u64,
    attempt: u32,
    failures_before: u32,
    error: &str,
) -> Outcome {
    let inner: &Shared = app;
    let counters = &inner.counters;
    let failure = failures_before.saturating_add(1);
    let delay = inner.options.backoff.delay(failure);
    let retry_at = inner
        .store
        .clock()
        .now_ms()
        .saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
    let request = FailRequest {
        session: session.to_owned(),
        index,
        attempt,
        error: error.to_owned(),
        max_failures: inner.options.max_failures.max(1),
        retry_at: (!delay.is_zero()).then_some(retry_at),
    };
    match inner.store.fail_attempt(request).await {
        Ok(outcome) => match outcome.outcome {
            FailKind::Failed => {
                Counters::add(&counters.failed, 1);
                Outcome::Failed {
                    error: error.to_owned(),
                    retry_at,
                    failures: outcome.failure_count,
                }
            }
            FailKind::DeadLettered => {
                Counters::add(&counters.dead_lettered, 1);
                Outcome::DeadLettered {
                    error: error.to_owned(),
                    failures: outcome.failure_count,
                }
            }
            FailKind::Superseded => {
                Counters::add(&counters.superseded, 1);
                Outcome::Superseded
            }
        },
        Err(e) => {
            Counters::add(&counters.store_errors, 1);
            Outcome::StoreError {
                error: e.to_string(),
            }
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
