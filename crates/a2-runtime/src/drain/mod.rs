//! Draining one session: claim, run, complete or fail, renew, release (RT2,
//! RT3, RT6).
//!
//! Each session being drained in a process has one drain task. It claims as
//! many ready events as it has permits of the process-wide concurrency limit,
//! runs each attempt on its own task, renews their leases while they run,
//! and claims again when one finishes, when told new events arrived, or when
//! the store's `Busy{retry_at}` time comes. The store's lane rule decides
//! which events are ready, so lane order holds across processes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::{
    AppendClaim, AppendOptions, AppendOutcome, Claim, Lease, ReleaseRequest, StoredEvent,
};
use a2_core::{NewEvent, PresencePatch, Result};
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

mod attempt;
pub(crate) mod cancel;
mod session;

use attempt::run_attempt;
use session::{Drain, Next};

use crate::context::Host;
use crate::shared::{DrainSlot, Handoff, Shared};
use crate::stats::Counters;

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
    options: AppendOptions,
) -> Result<AppendOutcome> {
    // Options of its own (an expiry, an expected frontier) go with the
    // append in the same store call (EX2, A13).
    let plain = |app: &Arc<Shared>, events: Vec<NewEvent>, options: AppendOptions| {
        let app = app.clone();
        let session = session.to_owned();
        async move {
            if options == AppendOptions::default() {
                return append(&app, &session, events).await;
            }
            let outcome = app.store.append_with(&session, events, options).await?;
            if outcome.has_pending {
                ensure(&app, &session, true);
            }
            Ok(outcome)
        }
    };
    let pending = events.iter().filter(|e| !e.settled).count();
    if pending == 0 || app.stop.is_cancelled() || app.corrupted().contains(session) {
        return plain(app, events, options).await;
    }
    let permits = take_permits(&app.permits, pending);
    let taken = permits.as_ref().map_or(0, |p| p.num_permits());
    let reserve = take_permits(&app.prefetch, pending - taken);
    let limit = taken + reserve.as_ref().map_or(0, |p| p.num_permits());
    if limit == 0 {
        return plain(app, events, options).await;
    }
    // RT17: no attempt before the cancellations are heard.
    cancel::heard(app).await;
    let claim = AppendClaim::new(
        app.options.holder.clone(),
        Lease::Ttl(millis(app.options.lease_ttl).max(1)),
        limit,
    );
    let outcome = if options == AppendOptions::default() {
        app.store.append_and_claim(session, events, claim).await?
    } else {
        let options = options.claim(claim);
        app.store.append_with(session, events, options).await?
    };
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

impl crate::App {
    /// Appends events to a session and, when some are pending, drains the
    /// session in this process in the background (RT2). The append claims
    /// its own events for this process (as many as the concurrency limit
    /// has room for) in the same store call, so they start without a
    /// claim round trip (RT13, AC2).
    pub async fn append(&self, session: &str, events: Vec<NewEvent>) -> Result<AppendOutcome> {
        append_claiming(&self.inner, session, events, AppendOptions::default()).await
    }

    /// Appends as [`App::append`](crate::App::append) does, with the options in the same atomic
    /// step: the session's expiry (EX2) and the frontier the append
    /// expects (A13: `FrontierMoved`, nothing written, when another write
    /// came first). A claim in `options` is replaced by the app's own.
    ///
    /// ```
    /// use a2_core::{AppendOptions, ErrorCode, MemoryStore, NewEvent, StoreOptions};
    /// use a2_runtime::App;
    /// use serde_json::json;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), a2_core::Error> {
    /// let app = App::builder(MemoryStore::new(StoreOptions::default())).build()?;
    /// let note = || NewEvent::new("note", json!({ "text": "hi" })).settled();
    /// // Only if the session has no events yet:
    /// app.append_with("s", vec![note()], AppendOptions::new().if_frontier(0)).await?;
    /// let again = app.append_with("s", vec![note()], AppendOptions::new().if_frontier(0)).await;
    /// assert_eq!(again.unwrap_err().code(), ErrorCode::FrontierMoved);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn append_with(
        &self,
        session: &str,
        events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendOutcome> {
        let mut options = options;
        options.claim = None;
        append_claiming(&self.inner, session, events, options).await
    }
}

/// Up to `wanted` permits of `semaphore` that are free now, as one.
fn take_permits(semaphore: &Arc<Semaphore>, wanted: usize) -> Option<OwnedSemaphorePermit> {
    let n = u32::try_from(semaphore.available_permits().min(wanted)).ok()?;
    if n == 0 {
        return None;
    }
    semaphore.clone().try_acquire_many_owned(n).ok()
}

/// The places of the prefetch a light claim waits for (RT13): an eighth,
/// at least one. With one, drains that came due together held a place
/// apiece and claimed their due events one at a time however far behind
/// they fell (`docs/design.md`).
fn light_places(app: &Shared) -> u32 {
    u32::try_from((app.prefetch_size / 8).max(1)).unwrap_or(1)
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
            cancels: Vec::new(),
        },
    );
    app.active.send_modify(|n| *n += 1);
    drop(drains);
    cancel::listen(app);
    let app = app.clone();
    let session = session.to_owned();
    // Boxed: the drain's state machine is over a kilobyte, which the task's
    // creation would otherwise copy from frame to frame.
    tokio::spawn(Box::pin(async move {
        // Removes the slot however the drain ends, even by a panic, so a
        // later append starts a new one.
        let _guard = SlotGuard {
            app: app.clone(),
            session: session.clone(),
            wake: Arc::clone(&wake),
        };
        let first = if fresh { Next::Now } else { Next::Idle };
        Drain::new(app, session, wake).run(first).await;
    }));
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
    drains: &mut foldhash::HashMap<String, DrainSlot>,
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

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => futures::future::pending().await,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
