//! [`MemoryStore`]: the embedded, in-process store.
//!
//! Everything lives behind one `std::sync::Mutex`, and every operation is
//! one critical section: it validates its input, checks the state, and
//! writes, all before the lock is released, so no reader ever sees half a
//! write and concurrent claimers can never be handed the same attempt (C6).
//!
//! Each operation is a file of `ops/`: under the lock it loads what its
//! rule in [`crate::rules`] needs, calls it, and writes what it decides;
//! `session` keeps a session's structures (`session/work.rs`: what claims,
//! completions, failures and revives do to them).
//!
//! # Why a `std` mutex and not a `tokio` one
//! No operation awaits while holding the lock: each is a synchronous
//! function over in-memory data that never waits for anything. A `std`
//! mutex is then cheaper than tokio's and works from any runtime flavour
//! (or none, as in `Drop`); a tokio mutex is only needed when a guard must
//! live across an `.await`, which never happens here.
//!
//! # Cost
//! Writes and claims cost O(batch + log n) (amortized for claims); no
//! operation scans a whole session or every session:
//! - claiming reads maintained ready sets (see `session`'s docs);
//! - `list_sessions` reads counters kept per session in a `BTreeMap` by id;
//! - `pending_sessions` reads a `BTreeSet` of sessions with pending events;
//! - a per-session id index (`id → index`) serves A4, A5 and CO6: an id is
//!   unique within its session, so no index spans sessions.
//!
//! Reads cost what they return. `presence_read` walks its namespace
//! (it returns all of it anyway). Live feeds are described in `feed`.
//!
//! A stored event is kept as a `row::Row`, its payload as the compact JSON
//! text validation wrote: an append hands the caller's own payload back
//! instead of copying it, and a read parses the text (see `row`). A session
//! keeps its ids and payload texts packed in chunks (see `texts`).
//!
//! # Choices where the contract leaves room
//! - A claim with [`Lease::ExpiresAt`] at or before the store's now is
//!   `InvalidArgument`: such a lease would be expired on arrival. A renewal
//!   with such a lease is not an error; it renews nothing (RN2).
//! - Excluded events count for neither the claim nor C3's `Busy` time: a
//!   claim that finds only excluded events ready is `Settled` (C4), even
//!   when some of them are leased.
//! - A claim consumes a retry time (F6): the claimed row's `retry_at` is
//!   cleared.
//! - A released attempt (RL1) can no longer be completed or failed: like an
//!   attempt whose lease was taken over, it is `Superseded`.
//! - `fail_attempt` requires `max_failures ≥ 1`.
//! - `updated_at` (I1) is the latest store time at which an event of the
//!   session was appended, claimed, completed, failed or revived.
//! - An unknown session reads as empty everywhere; `complete_attempt` and
//!   `fail_attempt` on it report the index as out of range.
//! - A presence entry already expired counts as absent in last-writer-wins.

mod feed;
mod ops;
mod presence;
mod row;
mod runs;
mod session;
mod texts;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use crate::clock::{Clock, Millis};
use crate::error::{Error, Result};
use crate::model::*;
use crate::rules;
use crate::store::{CancelStream, EventStream, PresenceStream, Store, StoreOptions, WakeupStream};
use crate::validate;

use presence::Namespace;
use session::SessionState;

/// The hash maps of the store. Keys are caller-chosen strings (event ids,
/// session ids, namespaces), so the hasher is seeded at random per map to
/// keep collisions unpredictable; foldhash is that, and far cheaper per
/// key than the standard SipHash.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// A hash set with the hasher of [`HashMap`].
type HashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

