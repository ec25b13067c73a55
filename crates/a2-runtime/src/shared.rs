//! What an application shares between its handle, its drains and its
//! handlers' contexts: the store, the registered handlers and reducers,
//! the options, the counters and the drain bookkeeping.
//!
//! It sits below `drain` and `context` in the module graph: they are given
//! this (or, for a context, the `Host` part of it), never the `App`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use a2_core::{Error, PresenceMeta, PresencePatch, Result, SnapshotWrite, Store, StoredEvent};
use foldhash::{HashMap, HashSet};
use serde_json::Value;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::handler::{BoxBatchHandler, BoxHandler};
use crate::options::Options;
use crate::reducer::ErasedReducer;
use crate::stats::{Counters, Observer};

/// A registered batch handler (RT9).
#[derive(Clone)]
pub(crate) struct BatchHandler {
    /// The most events one call receives.
    pub(crate) max: usize,
    pub(crate) handler: BoxBatchHandler,
}

/// Everything an application shares between its handle ([`App`]), its
/// drains and its handlers' contexts.
///
/// [`App`]: crate::App
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) handlers: HashMap<String, BoxHandler>,
    pub(crate) batch_handlers: HashMap<String, BatchHandler>,
    pub(crate) fallback: Option<BoxHandler>,
    pub(crate) reducers: HashMap<String, Arc<dyn ErasedReducer>>,
    pub(crate) options: Options,
    pub(crate) observer: Option<Observer>,
    pub(crate) counters: Counters,
    /// The concurrency limit, shared by every session's drain.
    pub(crate) permits: Arc<Semaphore>,
    /// Places for claimed events that wait for a permit (RT13): four times
    /// the concurrency limit. A light claim reserves its places here while
    /// the store answers, not a permit.
    pub(crate) prefetch: Arc<Semaphore>,
    /// How many places the prefetch has.
    pub(crate) prefetch_size: usize,
    /// Places for attempts whose handler returned and whose outcome is
    /// being recorded (RT14): five times the concurrency limit, one for
    /// every lease the limit and the prefetch let the process hold. An
    /// attempt takes one before it gives its permit back.
    pub(crate) recording: Arc<Semaphore>,
    /// Told (`notify_waiters`) when places of the prefetch come back, so
    /// that drains holding back a claim (RT13) look again.
    pub(crate) room: Notify,
    /// One entry per session being drained in this process. A `std` mutex:
    /// it is held for a map operation only, never across an `.await`.
    pub(crate) drains: Mutex<HashMap<String, DrainSlot>>,
    /// Sessions whose claim failed with `Corrupted`: the worker loop skips
    /// them (RT11) until `App::drain` names one again.
    pub(crate) corrupted: Mutex<HashSet<String>>,
    /// Per session drained here: attempts finished since its last trim,
    /// and when (store clock) that was (RT16).
    pub(crate) retained: Mutex<HashMap<String, Tracked>>,
    /// How many drains are running (mirrors `drains.len()`), for `idle()`.
    pub(crate) active: watch::Sender<usize>,
    /// Cancelled when a shutdown begins: stop claiming.
    pub(crate) stop: CancellationToken,
    /// Cancelled when a shutdown's deadline passes: cancel running handlers
    /// and release their leases. Each attempt's token is a child of it.
    pub(crate) abort: CancellationToken,
    /// Whether the listener of the store's cancellations runs (RT17).
    pub(crate) listening: std::sync::atomic::AtomicBool,
    /// True once the listener's subscription is live (CN5): every cancel
    /// made from then on reaches it. Claims wait for it (RT17).
    pub(crate) cancels_live: watch::Sender<bool>,
    /// Cancelled when this is dropped: ends the listener.
    pub(crate) gone: CancellationToken,
    /// Cancels `gone` on drop.
    pub(crate) _gone_guard: tokio_util::sync::DropGuard,
}

