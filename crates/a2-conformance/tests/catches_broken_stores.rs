//! The suite must be able to fail: each test here wraps the memory store in a
//! store with one deliberate flaw and requires the property test (or a case)
//! to catch it.

use std::sync::Arc;

use a2_conformance::{Stores, cases, property, run_case};
use a2_core::*;
use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;

/// One deliberate deviation from the contract.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Flaw {
    /// Claims at most two events whatever the limit (C2).
    ClaimLimitCappedAtTwo,
    /// Claims excluded indexes too (C2).
    IgnoresExclusions,
    /// Dead-letters one failure late when `max_failures` is 3 (F6).
    MaxFailuresOffByOne,
    /// Ignores `retry_at` (F6, C3).
    IgnoresRetryAt,
    /// Never releases anything (RL1).
    ReleasesNothing,
    /// Drops the lane of appended events (A9).
    DropsLanes,
    /// Reports `has_pending` inverted on appends (A10).
    InvertsHasPending,
    /// Returns from `presence_subscribe` before subscribing: the stream
    /// subscribes when first polled (P4).
    SubscribesOnFirstPoll,
    /// Reports every revive as `Revived`, dead letter or not (RV3).
    ReportsEveryReviveRevived,
    /// Forks one event short of the index asked for (FK1).
    ForksOneShort,
}

#[derive(Debug)]
struct Flawed {
    inner: MemoryStore,
    flaw: Flaw,
}

#[async_trait]
impl Store for Flawed {
    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock()
    }
    async fn append(&self, session: &str, mut events: Vec<NewEvent>) -> Result<AppendOutcome> {
        if self.flaw == Flaw::DropsLanes {
            events.iter_mut().for_each(|e| e.lane = None);
        }
        let mut out = self.inner.append(session, events).await?;
        if self.flaw == Flaw::InvertsHasPending {
            out.has_pending = !out.has_pending;
        }
        Ok(out)
    }
    async fn append_and_claim(
        &self,
        session: &str,
        mut events: Vec<NewEvent>,
        claim: AppendClaim,
    ) -> Result<AppendOutcome> {
        if self.flaw == Flaw::DropsLanes {
            events.iter_mut().for_each(|e| e.lane = None);
        }
        self.inner.append_and_claim(session, events, claim).await
    }
    async fn read(&self, session: &str, range: ReadRange) -> Result<Vec<StoredEvent>> {
        self.inner.read(session, range).await
    }
    async fn read_history(&self, session: &str, options: HistoryOptions) -> Result<HistoryPage> {
        self.inner.read_history(session, options).await
    }
    async fn claim_available(&self, mut request: ClaimRequest) -> Result<ClaimOutcome> {
        if self.flaw == Flaw::ClaimLimitCappedAtTwo {
            request.limit = request.limit.min(2);
        }
        if self.flaw == Flaw::IgnoresExclusions {
            request.exclude_indexes.clear();
        }
        self.inner.claim_available(request).await
    }
    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewOutcome> {
        self.inner.renew_claims(request).await
    }
    async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteOutcome> {
        self.inner.complete_attempt(request).await
    }
    async fn fail_attempt(&self, mut request: FailRequest) -> Result<FailOutcome> {
        if self.flaw == Flaw::MaxFailuresOffByOne && request.max_failures == 3 {
            request.max_failures = 4;
        }
        if self.flaw == Flaw::IgnoresRetryAt {
            request.retry_at = None;
        }
        self.inner.fail_attempt(request).await
    }
    async fn release_claims(&self, request: ReleaseRequest) -> Result<Vec<u64>> {
        if self.flaw == Flaw::ReleasesNothing {
            return Ok(Vec::new());
        }
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
        let outcome = self.inner.revive(session, index).await?;
        Ok(match outcome {
            ReviveOutcome::NotDeadLettered(row) if self.flaw == Flaw::ReportsEveryReviveRevived => {
                ReviveOutcome::Revived(row)
            }
            other => other,
        })
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
        if self.flaw == Flaw::SubscribesOnFirstPoll {
            let inner = self.inner.clone();
            let ns = ns.to_owned();
            let subscribing = async move { inner.presence_subscribe(&ns).await };
            return Ok(futures::stream::once(subscribing)
                .flat_map(|subscribed| match subscribed {
                    Ok(subscriber) => subscriber,
                    Err(err) => futures::stream::once(async move { Err(err) }).boxed(),
                })
                .boxed());
        }
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
        self.inner.trim(session, through_index).await
    }
    async fn fork(&self, source: &str, at_index: u64, target: &str) -> Result<ForkOutcome> {
        let at = match self.flaw {
            Flaw::ForksOneShort if at_index > 1 => at_index - 1,
            _ => at_index,
        };
        self.inner.fork(source, at, target).await
    }
    async fn clear(&self, session: &str) -> Result<()> {
        self.inner.clear(session).await
    }
    async fn close(&self) {
        self.inner.close().await
    }
}

