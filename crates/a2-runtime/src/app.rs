//! The application: its builder, options and public operations.

use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2_core::{
    Error, EventStream, ForkOutcome, IntoStore, PresencePatch, Result, ReviveOutcome, Store,
};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{Notify, Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::context::Context;
use crate::handler::{BoxHandler, HandlerError, IntoEvents, erase, erase_batch};
use crate::options::Options;
use crate::reducer::{ErasedReducer, TypedReducer};
use crate::shared::{BatchHandler, Shared};
use crate::stats::{AttemptReport, Counters, Observer, Stats};

/// Places of the prefetch per slot of the concurrency limit (RT13). Claims
/// reserve places for what they hand out, so the places also bound the
/// claims under way at once: with as many places as slots, 100 sessions'
/// delayed events due within one second (`a2-bench --only delay`) fell
/// behind on a loaded machine (a busy loop on one of two cores): claims
/// for one event each queued for the few slots and places, and the events
/// started 14–203 ms late at the 99th percentile on Redis in five runs;
/// with four places per slot, light claims holding none, 9–43 ms in six.
const PREFETCH_PER_SLOT: usize = 4;

/// Builds an [`App`]: handlers by event type, an optional fallback, reducers
/// by name, options.
///
/// ```
/// use a2_core::{MemoryStore, StoreOptions, NewEvent};
/// use a2_runtime::{App, event};
///
/// #[derive(serde::Deserialize)]
/// struct Ping { n: u32 }
///
/// let app = App::builder(MemoryStore::new(StoreOptions::default()))
///     .handler("ping", |_ctx, ping: Ping| async move {
///         event("pong", serde_json::json!({ "n": ping.n })).map(|e| e.settled())
///     })
///     .reducer("count", 0u64, |n: &mut u64, _e| *n += 1)
///     .concurrency(4)
///     .build()?;
/// assert_eq!(app.stats().claimed, 0);
///
/// // Nonsense is refused once, here, instead of being clamped (RT12).
/// let nonsense = App::builder(MemoryStore::new(StoreOptions::default()))
///     .concurrency(0)
///     .build();
/// assert_eq!(nonsense.unwrap_err().code(), a2_core::ErrorCode::InvalidArgument);
/// # Ok::<(), a2_core::Error>(())
/// ```
pub struct AppBuilder {
    store: Arc<dyn Store>,
    handlers: HashMap<String, BoxHandler>,
    batch_handlers: HashMap<String, BatchHandler>,
    fallback: Option<BoxHandler>,
    reducers: HashMap<String, Arc<dyn ErasedReducer>>,
    options: Options,
    observer: Option<Observer>,
}

impl AppBuilder {
    /// Runs `f` for events of type `event_type`, with the payload decoded as
    /// `T` (use `serde_json::Value` for raw JSON). A payload that does not
    /// decode fails the attempt. Registering a type again replaces it.
    pub fn handler<T, F, Fut, R>(mut self, event_type: impl Into<String>, f: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(Context, T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<R, HandlerError>> + Send + 'static,
        R: IntoEvents,
    {
        let event_type = event_type.into();
        self.batch_handlers.remove(&event_type);
        self.handlers.insert(event_type, erase(f));
        self
    }

    /// Runs `f` once for up to `max` claimed events of type `event_type`
    /// of one session, their payloads decoded as `T`, in index order
    /// (RT9): the way an agent answers several queued messages at once.
    /// The events it returns are appended by the completion of the batch's
    /// last event, their cause carrying the batch size (B1); the other
    /// events of the batch complete with nothing. An error or a payload
    /// that does not decode fails every attempt of the batch. The batch is
    /// what one claim hands out: lane-less events, and the ready head of
    /// each lane (a lane's later events wait for it, §1). `max` must be at
    /// least 1 ([`AppBuilder::build`] checks). Registering a type again
    /// replaces its handler, batch or not.
    ///
    /// [`Context::batch`] lists the events; [`Context::event`] is the last.
    pub fn batch_handler<T, F, Fut, R>(
        mut self,
        event_type: impl Into<String>,
        max: usize,
        f: F,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(Context, Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<R, HandlerError>> + Send + 'static,
        R: IntoEvents,
    {
        let event_type = event_type.into();
        self.handlers.remove(&event_type);
        self.batch_handlers.insert(
            event_type,
            BatchHandler {
                max,
                handler: erase_batch(f),
            },
        );
        self
    }

    /// Runs `f` for events of every type without a handler. Without a
    /// fallback such events are completed at once with no output.
    pub fn fallback<T, F, Fut, R>(mut self, f: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(Context, T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<R, HandlerError>> + Send + 'static,
        R: IntoEvents,
    {
        self.fallback = Some(erase(f));
        self
    }

    /// Registers a reducer: `initial` state, and `fold` applied to each event
    /// in index order. The state is stored in snapshots as JSON (use
    /// `serde_json::Value` for raw JSON state).
    pub fn reducer<S, F>(mut self, name: impl Into<String>, initial: S, fold: F) -> Self
    where
        S: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        F: Fn(&mut S, &a2_core::Event) + Send + Sync + 'static,
    {
        let name = name.into();
        let reducer = TypedReducer {
            name: name.clone(),
            initial,
            fold,
            _state: PhantomData,
        };
        self.reducers.insert(name, Arc::new(reducer));
        self
    }

    /// Calls `f` after every attempt with how it ended (for a live display
    /// or metrics). Keep it quick: it runs on the attempt's task.
    pub fn on_attempt(mut self, f: impl Fn(&AttemptReport) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(f));
        self
    }

    /// Replaces all options at once.
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// The lease holder id.
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.options.holder = holder.into();
        self
    }

    /// The lease ttl.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.options.lease_ttl = ttl;
        self
    }

    /// How often leases of running handlers are renewed.
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.options.renew_interval = interval;
        self
    }

    /// Failures after which an event is dead-lettered (at least 1:
    /// [`AppBuilder::build`] checks).
    pub fn max_failures(mut self, n: u32) -> Self {
        self.options.max_failures = n;
        self
    }

    /// The retry backoff.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.options.backoff = backoff;
        self
    }

    /// Handlers running at once in this process (at least 1:
    /// [`AppBuilder::build`] checks). Events claimed past the free slots
    /// wait in a prefetch of four times as many places (RT13); a handler's
    /// slot frees when it returns, and recording its outcome in the store
    /// takes one of five times as many places (RT14).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.options.concurrency = n;
        self
    }

    /// Snapshot after this many folded events (0: never).
    pub fn snapshot_every(mut self, n: u64) -> Self {
        self.options.snapshot_every = n;
        self
    }

    /// How often a worker looks for pending sessions, and the longest wait
    /// between claims of a busy session.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.options.poll_interval = interval;
        self
    }

    /// Sets [`Options::cancel_grace`]: how long a handler whose event was
    /// cancelled may go on after it was told, before it is dropped (RT17).
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.options.cancel_grace = grace;
        self
    }

    /// Sets [`Options::retention`]: workers trim each session they drain to
    /// what `retention` keeps (RT16).
    pub fn retention(mut self, retention: crate::Retention) -> Self {
        self.options.retention = Some(retention);
        self
    }

    /// The ttl of presence set through the runtime.
    pub fn presence_ttl(mut self, ttl: Duration) -> Self {
        self.options.presence_ttl = ttl;
        self
    }

    /// The application, once its options make sense (RT12): concurrency,
    /// max failures, lease ttl and every batch size at least 1, the renew
    /// interval shorter than the lease ttl (else a lease would run out
    /// before it is renewed), a non-empty holder. Anything else is
    /// `InvalidArgument`; nothing is clamped silently.
    pub fn build(self) -> Result<App> {
        let options = &self.options;
        if options.concurrency == 0 {
            return Err(Error::invalid("concurrency must be at least 1"));
        }
        if options.max_failures == 0 {
            return Err(Error::invalid("max_failures must be at least 1"));
        }
        if options.lease_ttl < Duration::from_millis(1) {
            return Err(Error::invalid("lease_ttl must be at least 1 ms"));
        }
        if options.renew_interval.is_zero() || options.renew_interval >= options.lease_ttl {
            return Err(Error::invalid(format!(
                "renew_interval ({:?}) must be above zero and shorter than lease_ttl ({:?})",
                options.renew_interval, options.lease_ttl
            )));
        }
        if options.poll_interval.is_zero() {
            return Err(Error::invalid("poll_interval must be above zero"));
        }
        a2_core::validate::name("holder", &options.holder)?;
        if let Some(retention) = &options.retention {
            retention.check()?;
        }
        if let Some((event_type, _)) = self.batch_handlers.iter().find(|(_, b)| b.max == 0) {
            return Err(Error::invalid(format!(
                "the batch handler of {event_type:?} must take at least 1 event"
            )));
        }
        let (idle, _) = watch::channel(0usize);
        let concurrency = options.concurrency;
        let prefetch = concurrency.saturating_mul(PREFETCH_PER_SLOT);
        let gone = CancellationToken::new();
        let app = App {
            inner: Arc::new(Shared {
                store: self.store,
                handlers: self.handlers,
                batch_handlers: self.batch_handlers,
                fallback: self.fallback,
                reducers: self.reducers,
                options: self.options,
                observer: self.observer,
                counters: Counters::default(),
                permits: Arc::new(Semaphore::new(concurrency)),
                prefetch: Arc::new(Semaphore::new(prefetch)),
                prefetch_size: prefetch,
                recording: Arc::new(Semaphore::new(concurrency.saturating_add(prefetch))),
                room: Notify::new(),
                drains: Mutex::new(HashMap::new()),
                corrupted: Mutex::new(HashSet::new()),
                retained: Mutex::new(HashMap::new()),
                active: idle,
                stop: CancellationToken::new(),
                abort: CancellationToken::new(),
                listening: std::sync::atomic::AtomicBool::new(false),
                cancels_live: watch::channel(false).0,
                gone: gone.clone(),
                _gone_guard: gone.drop_guard(),
            }),
        };
        // RT17: cancels are listened to from the start when built inside a
        // tokio runtime (claims wait until the subscription is live); else
        // from the first claim or `App::ready` on.
        if tokio::runtime::Handle::try_current().is_ok() {
            crate::drain::cancel::listen(&app.inner);
        }
        Ok(app)
    }
}

