//! The runtime's rules of SPEC §9 that need a store with faults, a gate or
//! a tight limit, one module per subject: store faults (RT10, RT11), batch
//! handlers (RT9), options and serialization (RT8, RT12), retention's
//! store calls (RT16) and slots (RT6, RT13, RT14). Stores with faults are the memory store behind a
//! wrapper that injects them; this file holds it and what the modules
//! share.

mod batches;
mod faults;
mod options;
mod retention;
mod slots;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2_core::*;
use a2_runtime::{AppBuilder, Context, HandlerError, event};
use async_trait::async_trait;
use serde_json::{Value, json};

#[path = "../common/mod.rs"]
mod common;

use common::{T0, all, builder, within};

/// Faults to inject, each counted down as it is used.
#[derive(Default)]
struct Faults {
    /// Claims fail with `Corrupted` (and are counted in `claims`).
    corrupted_claims: bool,
    /// This many completions apply, then report `StoreUnavailable` (a lost
    /// acknowledgement).
    lost_completions: AtomicU32,
    /// This many appends of caused events apply, then report
    /// `StoreUnavailable`.
    lost_progress: AtomicU32,
    claims: AtomicU32,
    /// Lease renewals asked of the store.
    renews: AtomicU32,
    /// When set, each completion waits for a permit of it (taken for
    /// good) before it applies, counted in `held` while it waits.
    completion_gate: Option<Arc<tokio::sync::Semaphore>>,
    held: AtomicU32,
    /// When set, each claim waits for a permit of it (taken for good)
    /// before it applies, counted in `claiming` while it waits.
    claim_gate: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
    claiming: AtomicU32,
    /// Trims asked of the store.
    trims: AtomicU32,
    /// Sessions a claim has answered for.
    answered: Mutex<std::collections::BTreeSet<String>>,
}

