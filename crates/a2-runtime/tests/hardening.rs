//! The runtime's answers to the hardening rules of SPEC §9: batch handlers
//! (RT9), deterministic ids and replayed writes (RT10), no spinning on a
//! corrupted session (RT11), options checked once (RT12) and the
//! serialization error code (RT8). Stores with faults are the memory store
//! behind a wrapper that injects them.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2_core::*;
use a2_runtime::{App, AppBuilder, Backoff, Context, HandlerError, event};
use async_trait::async_trait;
use serde_json::{Value, json};

const T0: i64 = 1_700_000_000_000;

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
        if self.faults.corrupted_claims {
            return Err(Error::corrupted(
                "entry 2 is missing (injected)",
                Some(&request.session),
                Some(2),
            ));
        }
        self.inner.claim_available(request).await
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
    async fn revive(&self, session: &str, index: u64) -> Result<ReviveOutcome> {
        self.inner.revive(session, index).await
    }
    async fn read_state(&self, session: &str, reducer: &str) -> Result<StateRead> {
        self.inner.read_state(session, reducer).await
    }
    async fn put_snapshots(&self, session: &str, snapshots: Vec<SnapshotWrite>) -> Result<()> {
        self.inner.put_snapshots(session, snapshots).await
    }
    async fn presence_set(
        &self,
        ns: &str,
        participant: &str,
        values: BTreeMap<String, Option<Value>>,
        meta: PresenceMeta,
    ) -> Result<Option<PresencePatch>> {
        self.inner.presence_set(ns, participant, values, meta).await
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
    async fn clear(&self, session: &str) -> Result<()> {
        self.inner.clear(session).await
    }
    async fn close(&self) {
        self.inner.close().await
    }
}

fn faulty(faults: Faults) -> (Arc<dyn Store>, Arc<Faults>) {
    let faults = Arc::new(faults);
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(Faulty {
        inner: MemoryStore::new(StoreOptions::default().with_clock(clock)),
        faults: faults.clone(),
    });
    (store, faults)
}

fn memory() -> Arc<dyn Store> {
    let clock = Arc::new(ManualClock::new(T0));
    Arc::new(MemoryStore::new(StoreOptions::default().with_clock(clock)))
}

fn builder(store: &Arc<dyn Store>) -> AppBuilder {
    App::builder(store.clone())
        .holder("test-worker")
        .poll_interval(Duration::from_millis(5))
        .renew_interval(Duration::from_millis(10))
        .lease_ttl(Duration::from_secs(10))
        .backoff(Backoff::none())
}

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

async fn all(store: &Arc<dyn Store>, session: &str) -> Vec<StoredEvent> {
    store.read(session, ReadRange::default()).await.unwrap()
}

/// RT11: a session whose claim fails with `Corrupted` is not claimed again
/// and again: its drain ends (the app goes idle) and the worker's scan
/// skips it, until `drain` names it explicitly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt11_a_corrupted_session_is_not_claimed_forever() {
    let (store, faults) = faulty(Faults {
        corrupted_claims: true,
        ..Faults::default()
    });
    let app = builder(&store).build().unwrap();
    // Appended by another process: this one has to claim it (an append
    // through the app would claim it at append, RT13).
    store
        .append("s", vec![NewEvent::new("t", json!(1))])
        .await
        .unwrap();
    app.drain("s");
    within("the drain to give up", app.idle()).await;
    assert_eq!(faults.claims.load(Ordering::SeqCst), 1, "RT11: one claim");
    assert_eq!(app.scan_pending().await.unwrap(), 1, "still pending");
    // A drain the scan started (wrongly) counts as active before
    // `scan_pending` returns and claims before it ends, so once the app is
    // idle again it would have claimed.
    within("idle", app.idle()).await;
    assert_eq!(
        faults.claims.load(Ordering::SeqCst),
        1,
        "RT11: the worker's scan skips a corrupted session"
    );
    app.drain("s");
    within("idle", app.idle()).await;
    assert_eq!(faults.claims.load(Ordering::SeqCst), 2, "drain tries again");
}