fn flawed(options: StoreOptions, flaw: Flaw) -> Stores {
    let store: Arc<dyn Store> = Arc::new(Flawed {
        inner: MemoryStore::new(options),
        flaw,
    });
    Stores::new(store.clone(), store)
}

macro_rules! caught {
    ($test:ident, $flaw:ident, $expected:literal) => {
        #[test]
        #[should_panic(expected = $expected)]
        fn $test() {
            fn setup(options: StoreOptions) -> BoxFuture<'static, Stores> {
                Box::pin(async move { flawed(options, Flaw::$flaw) })
            }
            property::property_test(setup, property::DEFAULT_CASES);
        }
    };
}

caught!(
    property_catches_a_capped_claim_limit,
    ClaimLimitCappedAtTwo,
    "C2"
);
caught!(
    property_catches_max_failures_off_by_one,
    MaxFailuresOffByOne,
    "F6"
);
// The exclusion rule is C2's ("every ready event that is not excluded")
// and C4's (nothing claimable when all that is pending "is excluded"): the
// shrunk sequence claims the one pending event, which the claim excluded,
// where C4 says `Settled`.
caught!(property_catches_ignored_exclusions, IgnoresExclusions, "C2");
caught!(property_catches_an_ignored_retry_time, IgnoresRetryAt, "F6");
caught!(
    property_catches_a_release_that_does_nothing,
    ReleasesNothing,
    "RL1"
);
caught!(property_catches_dropped_lanes, DropsLanes, "A9");
caught!(
    property_catches_a_revive_reported_for_a_live_event,
    ReportsEveryReviveRevived,
    "RV3"
);
caught!(
    property_catches_a_wrong_has_pending,
    InvertsHasPending,
    "A10"
);

#[test]
#[should_panic(expected = "A9")]
fn case_catches_dropped_lanes() {
    fn setup(options: StoreOptions) -> BoxFuture<'static, Stores> {
        Box::pin(async move { flawed(options, Flaw::DropsLanes) })
    }
    run_case(cases::append::a9_lanes_are_independent(setup));
}

#[test]
#[should_panic(expected = "P4 (round 0): nothing arrived")]
fn case_catches_a_subscription_that_is_not_live_on_return() {
    fn setup(options: StoreOptions) -> BoxFuture<'static, Stores> {
        Box::pin(async move { flawed(options, Flaw::SubscribesOnFirstPoll) })
    }
    run_case(cases::presence::p4_patch_from_peer_right_after_subscribe_is_delivered(setup));
}

#[test]
#[should_panic(expected = "FK1")]
fn case_catches_a_fork_one_event_short() {
    fn setup(options: StoreOptions) -> BoxFuture<'static, Stores> {
        Box::pin(async move { flawed(options, Flaw::ForksOneShort) })
    }
    run_case(cases::fork::fk1_a_fork_copies_the_prefix_and_goes_on_from_it(setup));
}

#[test]
fn the_unflawed_wrapper_passes() {
    fn setup(options: StoreOptions) -> BoxFuture<'static, Stores> {
        Box::pin(async move {
            let store: Arc<dyn Store> = Arc::new(MemoryStore::new(options));
            Stores::new(store.clone(), store)
        })
    }
    property::property_test(setup, 64);
}
