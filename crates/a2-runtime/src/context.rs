//! The handler context (RT4).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use a2_core::{AppendOutcome, Cause, NewEvent, PresencePatch, Result, StoredEvent};
use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::ids::{self, Kind};
use crate::retry;

/// What a handler gets besides its payload: the event, its attempt, a way to
/// write progress, read state and set presence, and a cancellation signal.
///
/// Cheap to clone.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

/// What a context asks of the runtime that runs its handler: appending
/// (and draining what it appended), reading reducer state, setting
/// presence. The runtime's shared state implements it; a context holds
/// nothing else of the application.
pub(crate) trait Host: Send + Sync + 'static {
    /// `App::append`.
    fn append(
        self: Arc<Self>,
        session: String,
        events: Vec<NewEvent>,
    ) -> BoxFuture<'static, Result<AppendOutcome>>;
    /// `App::state_json`.
    fn state_json(
        self: Arc<Self>,
        session: String,
        reducer: String,
    ) -> BoxFuture<'static, Result<Value>>;
    /// `App::set_presence`.
    fn set_presence(
        self: Arc<Self>,
        ns: String,
        participant: String,
        values: BTreeMap<String, Option<Value>>,
    ) -> BoxFuture<'static, Result<Option<PresencePatch>>>;
}

struct ContextInner {
    host: Arc<dyn Host>,
    /// The event handled; for a batch handler, the last of the batch.
    event: StoredEvent,
    /// A batch handler's events, in index order, ending with `event`;
    /// empty for a plain handler (RT9).
    batch: Vec<StoredEvent>,
    /// How many events a batch handler got; `None` for a plain handler.
    batch_size: Option<u32>,
    cancel: CancellationToken,
    /// Progress events appended so far: the position of the next one in
    /// its derived id (RT10).
    progress: AtomicU64,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("session", &self.session())
            .field("index", &self.index())
            .field("attempt", &self.attempt())
            .finish_non_exhaustive()
    }
}

impl Context {
    /// The context of a plain handler.
    pub(crate) fn new(host: Arc<dyn Host>, event: StoredEvent, cancel: CancellationToken) -> Self {
        Self::build(host, event, Vec::new(), None, cancel)
    }

    /// The context of a batch handler: `event` is the last of `batch`.
    pub(crate) fn for_batch(
        host: Arc<dyn Host>,
        event: StoredEvent,
        batch: Vec<StoredEvent>,
        cancel: CancellationToken,
    ) -> Self {
        let size = u32::try_from(batch.len()).unwrap_or(u32::MAX);
        Self::build(host, event, batch, Some(size), cancel)
    }