/// RT10, CO3: a completion whose acknowledgement was lost is tried again
/// with the same derived ids and is a replay: the attempt completes, the
/// returned events exist once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt10_a_retried_completion_is_a_replay() {
    let (store, faults) = faulty(Faults {
        lost_completions: AtomicU32::new(1),
        ..Faults::default()
    });
    let app = builder(&store)
        .handler("q", |_ctx, _: Value| async move {
            Ok(vec![
                event("a", json!(1))?.settled(),
                event("b", json!(2))?.settled(),
            ])
        })
        .build()
        .unwrap();
    app.append("s", vec![NewEvent::new("q", json!(null))])
        .await
        .unwrap();
    within("idle", app.idle()).await;
    assert_eq!(
        faults.lost_completions.load(Ordering::SeqCst),
        0,
        "fault used"
    );
    let stats = app.stats();
    assert_eq!(
        (stats.completed, stats.store_errors),
        (1, 0),
        "RT10: {stats:?}"
    );
    let rows = all(&store, "s").await;
    let types: Vec<&str> = rows.iter().map(|r| r.event.event_type.as_str()).collect();
    assert_eq!(types, ["q", "a", "b"], "RT10: returned events once");
    assert_eq!(rows[0].processed_by_attempt, Some(1));
}

/// RT10, A5: a progress append whose acknowledgement was lost is tried
/// again and is a replay: the handler sees it succeed, the log holds it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt10_a_retried_progress_append_is_a_replay() {
    let (store, faults) = faulty(Faults {
        lost_progress: AtomicU32::new(1),
        ..Faults::default()
    });
    let app = builder(&store)
        .max_failures(1)
        .handler("q", |ctx, _: Value| async move {
            let row = ctx.progress("delta", json!({ "text": "hel" })).await?;
            ctx.progress("delta", json!({ "text": "lo" })).await?;
            Ok(event("done", json!(row.event.index))?.settled())
        })
        .build()
        .unwrap();
    app.append("s", vec![NewEvent::new("q", json!(null))])
        .await
        .unwrap();
    within("idle", app.idle()).await;
    assert_eq!(faults.lost_progress.load(Ordering::SeqCst), 0, "fault used");
    let rows = all(&store, "s").await;
    let types: Vec<&str> = rows.iter().map(|r| r.event.event_type.as_str()).collect();
    assert_eq!(
        types,
        ["q", "delta", "delta", "done"],
        "RT10: no duplicate, no failure"
    );
    assert!(rows[0].processed_at.is_some());
}

/// RT10: the ids of what an attempt writes derive from session, index,
/// attempt and position: the same run on two stores gives the same ids, a
/// second attempt other ids, and ids a handler sets stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt10_ids_derive_from_session_index_attempt_and_position() {
    async fn run() -> Vec<StoredEvent> {
        let store = memory();
        let calls = Arc::new(AtomicU32::new(0));
        let app = builder(&store)
            .handler("q", move |ctx, _: Value| {
                let calls = calls.clone();
                async move {
                    ctx.progress("delta", json!(ctx.attempt())).await?;
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        return Err(HandlerError::new("first attempt fails"));
                    }
                    Ok(vec![
                        event("a", json!(1))?.settled(),
                        event("b", json!(2))?.settled().id("mine"),
                    ])
                }
            })
            .build()
            .unwrap();
        app.append("s", vec![NewEvent::new("q", json!(null)).id("q1")])
            .await
            .unwrap();
        within("idle", app.idle()).await;
        all(&store, "s").await
    }
    let first = run().await;
    let second = run().await;
    let ids = |rows: &[StoredEvent]| rows.iter().map(|r| r.event.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&first), ids(&second), "RT10: deterministic");
    let types: Vec<&str> = first.iter().map(|r| r.event.event_type.as_str()).collect();
    assert_eq!(types, ["q", "delta", "delta", "a", "b"]);
    assert_ne!(first[1].event.id, first[2].event.id, "RT10: per attempt");
    assert_eq!(first[4].event.id, "mine", "a handler's own id stays");
    assert!(
        first[1..4]
            .iter()
            .all(|r| r.event.id.len() == 32 && r.event.id.bytes().all(|b| b.is_ascii_hexdigit())),
        "RT10: 32 hex digits"
    );
}