/// The in-memory store: every [`Store`] operation on data held in this
/// process, with the same outcomes as every other backend.
///
/// Cloning is cheap and clones share the data, like two connections to one
/// server. The store is exact under concurrency (each operation is one
/// critical section) and fast (no operation scans a whole session); it is
/// not durable: the data goes when the last clone is dropped.
///
/// ```
/// use a2_core::{ClaimOutcome, ClaimRequest, CompleteOutcome, CompleteRequest, Lease,
///     MemoryStore, NewEvent, Store, StoreOptions};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), a2_core::Error> {
/// let store = MemoryStore::new(StoreOptions::default());
///
/// // Append an event; it is pending until a handler processes it.
/// let appended = store.append("chat-1", vec![NewEvent::new("user.message", json!({"text": "hi"}))]).await?;
/// assert_eq!(appended.events[0].event.index, 1);
/// assert!(appended.has_pending);
///
/// // Claim it for 30 seconds.
/// let claimed = store
///     .claim_available(ClaimRequest {
///         session: "chat-1".into(),
///         holder: "worker-1".into(),
///         lease: Lease::Ttl(30_000),
///         exclude_indexes: vec![],
///         limit: 10,
///     })
///     .await?;
/// let ClaimOutcome::Claimed { events, .. } = claimed else { panic!("expected a claim") };
/// assert_eq!(events[0].attempt_count, 1);
///
/// // Complete attempt 1, appending the reply it produced.
/// let done = store
///     .complete_attempt(CompleteRequest {
///         session: "chat-1".into(),
///         index: 1,
///         attempt: 1,
///         events: vec![NewEvent::new("bot.reply", json!({"text": "hello"})).settled()],
///         batch_size: None,
///     })
///     .await?;
/// let CompleteOutcome::Completed { events } = done else { panic!("expected completion") };
/// assert_eq!(events[0].event.index, 2);
/// assert_eq!(events[0].event.cause.map(|c| c.index), Some(1));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
    feeds: Arc<crate::feed::Feeds>,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

struct Inner {
    options: StoreOptions,
    state: Mutex<State>,
    /// Sessions whose pending count rose from zero (PS2).
    wakeups: broadcast::Sender<Arc<str>>,
    /// Attempts cancelled while leased (CN5).
    cancels: broadcast::Sender<Cancellation>,
}

impl Inner {
    /// Takes the lock. A poisoned lock means a panic interrupted a write,
    /// so the state may break its invariants: that is `Corrupted` (a bug to
    /// report, which no retry can mend), never served. A closed store is
    /// `StoreClosed`.
    fn lock(&self) -> Result<MutexGuard<'_, State>> {
        let state = self.state.lock().map_err(|_| {
            Error::corrupted(
                "the memory store's state was poisoned by a panic during a write",
                None,
                None,
            )
        })?;
        if state.closed {
            return Err(Error::closed("the memory store is closed"));
        }
        // EX3: every call finds expired sessions gone.
        let mut state = state;
        if !state.deadlines.is_empty() {
            state.expire(self.options.clock.now_ms());
        }
        Ok(state)
    }

    /// [`Inner::lock`] for an operation on `session_id`, which must be a
    /// session id: checked first, so bad input never waits for the lock.
    fn lock_for(&self, session_id: &str) -> Result<MutexGuard<'_, State>> {
        validate::session_id(session_id)?;
        self.lock()
    }

    /// [`Inner::lock`] for a page of at most `limit` items, which must be
    /// at least 1: checked first.
    fn lock_paged(&self, limit: usize) -> Result<MutexGuard<'_, State>> {
        validate::limit("limit", limit)?;
        self.lock()
    }
}

/// A stored snapshot (S2, I3).
#[derive(Debug, Clone)]
struct SnapshotRec {
    index: u64,
    state: Value,
    updated_at: Millis,
}

#[derive(Default)]
struct State {
    closed: bool,
    /// Every session with at least one event, by id (I1).
    sessions: BTreeMap<Arc<str>, SessionState>,
    /// Sessions with a pending event (PS1).
    pending: BTreeSet<Arc<str>>,
    /// Snapshots by session, then reducer name.
    snapshots: HashMap<String, BTreeMap<String, SnapshotRec>>,
    /// Presence namespaces.
    presence: HashMap<String, Namespace>,
    /// Namespaces with subscribers → their broadcast channel.
    presence_channels: HashMap<String, broadcast::Sender<PresencePatch>>,
    /// Sessions with open feeds → their frontier channel.
    feeds: HashMap<String, Arc<watch::Sender<u64>>>,
    /// Sessions that may expire, by a deadline at or before their own
    /// (EX5): a sliding ttl moves a session's deadline at every write, and
    /// its entry here moves only when it comes due.
    deadlines: BTreeSet<(Millis, Arc<str>)>,
}