struct Faulty {
    inner: MemoryStore,
    faults: Arc<Faults>,
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

fn lost_ack() -> Error {
    Error::unavailable("connection reset after the write (injected)")
}

#[async_trait]
impl Store for Faulty {
    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock()
    }
    async fn append(&self, session: &str, events: Vec<NewEvent>) -> Result<AppendOutcome> {
        let caused = events.iter().any(|e| e.cause.is_some());
        let outcome = self.inner.append(session, events).await?;
        if caused && take(&self.faults.lost_progress) {
            return Err(lost_ack());
        }
        Ok(outcome)
    }
    async fn append_and_claim(
        &self,
        session: &str,
        events: Vec<NewEvent>,
        claim: AppendClaim,
    ) -> Result<AppendOutcome> {
        let caused = events.iter().any(|e| e.cause.is_some());
        let outcome = self.inner.append_and_claim(session, events, claim).await?;
        if caused && take(&self.faults.lost_progress) {
            return Err(lost_ack());
        }
        Ok(outcome)
    }
    async fn read(&self, session: &str, range: ReadRange) -> Result<Vec<StoredEvent>> {
        self.inner.read(session, range).await
    }
    async fn read_history(&self, session: &str, options: HistoryOptions) -> Result<HistoryPage> {
        self.inner.read_history(session, options).await
    }
    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimOutcome> {
        self.faults.claims.fetch_add(1, Ordering::SeqCst);
        let gate = self.faults.claim_gate.lock().unwrap().clone();
        if let Some(gate) = gate {
            self.faults.claiming.fetch_add(1, Ordering::SeqCst);
            gate.acquire().await.expect("the gate stays open").forget();
            self.faults.claiming.fetch_sub(1, Ordering::SeqCst);
        }
        if self.faults.corrupted_claims {
            return Err(Error::corrupted(
                "entry 2 is missing (injected)",
                Some(&request.session),
                Some(2),
            ));
        }
        let session = request.session.clone();
        let outcome = self.inner.claim_available(request).await;
        self.faults.answered.lock().unwrap().insert(session);
        outcome
    }
    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewOutcome> {
        self.faults.renews.fetch_add(1, Ordering::SeqCst);
        self.inner.renew_claims(request).await
    }
    async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteOutcome> {
        if let Some(gate) = &self.faults.completion_gate {
            self.faults.held.fetch_add(1, Ordering::SeqCst);
            gate.acquire().await.expect("the gate stays open").forget();
            self.faults.held.fetch_sub(1, Ordering::SeqCst);
        }
        let outcome = self.inner.complete_attempt(request).await?;
        if take(&self.faults.lost_completions) {
            return Err(lost_ack());
        }
        Ok(outcome)
    }
    async fn fail_attempt(&self, request: FailRequest) -> Result<FailOutcome> {
        self.inner.fail_attempt(request).await
    }
    async fn release_claims(&self, request: ReleaseRequest) -> Result<Vec<u64>> {
        self.inner.release_claims(request).await
    }
    async fn pending_sessions(&self, page: PageRequest) -> Result<SessionPage> {
        self.inner.pending_sessions(page).await
    }
    async fn cancel_apply(&self, request: CancelRequest<'_>) -> Result<CancelOutcome> {
        self.inner.cancel_apply(request).await
    }
    async fn cancellations(&self) -> Result<a2_core::CancelStream> {
        self.inner.cancellations().await
    }
    async fn revive(&self, session: &str, index: u64) -> Result<ReviveOutcome> {
        self.inner.revive(session, index).await
    }
    async fn read_state(&self, session: &str, reducer: &str) -> Result<StateRead> {
        self.inner.read_state(session, reducer).await
    }
    async fn put_snapshots(&self, session: &str, snapshots: Vec<SnapshotWrite>) -> Result<()> {
        self.inner.put_snapshots(session, snapshots).await
    }
    async fn presence_apply(&self, write: PresenceRequest<'_>) -> Result<Option<PresencePatch>> {
        self.inner.presence_apply(write).await
    }
    async fn presence_read(&self, ns: &str) -> Result<Vec<PresenceEntry>> {
        self.inner.presence_read(ns).await
    }
    async fn presence_subscribe(&self, ns: &str) -> Result<PresenceStream> {
        self.inner.presence_subscribe(ns).await
    }
    fn stream(&self, session: &str, after_index: u64) -> EventStream {
        self.inner.stream(session, after_index)
    }
    async fn list_sessions(&self, options: ListSessionsOptions) -> Result<SessionList> {
        self.inner.list_sessions(options).await
    }
    async fn read_events(&self, session: &str, options: ReadEventsOptions) -> Result<EventsPage> {
        self.inner.read_events(session, options).await
    }
    async fn list_snapshots(&self, session: &str) -> Result<Vec<SnapshotInfo>> {
        self.inner.list_snapshots(session).await
    }
    async fn append_apply(&self, request: AppendRequest<'_>) -> Result<AppendOutcome> {
        self.inner.append_apply(request).await
    }
    async fn set_expiry(&self, session: &str, expiry: Expiry) -> Result<ExpiryOutcome> {
        self.inner.set_expiry(session, expiry).await
    }
    async fn close_session(&self, session: &str) -> Result<CloseOutcome> {
        self.inner.close_session(session).await
    }
    async fn trim(&self, session: &str, through_index: u64) -> Result<TrimOutcome> {
        self.faults.trims.fetch_add(1, Ordering::SeqCst);
        self.inner.trim(session, through_index).await
    }
    async fn fork(&self, source: &str, at_index: u64, target: &str) -> Result<ForkOutcome> {
        self.inner.fork(source, at_index, target).await
    }
    async fn clear(&self, session: &str) -> Result<()> {
        self.inner.clear(session).await
    }
    async fn close(&self) {
        self.inner.close().await
    }
}

fn faulty(faults: Faults) -> (Arc<dyn Store>, Arc<Faults>) {
    let (store, faults, _) = faulty_with_clock(faults);
    (store, faults)
}

/// [`faulty`], with the store's clock.
fn faulty_with_clock(faults: Faults) -> (Arc<dyn Store>, Arc<Faults>, Arc<ManualClock>) {
    let faults = Arc::new(faults);
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(Faulty {
        inner: MemoryStore::new(StoreOptions::default().with_clock(clock.clone())),
        faults: faults.clone(),
    });
    (store, faults, clock)
}

fn memory() -> Arc<dyn Store> {
    let clock = Arc::new(ManualClock::new(T0));
    Arc::new(MemoryStore::new(StoreOptions::default().with_clock(clock)))
}