/// RT9, B1: a batch handler gets the queued events of its type in batches
/// of at most its size, in index order, one call each; the returned events
/// are caused by the batch's last event with the batch size; every event
/// of a batch is processed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt9_batch_handler_answers_queued_events_in_one_call() {
    let store = memory();
    let calls: Arc<Mutex<Vec<Vec<u64>>>> = Arc::default();
    let app = {
        let calls = calls.clone();
        builder(&store)
            .concurrency(8)
            .batch_handler("msg", 5, move |ctx, texts: Vec<String>| {
                let calls = calls.clone();
                async move {
                    let indexes: Vec<u64> = ctx.batch().iter().map(|e| e.event.index).collect();
                    assert_eq!(ctx.index(), *indexes.last().unwrap());
                    calls.lock().unwrap().push(indexes);
                    Ok(event("reply", json!(texts.join(" ")))?.settled())
                }
            })
            .build()
            .unwrap()
    };
    let messages = (1..=7)
        .map(|i| NewEvent::new("msg", json!(format!("m{i}"))))
        .collect();
    app.append("s", messages).await.unwrap();
    within("idle", app.idle()).await;
    // The batches run concurrently: compare them in index order.
    let mut calls = calls.lock().unwrap().clone();
    calls.sort();
    assert_eq!(calls, [vec![1, 2, 3, 4, 5], vec![6, 7]], "RT9: batches");
    let rows = all(&store, "s").await;
    assert!(
        rows[..7].iter().all(|r| r.processed_at.is_some()),
        "RT9: all processed"
    );
    let mut replies: Vec<(Value, Option<Cause>)> = rows[7..]
        .iter()
        .map(|r| (r.event.payload.clone(), r.cause))
        .collect();
    replies.sort_by_key(|(_, cause)| *cause);
    assert_eq!(
        replies,
        [
            (
                json!("m1 m2 m3 m4 m5"),
                Some(Cause::new(5, 1).with_batch_size(5))
            ),
            (json!("m6 m7"), Some(Cause::new(7, 1).with_batch_size(2))),
        ],
        "RT9, B1: one reply per batch, caused by its last event"
    );
}

/// RT9, RT8: a batch whose handler fails (here: a payload that does not
/// decode) fails every attempt of the batch; they are dead-lettered like
/// any failure, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt9_a_failed_batch_fails_every_event_of_it() {
    let store = memory();
    let app = builder(&store)
        .max_failures(1)
        .batch_handler("msg", 10, |_ctx, _texts: Vec<String>| async move { Ok(()) })
        .build()
        .unwrap();
    let events = vec![
        NewEvent::new("msg", json!("fine")),
        NewEvent::new("msg", json!({ "not": "a string" })),
        NewEvent::new("other", json!(null)),
    ];
    app.append("s", events).await.unwrap();
    within("idle", app.idle()).await;
    let rows = all(&store, "s").await;
    assert!(rows[0].failed_at.is_some() && rows[1].failed_at.is_some());
    assert!(
        rows[1]
            .last_error
            .as_deref()
            .unwrap()
            .contains("does not decode"),
        "RT8: {:?}",
        rows[1].last_error
    );
    assert!(
        rows[2].processed_at.is_some(),
        "the rest of the session went on"
    );
}