impl State {
    /// EX3, EX5: removes every session whose deadline passed, as `clear`
    /// would (presence aside), and wakes its feeds. Each entry of
    /// `deadlines` comes due once per move, so this is amortized O(1) per
    /// write; a session whose deadline moved on gets its entry back at it.
    fn expire(&mut self, now: Millis) {
        while let Some((at, _)) = self.deadlines.first()
            && *at <= now
        {
            let Some((_, id)) = self.deadlines.pop_first() else {
                break;
            };
            let Some(deadline) = self.sessions.get(&id).and_then(SessionState::deadline) else {
                continue;
            };
            if deadline > now {
                self.deadlines.insert((deadline, id));
                continue;
            }
            self.remove(&id);
        }
    }

    /// Deletes a session entirely (I4, EX3), waking its feeds.
    fn remove(&mut self, session_id: &str) {
        self.sessions.remove(session_id);
        self.pending.remove(session_id);
        self.snapshots.remove(session_id);
        if let Some(tx) = self.feeds.get(session_id) {
            tx.send_replace(0);
        }
    }

    /// Gives `session` the expiry `expiry` (EX2), keeping it in
    /// `deadlines`.
    fn set_expiry(&mut self, session_id: &str, expiry: Option<Expiry>) {
        let Some(session) = self.sessions.get_mut(session_id) else {
            return;
        };
        session.expiry = expiry.filter(|e| !e.is_none());
        if let Some(deadline) = session.deadline() {
            self.deadlines.insert((deadline, session.id.clone()));
        }
    }
}

/// Keeps the pending-sessions set in step with one session's counters.
/// Keeps the set of sessions with pending events (PS1); true when the
/// session just joined it (its pending count rose from zero, PS2).
fn sync_pending(pending: &mut BTreeSet<Arc<str>>, session: &SessionState) -> bool {
    if session.has_pending() {
        if !pending.contains(&*session.id) {
            pending.insert(session.id.clone());
            return true;
        }
    } else {
        pending.remove(&*session.id);
    }
    false
}

/// The wake-up of a session's feeds after its frontier moved, sent once
/// the store lock is released (see `feed`): a feed woken while the lock is
/// held would only wait for it, on a thread of its own.
#[must_use = "a feed wake-up does nothing until sent"]
#[derive(Default)]
struct FeedWake(Option<(Arc<watch::Sender<u64>>, u64)>);

impl FeedWake {
    /// The wake-up of `session`'s feeds, if it has any.
    fn of(feeds: &HashMap<String, Arc<watch::Sender<u64>>>, session: &SessionState) -> Self {
        // Most appends have no feed watching: skip hashing the id then.
        if feeds.is_empty() {
            return Self(None);
        }
        Self(
            feeds
                .get(&*session.id)
                .map(|tx| (tx.clone(), session.frontier())),
        )
    }

    /// Wakes the feeds; call with the store lock released.
    fn send(self) {
        if let Some((tx, frontier)) = self.0 {
            tx.send_replace(frontier);
        }
    }
}

/// Appends rows for already-validated events with their final ids and
/// their payloads' texts (A1, A8, A9, A11, CO2); the session indexes their
/// ids. Returns the stored events, which take the events' own fields.
fn write_events(
    session: &mut SessionState,
    events: Vec<NewEvent>,
    payloads: &validate::Payloads,
    cause: Option<Cause>,
    now: Millis,
) -> Vec<StoredEvent> {
    let mut rows = Vec::with_capacity(events.len());
    for (position, mut new) in events.into_iter().enumerate() {
        // `assign_ids` gave every event its id; the default never shows.
        let id = new.id.take().unwrap_or_default();
        let index = session.frontier() + 1;
        session.append(&id, &new, payloads.get(position), now, cause);
        let due = crate::rules::delay::due(&new, now);
        rows.push(StoredEvent::appended(
            id,
            new,
            &session.id,
            index,
            now,
            due,
            cause,
        ));
    }
    rows
}