/// A session's drain: `dirty` is set (under the `drains` lock) when new work
/// may have arrived since its last claim, so it never exits past an append.
/// `handoff` holds events an append claimed for it (RT13), with the
/// concurrency permits they run under, until the drain starts them.
pub(crate) struct DrainSlot {
    pub(crate) dirty: bool,
    pub(crate) wake: Arc<Notify>,
    pub(crate) handoff: Vec<Handoff>,
    /// Cancelled attempts `(index, attempt)` not yet seen by the drain
    /// (RT17).
    pub(crate) cancels: Vec<(u64, u32)>,
}

/// Events an append claimed (AC2), on their way to their session's drain:
/// the first under concurrency permits (`permits`), the rest under places
/// of the prefetch (`reserve`), where they wait for a permit (RT13).
pub(crate) struct Handoff {
    pub(crate) events: Vec<StoredEvent>,
    pub(crate) permits: Option<OwnedSemaphorePermit>,
    pub(crate) reserve: Option<OwnedSemaphorePermit>,
}

impl Shared {
    /// `App::state_json`: the snapshot plus the fold of newer events,
    /// written back past `snapshot_every` (RT5).
    pub async fn state_json(&self, session: &str, reducer: &str) -> Result<Value> {
        let fold = self
            .reducers
            .get(reducer)
            .ok_or_else(|| Error::invalid(format!("no reducer named {reducer:?}")))?;
        let read = self.store.read_state(session, reducer).await?;
        let (state, base) = match read.snapshot {
            Some(snapshot) => (snapshot.state, snapshot.index),
            None => (fold.initial()?, 0),
        };
        let folded = read.events.len() as u64;
        let last = read.events.last().map_or(base, |e| e.index);
        let state = fold.fold(state, &read.events)?;
        let every = self.options.snapshot_every;
        if every > 0 && folded >= every {
            let write = SnapshotWrite {
                reducer: reducer.to_owned(),
                index: last,
                state: state.clone(),
            };
            // The state is right either way; a snapshot that cannot be
            // written only costs a longer fold next time.
            if let Err(error) = self.store.put_snapshots(session, vec![write]).await {
                tracing::warn!(session, reducer, %error, "snapshot not written");
            }
        }
        Ok(state)
    }

    /// `App::set_presence`: stamped with the store clock, living
    /// `presence_ttl`.
    pub(crate) async fn set_presence(
        &self,
        ns: &str,
        participant: &str,
        values: BTreeMap<String, Option<Value>>,
    ) -> Result<Option<PresencePatch>> {
        let now = self.store.clock().now_ms();
        let meta = PresenceMeta {
            seen: now,
            at: now,
            ttl_ms: u64::try_from(self.options.presence_ttl.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        };
        self.store.presence_set(ns, participant, values, meta).await
    }

    /// Remembers that claiming in `session` found corrupted data (RT11).
    pub(crate) fn mark_corrupted(&self, session: &str) {
        self.corrupted().insert(session.to_owned());
    }

    pub(crate) fn corrupted(&self) -> MutexGuard<'_, HashSet<String>> {
        // Held for one set operation; a poisoned set is still consistent.
        self.corrupted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn drains(&self) -> MutexGuard<'_, HashMap<String, DrainSlot>> {
        // A panic while holding this lock can only come from a bug in a map
        // operation; the map itself stays consistent, so keep using it.
        self.drains
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The most sessions whose retention counts a process keeps; past it they
/// start over (a session then waits one step longer for its next trim).
pub(crate) const TRACKED: usize = 65_536;

/// What a process knows of the retention of one session it drains.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tracked {
    /// Attempts finished since its last trim.
    pub(crate) count: u64,
    /// When (store clock) it was last trimmed, or first tracked.
    pub(crate) since: a2_core::Millis,
    /// The highest index finished here.
    pub(crate) highest: u64,
    /// The unsettled event its last trim stopped at, once what came before
    /// it was trimmed (0: none): its next trim waits for it to settle.
    pub(crate) held: u64,
}