/// RT12: `build` refuses nonsense instead of clamping it.
#[test]
fn rt12_build_rejects_nonsense_options() {
    let store = memory();
    let refused = |b: AppBuilder, what: &str| match b.build() {
        Err(err) => assert_eq!(err.code(), ErrorCode::InvalidArgument, "{what}: {err}"),
        Ok(_) => panic!("RT12: {what} was accepted"),
    };
    refused(builder(&store).concurrency(0), "concurrency 0");
    refused(builder(&store).max_failures(0), "max_failures 0");
    refused(
        builder(&store)
            .lease_ttl(Duration::from_secs(10))
            .renew_interval(Duration::from_secs(10)),
        "renew interval equal to the lease ttl",
    );
    refused(
        builder(&store).renew_interval(Duration::from_secs(60)),
        "renew interval above the lease ttl",
    );
    refused(builder(&store).lease_ttl(Duration::ZERO), "zero lease ttl");
    refused(builder(&store).holder(""), "empty holder");
    refused(
        builder(&store).batch_handler("t", 0, |_ctx, _: Vec<Value>| async move { Ok(()) }),
        "batch of 0",
    );
    assert!(builder(&store).build().is_ok());
}

/// RT8: a state that does not decode as the asked type is a
/// `Serialization` error, not `InvalidArgument` (the input was fine).
#[tokio::test]
async fn rt8_state_that_does_not_decode_is_a_serialization_error() {
    let store = memory();
    let app = builder(&store)
        .reducer("count", 0u64, |n: &mut u64, _e| *n += 1)
        .build()
        .unwrap();
    app.append("s", vec![NewEvent::new("t", json!(1)).settled()])
        .await
        .unwrap();
    let err = app.state::<String>("s", "count").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Serialization, "RT8: {err}");
    let err = app.state::<u64>("s", "nope").await.unwrap_err();
    assert_eq!(
        err.code(),
        ErrorCode::InvalidArgument,
        "an unknown reducer is bad input"
    );
}

/// RT13: events appended through the app are claimed by the append itself
/// and run without a claim: those past the concurrency limit wait in the
/// drain, their leases renewed, and run as slots free up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt13_appended_events_run_without_a_claim() {
    let (store, faults) = faulty(Faults::default());
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let app = {
        let ran = ran.clone();
        builder(&store)
            .concurrency(2)
            .handler("t", move |ctx: Context, _: Value| {
                let ran = ran.clone();
                async move {
                    // Long enough for several renewals (every 10 ms).
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    ran.lock().unwrap().push(ctx.index());
                    Ok::<(), HandlerError>(())
                }
            })
            .build()
            .unwrap()
    };
    for n in 0..3 {
        app.append("s", vec![NewEvent::new("t", json!(n))])
            .await
            .unwrap();
    }
    within("the first three to run", app.idle()).await;
    // Two run, two wait for a slot: all four claimed by the append.
    let out = app
        .append("s", (0..4).map(|n| NewEvent::new("t", json!(n))).collect())
        .await
        .unwrap();
    assert_eq!(out.claimed, [4, 5, 6, 7], "AC2: the append claimed");
    within("every event to run", app.idle()).await;
    let mut ran = ran.lock().unwrap().clone();
    ran.sort_unstable();
    assert_eq!(ran, (1..=7).collect::<Vec<u64>>(), "each ran once");
    let rows = all(&store, "s").await;
    assert!(rows.iter().all(|r| r.processed_by_attempt == Some(1)));
    assert_eq!(app.stats().completed, 7);
    assert_eq!(
        faults.claims.load(Ordering::SeqCst),
        0,
        "RT13: no claim round trip, not even after the completions"
    );
}