/// P3 on the state: live entries of `ns`, pruning expired ones and the
/// namespace itself once empty.
fn read_namespace(state: &mut State, ns: &str, now: Millis) -> Vec<PresenceEntry> {
    let Some(namespace) = state.presence.get_mut(ns) else {
        return Vec::new();
    };
    let entries = namespace.read(now);
    if namespace.is_empty() {
        state.presence.remove(ns);
    }
    entries
}

impl MemoryStore {
    /// An empty store with these options (clock, id source, limits).
    pub fn new(options: StoreOptions) -> Self {
        let inner = Arc::new(Inner {
            options: options.instance(),
            state: Mutex::new(State::default()),
            wakeups: broadcast::channel(1024).0,
            cancels: broadcast::channel(1024).0,
        });
        let feeds = crate::feed::Feeds::new(Arc::new(feed::Source(inner.clone())));
        Self {
            inner,
            feeds: Arc::new(feeds),
        }
    }

    fn now(&self) -> Millis {
        self.inner.options.clock.now_ms()
    }

    /// Test support for E1 (feature `testing`): leaves the stored entry of
    /// `index` in `session` undecodable, as a half-written entry would be,
    /// so that every read that meets it is `Corrupted`. Returns whether
    /// there was such an entry. Never enable the feature in an application.
    #[cfg(feature = "testing")]
    pub fn damage(&self, session: &str, index: u64) -> bool {
        let mut state = match self.inner.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        state
            .sessions
            .get_mut(session)
            .is_some_and(|s| s.damage(index))
    }

    /// Gives every event its final id (A11, A3: [`rules::append::assign_ids`]).
    fn assign_ids(&self, mut events: Vec<NewEvent>) -> Result<Vec<NewEvent>> {
        rules::append::assign_ids(&mut events, self.inner.options.ids.as_ref())?;
        Ok(events)
    }

    fn close_sync(&self) {
        // Closing must work even after a panic poisoned the lock.
        let mut state = match self.inner.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        state.closed = true;
        // Dropping the senders wakes every feed and subscription, which then
        // find the store closed.
        state.feeds.clear();
        state.presence_channels.clear();
    }
}

/// The row at `index`, which the caller found under the lock it holds.
fn rec_row(session: &SessionState, index: u64) -> Result<StoredEvent> {
    session.stored(index).ok_or_else(|| {
        Error::corrupted(
            format!("event {index} vanished under the lock"),
            Some(&session.id),
            Some(index),
        )
    })?
}

#[async_trait]
impl Store for MemoryStore {
    async fn append_apply(&self, request: AppendRequest<'_>) -> Result<AppendOutcome> {
        let options = request.options;
        self.append_sync(
            request.session,
            request.events,
            options.claim.as_ref(),
            options.expiry,
            options.if_frontier,
            options.close,
        )
    }

    async fn set_expiry(&self, session: &str, expiry: Expiry) -> Result<ExpiryOutcome> {
        self.set_expiry_sync(session, expiry)
    }

    async fn read(&self, session: &str, range: ReadRange) -> Result<Vec<StoredEvent>> {
        self.read_sync(session, range)
    }

    async fn read_history(&self, session: &str, options: HistoryOptions) -> Result<HistoryPage> {
        self.read_page(session, options.limit, HistoryPage::empty, |s| {
            ops::read::history(s, &options)
        })
    }

    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimOutcome> {
        self.claim_sync(request)
    }

    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewOutcome> {
        self.renew_sync(request)
    }

    async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteOutcome> {
        self.complete_sync(request)
    }