/// What a graceful shutdown did (RT6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Whether every running handler finished before the deadline.
    pub finished_in_time: bool,
    /// Leases released because their handlers were still running (RL1).
    pub released: u64,
}

/// A running a2 application: handlers, reducers and the drains of its
/// sessions, over any [`Store`]. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct App {
    pub(crate) inner: Arc<Shared>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("holder", &self.inner.options.holder)
            .field("handlers", &self.inner.handlers.len())
            .field("reducers", &self.inner.reducers.len())
            .finish_non_exhaustive()
    }
}

impl App {
    /// A builder over `store`, with default [`Options`]. Any store will do,
    /// by value or in an `Arc` (`IntoStore`): `App::builder(MemoryStore::new(…))`.
    pub fn builder(store: impl IntoStore) -> AppBuilder {
        AppBuilder {
            store: store.into_store(),
            handlers: HashMap::new(),
            batch_handlers: HashMap::new(),
            fallback: None,
            reducers: HashMap::new(),
            options: Options::default(),
            observer: None,
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// The lease holder id of this application.
    pub fn holder(&self) -> &str {
        &self.inner.options.holder
    }

    /// The counters so far (RT7).
    pub fn stats(&self) -> Stats {
        self.inner.counters.snapshot()
    }

    /// Revives a dead-lettered event (RV2) and, when it was revived, drains
    /// its session in this process in the background (RT2), so the event
    /// runs again at once. An event that is not dead-lettered is
    /// `NotDeadLettered`, nothing written (RV3).
    pub async fn revive(&self, session: &str, index: u64) -> Result<ReviveOutcome> {
        let outcome = self.inner.store.revive(session, index).await?;
        if outcome.is_revived() {
            self.drain(session);
        }
        Ok(outcome)
    }

    /// Forks `source` at `at_index` into the new session `target` (FK1,
    /// FK2, FK3, FK4, FK5): its events up to the index with their records
    /// (leases released) and the snapshots that folded them. When the fork
    /// has pending events this process drains it in the background (RT2),
    /// so its handlers run there as they would in the source.
    ///
    /// A chat regenerates a reply by forking before the user's message and
    /// appending the message again; an agent reruns from step 12 by forking
    /// at 11:
    ///
    /// ```
    /// # use a2_core::{MemoryStore, NewEvent, StoreOptions};
    /// # use a2_runtime::App;
    /// # use serde_json::json;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), a2_core::Error> {
    /// let app = App::builder(MemoryStore::new(StoreOptions::default())).build()?;
    /// app.append("chat", vec![NewEvent::new("user", json!("hi")).settled()]).await?;
    /// app.append("chat", vec![NewEvent::new("bot", json!("hello")).settled()]).await?;
    /// app.fork("chat", 1, "chat-regenerated").await?;
    /// let events = app.store().read("chat-regenerated", Default::default()).await?;
    /// assert_eq!(events.len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn fork(&self, source: &str, at_index: u64, target: &str) -> Result<ForkOutcome> {
        let outcome = self.inner.store.fork(source, at_index, target).await?;
        if matches!(outcome, ForkOutcome::Forked { .. }) {
            self.drain(target);
        }
        Ok(outcome)
    }

    /// Starts draining a session in the background, or tells its running
    /// drain to look again. Needs a tokio runtime. A session found
    /// corrupted (RT11) is tried again.
    pub fn drain(&self, session: &str) {
        self.inner.corrupted().remove(session);
        crate::drain::ensure(&self.inner, session, true);
    }

    /// A live feed of the session's events after `after_index` (§6).
    pub fn stream(&self, session: &str, after_index: u64) -> EventStream {
        self.inner.store.stream(session, after_index)
    }

    /// The state of `reducer` for `session`: its snapshot plus the fold of
    /// every newer event (RT5). When the fold passed `snapshot_every` events
    /// the result is written back as the new snapshot (never backward, S2).
    pub async fn state<S: DeserializeOwned>(&self, session: &str, reducer: &str) -> Result<S> {
        let value = self.state_json(session, reducer).await?;
        crate::reducer::decode_state(value, reducer)
    }

    /// [`App::state`] as raw JSON.
    pub async fn state_json(&self, session: &str, reducer: &str) -> Result<Value> {
        self.inner.state_json(session, reducer).await
    }

    /// Sets presence fields of `participant` in namespace `ns` (usually the
    /// session id), stamped with the store clock, living `presence_ttl`.
    pub async fn set_presence(
        &self,
        ns: &str,
        participant: &str,
        values: BTreeMap<String, Option<Value>>,
    ) -> Result<Option<PresencePatch>> {
        self.inner.set_presence(ns, participant, values).await
    }

    /// Resolves when no session is being drained in this process: every
    /// event this process could process is settled, dead-lettered, or
    /// leased elsewhere. Events appended later start new drains.
    pub async fn idle(&self) {
        let mut rx = self.inner.active.subscribe();
        // The sender lives in `inner`, which `self` keeps alive, so the
        // channel cannot close while we wait.
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// Graceful shutdown (RT6): stops claiming (and the worker loop), waits
    /// up to `deadline` for running handlers to finish, then cancels the
    /// rest and releases their leases so another process can take them over
    /// at once (RL1). Appends still work afterwards but are not drained.
    pub async fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let released_before = self.stats().released;
        self.inner.stop.cancel();
        let finished_in_time = tokio::time::timeout(deadline, self.idle()).await.is_ok();
        if !finished_in_time {
            self.inner.abort.cancel();
            self.idle().await;
        }
        ShutdownReport {
            finished_in_time,
            released: self.stats().released - released_before,
        }
    }

    /// Whether a shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.stop.is_cancelled()
    }
}