    fn build(
        host: Arc<dyn Host>,
        event: StoredEvent,
        batch: Vec<StoredEvent>,
        batch_size: Option<u32>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(ContextInner {
                host,
                event,
                batch,
                batch_size,
                cancel,
                progress: AtomicU64::new(0),
            }),
        }
    }

    /// The event being handled, with its processing record as claimed; for
    /// a batch handler, the last event of the batch.
    pub fn event(&self) -> &StoredEvent {
        &self.inner.event
    }

    /// Every event handled by this call, in index order: the one event of
    /// a plain handler, or the events of a batch handler's batch (RT9).
    pub fn batch(&self) -> &[StoredEvent] {
        if self.inner.batch.is_empty() {
            std::slice::from_ref(&self.inner.event)
        } else {
            &self.inner.batch
        }
    }

    /// The raw payload.
    pub fn payload(&self) -> &Value {
        &self.event().event.payload
    }

    /// The event's type.
    pub fn event_type(&self) -> &str {
        &self.event().event.event_type
    }

    /// The session.
    pub fn session(&self) -> &str {
        &self.event().event.session_id
    }

    /// The event's index.
    pub fn index(&self) -> u64 {
        self.event().event.index
    }

    /// This attempt's number (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.event().attempt_count
    }

    /// How many earlier attempts failed.
    pub fn failures(&self) -> u32 {
        self.event().failure_count
    }

    /// The event's lane, if any.
    pub fn lane(&self) -> Option<&str> {
        self.event().event.lane.as_deref()
    }

    /// `{index, attempt}` of this attempt (with the batch size for a batch
    /// handler, B1): the cause of what it writes.
    pub fn cause(&self) -> Cause {
        Cause {
            index: self.index(),
            attempt: self.attempt(),
            batch_size: self.inner.batch_size,
        }
    }

    /// Appends events to this session caused by this attempt (A7): they are
    /// written only while this attempt is current, else the append fails
    /// with `SupersededAttempt`. Unsettled ones are drained in turn.
    ///
    /// Events without an id get one derived from this attempt and their
    /// position among its progress events, and the append is tried again
    /// when the store was unavailable: a retry is a replay (RT10, A5).
    pub async fn append(&self, events: Vec<NewEvent>) -> Result<Vec<StoredEvent>> {
        let cause = self.cause();
        let mut events: Vec<NewEvent> = events.into_iter().map(|e| e.caused_by(cause)).collect();
        let first = self
            .inner
            .progress
            .fetch_add(events.len() as u64, Ordering::Relaxed);
        ids::fill(
            &mut events,
            self.session(),
            self.index(),
            self.attempt(),
            Kind::Progress,
            first,
        );
        let outcome = retry::when_unavailable(|| {
            self.inner
                .host
                .clone()
                .append(self.session().to_owned(), events.clone())
        })
        .await?;
        Ok(outcome.events)
    }

    /// Appends one settled progress event caused by this attempt, for
    /// example a token delta of a reply being written.
    pub async fn progress(
        &self,
        event_type: impl Into<String>,
        payload: impl Serialize,
    ) -> Result<StoredEvent> {
        let payload = serde_json::to_value(payload).map_err(|e| {
            a2_core::Error::serialization(format!("progress payload does not serialize: {e}"))
        })?;
        let mut rows = self
            .append(vec![NewEvent::new(event_type, payload).settled()])
            .await?;
        rows.pop()
            .ok_or_else(|| a2_core::Error::unavailable("append of one event returned no row"))
    }

    /// The state of a reducer for this session (as `App::state` reads it).
    pub async fn state<S: DeserializeOwned>(&self, reducer: &str) -> Result<S> {
        let value = self
            .inner
            .host
            .clone()
            .state_json(self.session().to_owned(), reducer.to_owned())
            .await?;
        crate::reducer::decode_state(value, reducer)
    }

    /// Sets presence fields of `participant` in this session's namespace
    /// (as `App::set_presence` does).
    pub async fn set_presence(
        &self,
        participant: &str,
        values: BTreeMap<String, Option<Value>>,
    ) -> Result<Option<PresencePatch>> {
        self.inner
            .host
            .clone()
            .set_presence(self.session().to_owned(), participant.to_owned(), values)
            .await
    }

    /// Whether the attempt was cancelled: its event was cancelled
    /// (`App::cancel`, from any process, CN1), its lease was lost, or a
    /// shutdown ran out of time. Its result would be discarded. A cheap
    /// check for a loop between steps.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Resolves when the attempt is cancelled (see
    /// [`Context::is_cancelled`]). When the event was cancelled the handler
    /// has `Options::cancel_grace` to stop (abort its model call, say what
    /// it did) before the runtime drops it (RT17); after a lost lease or a
    /// shutdown the runtime stops polling it at its next `.await`. This lets
    /// a handler doing its own blocking or detached work stop early.
    ///
    /// ```no_run
    /// # async fn stream_reply(_: &a2_runtime::Context) {}
    /// # async fn handler(ctx: a2_runtime::Context) {
    /// tokio::select! {
    ///     _ = ctx.cancelled() => { /* the user pressed stop */ }
    ///     _ = stream_reply(&ctx) => {}
    /// }
    /// # }
    /// ```
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.inner.cancel.cancelled()
    }
}