    async fn fail_attempt(&self, request: FailRequest) -> Result<FailOutcome> {
        self.fail_sync(request)
    }

    async fn release_claims(&self, request: ReleaseRequest) -> Result<Vec<u64>> {
        self.release_sync(request)
    }

    async fn revive(&self, session: &str, index: u64) -> Result<ReviveOutcome> {
        self.revive_sync(session, index)
    }

    async fn cancel_apply(&self, request: CancelRequest<'_>) -> Result<CancelOutcome> {
        self.cancel_sync(request)
    }

    async fn pending_sessions(&self, page: PageRequest) -> Result<SessionPage> {
        self.pending_sessions_sync(page)
    }

    async fn read_state(&self, session: &str, reducer: &str) -> Result<StateRead> {
        self.read_state_sync(session, reducer)
    }

    async fn put_snapshots(&self, session: &str, snapshots: Vec<SnapshotWrite>) -> Result<()> {
        self.put_snapshots_sync(session, snapshots)
    }

    async fn presence_apply(&self, write: PresenceRequest<'_>) -> Result<Option<PresencePatch>> {
        self.presence_apply_sync(write)
    }

    async fn presence_read(&self, ns: &str) -> Result<Vec<PresenceEntry>> {
        self.presence_read_sync(ns)
    }

    async fn presence_subscribe(&self, ns: &str) -> Result<PresenceStream> {
        feed::subscribe(&self.inner, ns)
    }

    /// ST7: the feeds of a session share one reader (`a2_core::feed`).
    fn stream(&self, session: &str, after_index: u64) -> EventStream {
        self.feeds.follow(session, after_index)
    }

    fn feed_stats(&self) -> crate::feed::FeedStats {
        self.feeds.stats()
    }

    fn session_followers(&self, session: &str) -> usize {
        self.feeds.followers(session)
    }

    /// PS2: live as soon as the receiver subscribed, within this call.
    async fn pending_wakeups(&self) -> Result<WakeupStream> {
        // A wake-up is a hint (PS2): one missed because this receiver fell
        // behind is covered by the worker's periodic listing.
        let receiver = {
            let _open = self.inner.lock()?;
            self.inner.wakeups.subscribe()
        };
        Ok(Box::pin(futures::StreamExt::map(
            crate::feed::broadcast_stream(receiver),
            |woken| woken.map(|session| session.to_string()),
        )))
    }

    fn pushes_wakeups(&self) -> bool {
        true
    }

    /// CN5: live as soon as the receiver subscribed, within this call.
    async fn cancellations(&self) -> Result<CancelStream> {
        // A hint like a wake-up (CN5): one missed by a receiver that fell
        // behind is found at the worker's next renewal (RN1).
        let receiver = {
            let _open = self.inner.lock()?;
            self.inner.cancels.subscribe()
        };
        Ok(crate::feed::broadcast_stream(receiver))
    }

    async fn list_sessions(&self, options: ListSessionsOptions) -> Result<SessionList> {
        self.list_sessions_sync(options)
    }

    async fn read_events(&self, session: &str, options: ReadEventsOptions) -> Result<EventsPage> {
        self.read_page(session, options.limit, EventsPage::empty, |s| {
            ops::read::events_page(s, &options)
        })
    }

    async fn list_snapshots(&self, session: &str) -> Result<Vec<SnapshotInfo>> {
        self.list_snapshots_sync(session)
    }

    async fn close_session(&self, session: &str) -> Result<CloseOutcome> {
        self.close_session_sync(session)
    }

    async fn fork(&self, source: &str, at_index: u64, target: &str) -> Result<ForkOutcome> {
        self.fork_sync(source, at_index, target)
    }

    async fn trim(&self, session: &str, through_index: u64) -> Result<TrimOutcome> {
        self.trim_sync(session, through_index)
    }

    async fn clear(&self, session: &str) -> Result<()> {
        self.clear_sync(session)
    }

    async fn close(&self) {
        self.close_sync();
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.options.clock.clone()
    }
}

#[cfg(test)]
mod tests;