/// RT14: a handler's place in the concurrency limit frees when the
/// handler returns, and recording outcomes has twice as many places of its
/// own. While the store holds every completion back, with a limit of two:
/// handlers run and return, two at a time, until their outcomes take all
/// four recording places; the next two keep their slots waiting for a
/// place, so no seventh handler starts. Once the store answers, everything
/// completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt14_outcomes_are_recorded_beside_the_next_handlers_within_a_bound() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (store, faults) = faulty(Faults {
        completion_gate: Some(gate.clone()),
        ..Faults::default()
    });
    let started = Arc::new(AtomicU32::new(0));
    let app = {
        let started = started.clone();
        builder(&store)
            .concurrency(2)
            .handler("t", move |_ctx: Context, _: Value| {
                let started = started.clone();
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), HandlerError>(())
                }
            })
            .build()
            .unwrap()
    };
    app.append("s", (0..10).map(|n| NewEvent::new("t", json!(n))).collect())
        .await
        .unwrap();
    within(
        "six handlers to start and four completions to wait",
        async {
            while started.load(Ordering::SeqCst) < 6 || faults.held.load(Ordering::SeqCst) < 4 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        },
    )
    .await;
    // The drain renews its leases every 10 ms, in the loop that starts a
    // waiting event once a slot frees (the start comes after the renewal
    // in its biased select): two more renewals, each after the six
    // handlers returned, give a (wrongly) freed slot its turn to start a
    // seventh handler.
    let renews = faults.renews.load(Ordering::SeqCst);
    within("two more renewals", async {
        while faults.renews.load(Ordering::SeqCst) < renews + 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert_eq!(
        started.load(Ordering::SeqCst),
        6,
        "RT14: at most four outcomes being recorded"
    );
    assert_eq!(faults.held.load(Ordering::SeqCst), 4);
    gate.add_permits(10);
    within("every event to complete", app.idle()).await;
    assert_eq!(started.load(Ordering::SeqCst), 10, "each ran once");
    assert_eq!(app.stats().completed, 10);
    let rows = all(&store, "s").await;
    assert!(rows.iter().all(|r| r.processed_by_attempt == Some(1)));
}

/// RT13, RT6: at shutdown, events claimed at append that still wait for a
/// slot are released at once, like the running ones past the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt13_waiting_events_are_released_at_shutdown() {
    let store = memory();
    let started = Arc::new(tokio::sync::Notify::new());
    let app = {
        let started = started.clone();
        builder(&store)
            .concurrency(1)
            .handler("stuck", move |_ctx: Context, _: Value| {
                let started = started.clone();
                async move {
                    started.notify_one();
                    std::future::pending::<()>().await;
                    Ok::<(), HandlerError>(())
                }
            })
            .build()
            .unwrap()
    };
    let out = app
        .append(
            "s",
            (0..3).map(|n| NewEvent::new("stuck", json!(n))).collect(),
        )
        .await
        .unwrap();
    assert_eq!(out.claimed, [1, 2], "one slot and one place to wait");
    within("the first to start", started.notified()).await;
    let report = within("shutdown", app.shutdown(Duration::from_millis(50))).await;
    assert!(!report.finished_in_time);
    let rows = all(&store, "s").await;
    for r in &rows {
        assert!(
            r.is_pending() && r.claim_holder.is_none(),
            "released: {r:?}"
        );
    }
    assert_eq!(
        rows.iter().map(|r| r.attempt_count).collect::<Vec<_>>(),
        [1, 1, 0],
        "the third was never claimed"
    );
}

/// RT13: a backlog another process appended is claimed many events at a
/// time (the prefetch fills; a claim waits for room), not one claim per
/// freed slot; every event still runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt13_a_backlog_is_claimed_many_events_at_a_time() {
    let (store, faults) = faulty(Faults::default());
    let ran = Arc::new(AtomicU32::new(0));
    let app = {
        let ran = ran.clone();
        builder(&store)
            .concurrency(4)
            .handler("t", move |_ctx: Context, _: Value| {
                let ran = ran.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), HandlerError>(())
                }
            })
            .build()
            .unwrap()
    };
    store
        .append("s", (0..60).map(|n| NewEvent::new("t", json!(n))).collect())
        .await
        .unwrap();
    app.drain("s");
    within("the backlog to run", app.idle()).await;
    assert_eq!(ran.load(Ordering::SeqCst), 60, "each ran once");
    assert!(
        all(&store, "s")
            .await
            .iter()
            .all(|r| r.processed_by_attempt == Some(1))
    );
    let claims = faults.claims.load(Ordering::SeqCst);
    assert!(
        claims <= 20,
        "RT13: {claims} claims for 60 events, four slots and four places"
    );
}
