//! [`MemoryStore`]: the embedded, in-process store.
//!
//! Everything lives behind one `std::sync::Mutex`, and every operation is
//! one critical section: it validates its input, checks the state, and
//! writes, all before the lock is released, so no reader ever sees half a
//! write and concurrent claimers can never be handed the same attempt (C6).
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
use crate::store::{EventStream, PresenceStream, Store, StoreOptions, WakeupStream};
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
/// let ClaimOutcome::Claimed(events) = claimed else { panic!("expected a claim") };
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
/// assert_eq!(events[0].cause.map(|c| c.index), Some(1));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
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
}

impl Inner {
    /// Takes the lock. A poisoned lock means a panic interrupted a write,
    /// so the state may break its invariants: report the store unavailable
    /// rather than serve it. A closed store is unavailable too.
    fn lock(&self) -> Result<MutexGuard<'_, State>> {
        let state = self
            .state
            .lock()
            .map_err(|_| Error::unavailable("the memory store's state was poisoned by a panic"))?;
        if state.closed {
            return Err(Error::unavailable("the memory store is closed"));
        }
        Ok(state)
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
    feeds: HashMap<String, watch::Sender<u64>>,
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

/// Wakes the feeds of a session after its frontier moved.
fn notify(feeds: &HashMap<String, watch::Sender<u64>>, session: &SessionState) {
    // Most appends have no feed watching: skip hashing the id then.
    if feeds.is_empty() {
        return;
    }
    if let Some(tx) = feeds.get(&*session.id) {
        tx.send_replace(session.frontier());
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
        rows.push(StoredEvent::appended(
            id,
            new,
            &session.id,
            index,
            now,
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
        Self {
            inner: Arc::new(Inner {
                options,
                state: Mutex::new(State::default()),
                wakeups: broadcast::channel(1024).0,
            }),
        }
    }

    fn now(&self) -> Millis {
        self.inner.options.clock.now_ms()
    }

    /// Gives every event its final id (A11), in place: on success every
    /// `id` is `Some` (read it with [`final_id`]). A generated id equal to
    /// another id of the batch is a duplicate like any other (A3).
    ///
    /// Ids are taken in order and the batch stops at the first duplicate, so
    /// a failed batch draws no more ids from the source than it needed.
    fn assign_ids(&self, mut events: Vec<NewEvent>) -> Result<Vec<NewEvent>> {
        /// Up to this many events, comparing with every earlier id beats
        /// building a hash set.
        const SCAN_UP_TO: usize = 16;
        let small = events.len() <= SCAN_UP_TO;
        let mut seen = HashSet::<String>::default();
        for position in 0..events.len() {
            let (earlier, rest) = events.split_at_mut(position);
            let Some(event) = rest.first_mut() else {
                break;
            };
            let id = match event.id.take() {
                Some(id) => id,
                None => self.inner.options.ids.next_id(),
            };
            let repeated = if small {
                earlier.iter().any(|e| final_id(e) == id)
            } else {
                !seen.insert(id.clone())
            };
            if repeated {
                return Err(Error::duplicate(format!(
                    "id {id:?} appears twice in the batch"
                )));
            }
            event.id = Some(id);
        }
        Ok(events)
    }

    fn append_sync(
        &self,
        session_id: &str,
        events: Vec<NewEvent>,
        claim: Option<&AppendClaim>,
    ) -> Result<AppendOutcome> {
        validate::session_id(session_id)?;
        if let Some(claim) = claim {
            validate::append_claim(claim)?;
        }
        let payloads = validate::encode_batch(&events, &self.inner.options.limits, true)?;
        let events = self.assign_ids(events)?;
        let mut guard = self.inner.lock()?;
        let now = self.now();
        // AC1: the lease is checked like a claim's, before anything is written.
        let claim = match claim {
            Some(claim) => {
                let expires_at = validate::claim_expiry(claim.lease, now)?;
                Some((claim, expires_at))
            }
            None => None,
        };
        let State {
            sessions,
            pending,
            feeds,
            ..
        } = &mut *guard;
        // One look-up for every check; the write looks it up once more.
        let current = sessions.get(session_id);
        if events.is_empty() {
            return Ok(AppendOutcome {
                events: Vec::new(),
                has_pending: current.is_some_and(|s| s.has_pending()),
                claimed: Vec::new(),
            });
        }
        // A5 / A6; ids of other sessions are other events (A4).
        let existing: Vec<u64> = match current {
            Some(session) => events
                .iter()
                .filter_map(|e| session.index_of(final_id(e)))
                .collect(),
            None => Vec::new(),
        };
        if let Some(session) = current
            && existing.len() == events.len()
        {
            return retry_rows(session, &events, &existing);
        }
        if !existing.is_empty() {
            return Err(Error::duplicate(format!(
                "{} of the {} ids of the batch already exist",
                existing.len(),
                events.len()
            )));
        }
        // A7.
        for (position, event) in events.iter().enumerate() {
            let Some(cause) = event.cause else {
                continue;
            };
            let Some(rec) = current.and_then(|s| s.get(cause.index)) else {
                return Err(Error::invalid(format!(
                    "event {position}: cause index {} does not exist in session {session_id:?}",
                    cause.index
                )));
            };
            if rec.ev.attempt_count != cause.attempt || rec.ev.work().failed_at.is_some() {
                return Err(Error::superseded(format!(
                    "event {position}: attempt {} of index {} is not the current attempt",
                    cause.attempt, cause.index
                )));
            }
        }
        let session = match sessions.get_mut(session_id) {
            Some(session) => session,
            None => {
                let id: Arc<str> = Arc::from(session_id);
                sessions
                    .entry(id.clone())
                    .or_insert_with(|| SessionState::new(id))
            }
        };
        let first = session.frontier() + 1;
        let mut rows = write_events(session, events, &payloads, None, now);
        let mut claimed = Vec::new();
        if let Some((claim, expires_at)) = claim {
            let limit = validate::effective_limit(claim.limit);
            claimed = session.claim_appended(first, now, &claim.holder, expires_at, limit);
            for &index in &claimed {
                // `first ≤ index`, and the rows start at `first`.
                let at = (index - first) as usize;
                rows[at] = rec_row(session, index)?;
            }
        }
        // AC5: work all claimed by its appender is nobody else's to take;
        // counted only when a wake-up would go out at all.
        if sync_pending(pending, session)
            && self.inner.wakeups.receiver_count() > 0
            && rows.iter().filter(|r| r.is_pending()).count() > claimed.len()
        {
            let _ = self.inner.wakeups.send(session.id.clone());
        }
        notify(feeds, session);
        Ok(AppendOutcome {
            events: rows,
            has_pending: session.has_pending(),
            claimed,
        })
    }

    fn read_sync(&self, session_id: &str, range: ReadRange) -> Result<Vec<StoredEvent>> {
        validate::session_id(session_id)?;
        let state = self.inner.lock()?;
        let Some(session) = state.sessions.get(session_id) else {
            return Ok(Vec::new());
        };
        let through = range.through_index.unwrap_or(u64::MAX);
        session.stored_events(range.after_index, through, usize::MAX)
    }

    fn read_history_sync(&self, session_id: &str, options: HistoryOptions) -> Result<HistoryPage> {
        validate::session_id(session_id)?;
        validate::limit("limit", options.limit)?;
        let state = self.inner.lock()?;
        let Some(session) = state.sessions.get(session_id) else {
            return Ok(HistoryPage {
                events: Vec::new(),
                has_more: false,
            });
        };
        let frontier = session.frontier();
        let through = match options.before_index {
            Some(before) => before.saturating_sub(1).min(frontier),
            None => frontier,
        };
        let limit = validate::effective_limit(options.limit);
        let after = through.saturating_sub(limit as u64);
        let events = session.stored_events(after, through, limit)?;
        Ok(HistoryPage {
            events,
            has_more: after > 0,
        })
    }

    fn claim_sync(&self, request: ClaimRequest) -> Result<ClaimOutcome> {
        validate::claim_request(&request)?;
        let mut guard = self.inner.lock()?;
        let now = self.now();
        let expires_at = validate::claim_expiry(request.lease, now)?;
        let State {
            sessions, pending, ..
        } = &mut *guard;
        let Some(session) = sessions.get_mut(request.session.as_str()) else {
            return Ok(ClaimOutcome::Settled);
        };
        let exclude: HashSet<u64> = request.exclude_indexes.iter().copied().collect();
        let limit = validate::effective_limit(request.limit);
        let outcome = session.claim(now, &request.holder, expires_at, &exclude, limit);
        let _ = sync_pending(pending, session);
        outcome
    }

    fn renew_sync(&self, request: RenewRequest) -> Result<RenewOutcome> {
        validate::renew_request(&request)?;
        let mut state = self.inner.lock()?;
        let now = self.now();
        let expires_at = request.lease.expires_at(now);
        let Some(session) = state.sessions.get_mut(request.session.as_str()) else {
            return Ok(RenewOutcome::default());
        };
        let mut renewed = BTreeSet::new();
        let mut superseded = BTreeSet::new();
        for claim in &request.claims {
            let Some(rec) = session.get(claim.index) else {
                continue;
            };
            let ev = &rec.ev;
            let work = ev.work();
            if ev.attempt_count > claim.attempt {
                superseded.insert(claim.index);
                continue;
            }
            let held = ev.attempt_count == claim.attempt
                && ev.is_pending()
                && work.claim_holder.as_deref() == Some(request.holder.as_str())
                && work.claim_expires_at.is_some_and(|at| at > now);
            if held && expires_at > now {
                session.renew(claim.index, expires_at);
                renewed.insert(claim.index);
            }
        }
        Ok(RenewOutcome {
            renewed: renewed.into_iter().collect(),
            superseded: superseded.into_iter().collect(),
        })
    }

    fn complete_sync(&self, request: CompleteRequest) -> Result<CompleteOutcome> {
        let payloads = validate::encode_complete_request(&request, &self.inner.options.limits)?;
        let events = self.assign_ids(request.events)?;
        let mut guard = self.inner.lock()?;
        let now = self.now();
        let State {
            sessions,
            pending,
            feeds,
            ..
        } = &mut *guard;
        let index = request.index;
        let Some(session) = sessions.get_mut(request.session.as_str()) else {
            return Err(out_of_range(&request.session, index, 0));
        };
        let Some(rec) = session.get(index) else {
            return Err(out_of_range(&request.session, index, session.frontier()));
        };
        let ev = &rec.ev;
        let work = ev.work();
        if ev.processed_at.is_some() {
            // CO3 / CO4.
            if work.processed_by_attempt != Some(request.attempt) {
                return Ok(CompleteOutcome::Superseded);
            }
            let same = work.returned_event_ids.len() == events.len()
                && work
                    .returned_event_ids
                    .iter()
                    .zip(&events)
                    .all(|(a, b)| a == final_id(b));
            if !same {
                return Err(Error::duplicate(format!(
                    "index {index} was completed by attempt {} with other returned ids",
                    request.attempt
                )));
            }
            let mut rows = Vec::with_capacity(events.len());
            for id in &work.returned_event_ids {
                let row = session
                    .index_of(id)
                    .and_then(|i| session.stored(i))
                    .ok_or_else(|| {
                        Error::unavailable(format!("returned id {id:?} is missing from the log"))
                    })??;
                rows.push(row);
            }
            return Ok(CompleteOutcome::Completed { events: rows });
        }
        // CO5.
        if ev.attempt_count != request.attempt
            || work.claim_holder.is_none()
            || work.failed_at.is_some()
            || work.last_failed_attempt == Some(request.attempt)
        {
            return Ok(CompleteOutcome::Superseded);
        }
        // CO6.
        for id in events.iter().map(final_id) {
            if session.index_of(id).is_some() {
                return Err(Error::duplicate(format!(
                    "returned id {id:?} already exists"
                )));
            }
        }
        let returned_ids = events.iter().map(|e| final_id(e).to_owned()).collect();
        session.complete(index, request.attempt, returned_ids, now);
        let cause = Cause {
            index,
            attempt: request.attempt,
            batch_size: request.batch_size,
        };
        let appended = !events.is_empty();
        let rows = write_events(session, events, &payloads, Some(cause), now);
        let _ = sync_pending(pending, session);
        if appended {
            notify(feeds, session);
        }
        Ok(CompleteOutcome::Completed { events: rows })
    }

    fn fail_sync(&self, request: FailRequest) -> Result<FailOutcome> {
        validate::fail_request(&request)?;
        let mut guard = self.inner.lock()?;
        let now = self.now();
        let State {
            sessions, pending, ..
        } = &mut *guard;
        let index = request.index;
        let Some(session) = sessions.get_mut(request.session.as_str()) else {
            return Err(out_of_range(&request.session, index, 0));
        };
        let Some(rec) = session.get(index) else {
            return Err(out_of_range(&request.session, index, session.frontier()));
        };
        let ev = &rec.ev;
        let work = ev.work();
        let outcome = |outcome| FailOutcome {
            outcome,
            failure_count: ev.failure_count,
        };
        // F2.
        if ev.processed_at.is_some() || ev.attempt_count != request.attempt {
            return Ok(outcome(FailKind::Superseded));
        }
        // F3.
        if work.failed_at.is_some() {
            return Ok(outcome(FailKind::DeadLettered));
        }
        if work.claim_holder.is_none() {
            // F4: this attempt already failed (its lease was cleared then);
            // F5: never claimed, or released.
            return Ok(if work.last_failed_attempt == Some(request.attempt) {
                outcome(FailKind::Failed)
            } else {
                outcome(FailKind::Superseded)
            });
        }
        // F6.
        let (dead, failure_count) = session.fail(
            index,
            request.attempt,
            request.error,
            request.max_failures,
            request.retry_at,
            now,
        );
        let _ = sync_pending(pending, session);
        Ok(FailOutcome {
            outcome: if dead {
                FailKind::DeadLettered
            } else {
                FailKind::Failed
            },
            failure_count,
        })
    }

    fn revive_sync(&self, session_id: &str, index: u64) -> Result<ReviveOutcome> {
        validate::session_id(session_id)?;
        let mut guard = self.inner.lock()?;
        let now = self.now();
        let State {
            sessions, pending, ..
        } = &mut *guard;
        // RV1.
        let Some(session) = sessions.get_mut(session_id) else {
            return Err(out_of_range(session_id, index, 0));
        };
        if session.get(index).is_none() {
            return Err(out_of_range(session_id, index, session.frontier()));
        }
        // RV2; RV3 when it is not dead-lettered.
        if !session.revive(index, now) {
            return Ok(ReviveOutcome::NotDeadLettered(rec_row(session, index)?));
        }
        let row = rec_row(session, index)?;
        let _ = sync_pending(pending, session);
        // Announced even when other pending events kept the count above
        // zero: those wait behind this dead letter, and workers that found
        // nothing claimable there (C4) must look again (RV2).
        if self.inner.wakeups.receiver_count() > 0 {
            let _ = self.inner.wakeups.send(session.id.clone());
        }
        Ok(ReviveOutcome::Revived(row))
    }

    fn release_sync(&self, request: ReleaseRequest) -> Result<Vec<u64>> {
        validate::release_request(&request)?;
        let mut state = self.inner.lock()?;
        let now = self.now();
        let Some(session) = state.sessions.get_mut(request.session.as_str()) else {
            return Ok(Vec::new());
        };
        let mut released = BTreeSet::new();
        for claim in &request.claims {
            let Some(rec) = session.get(claim.index) else {
                continue;
            };
            let ev = &rec.ev;
            let work = ev.work();
            let held = ev.attempt_count == claim.attempt
                && ev.is_pending()
                && work.claim_holder.as_deref() == Some(request.holder.as_str())
                && work.claim_expires_at.is_some_and(|at| at > now);
            if held {
                session.release(claim.index);
                released.insert(claim.index);
            }
        }
        Ok(released.into_iter().collect())
    }

    fn pending_sessions_sync(&self, page: PageRequest) -> Result<SessionPage> {
        validate::limit("limit", page.limit)?;
        let state = self.inner.lock()?;
        let start = match &page.cursor {
            Some(cursor) => Bound::Excluded(cursor.as_str()),
            None => Bound::Unbounded,
        };
        let mut iter = state
            .pending
            .range::<str, _>((start, Bound::Unbounded))
            .map(|s| s.to_string());
        let sessions: Vec<String> = iter
            .by_ref()
            .take(validate::effective_limit(page.limit))
            .collect();
        let cursor = match iter.next() {
            Some(_) => sessions.last().cloned(),
            None => None,
        };
        Ok(SessionPage { sessions, cursor })
    }

    fn read_state_sync(&self, session_id: &str, reducer: &str) -> Result<StateRead> {
        validate::session_id(session_id)?;
        validate::name("reducer", reducer)?;
        let state = self.inner.lock()?;
        let snapshot = state
            .snapshots
            .get(session_id)
            .and_then(|m| m.get(reducer))
            .map(|s| Snapshot {
                index: s.index,
                state: s.state.clone(),
            });
        let after = snapshot.as_ref().map_or(0, |s| s.index);
        let events = match state.sessions.get(session_id) {
            Some(session) => session.events(after, u64::MAX, usize::MAX)?,
            None => Vec::new(),
        };
        Ok(StateRead { snapshot, events })
    }

    fn put_snapshots_sync(&self, session_id: &str, snapshots: Vec<SnapshotWrite>) -> Result<()> {
        validate::snapshots(session_id, &snapshots)?;
        let mut state = self.inner.lock()?;
        let now = self.now();
        let frontier = state.sessions.get(session_id).map_or(0, |s| s.frontier());
        if let Some(bad) = snapshots.iter().find(|s| s.index > frontier) {
            return Err(Error::invalid(format!(
                "snapshot of {:?} at index {} is beyond the frontier {frontier}",
                bad.reducer, bad.index
            )));
        }
        if snapshots.is_empty() {
            return Ok(());
        }
        let stored = state.snapshots.entry(session_id.to_owned()).or_default();
        for snapshot in snapshots {
            let newer = stored
                .get(&snapshot.reducer)
                .is_none_or(|s| snapshot.index > s.index);
            if newer {
                stored.insert(
                    snapshot.reducer,
                    SnapshotRec {
                        index: snapshot.index,
                        state: snapshot.state,
                        updated_at: now,
                    },
                );
            }
        }
        Ok(())
    }

    fn presence_set_sync(
        &self,
        ns: &str,
        participant: &str,
        values: BTreeMap<String, Option<Value>>,
        meta: PresenceMeta,
    ) -> Result<Option<PresencePatch>> {
        validate::presence_set(ns, participant, &values, &meta)?;
        let mut state = self.inner.lock()?;
        let now = self.now();
        if values.is_empty() {
            return Ok(None);
        }
        let namespace = state.presence.entry(ns.to_owned()).or_default();
        let patch = namespace.set(participant, values, meta, now);
        if namespace.is_empty() {
            state.presence.remove(ns);
        }
        if let (Some(patch), Some(tx)) = (&patch, state.presence_channels.get(ns)) {
            // An error only means no subscriber is listening right now.
            let _ = tx.send(patch.clone());
        }
        Ok(patch)
    }

    fn presence_read_sync(&self, ns: &str) -> Result<Vec<PresenceEntry>> {
        validate::name("namespace", ns)?;
        let mut state = self.inner.lock()?;
        let now = self.now();
        Ok(read_namespace(&mut state, ns, now))
    }

    fn list_sessions_sync(&self, options: ListSessionsOptions) -> Result<SessionList> {
        validate::limit("limit", options.limit)?;
        let state = self.inner.lock()?;
        let prefix = options.prefix.as_deref().unwrap_or("");
        let start = match options.cursor.as_deref() {
            Some(cursor) if cursor >= prefix => Bound::Excluded(cursor),
            _ => Bound::Included(prefix),
        };
        let mut iter = state
            .sessions
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(id, _)| id.starts_with(prefix))
            .map(|(id, s)| SessionSummary {
                session_id: id.to_string(),
                event_count: s.frontier(),
                pending_count: s.counters.pending_count,
                failed_count: s.counters.failed_count,
                attempt_count: s.counters.attempt_count,
                failure_count: s.counters.failure_count,
                first_event_at: s.counters.first_event_at,
                updated_at: s.counters.updated_at,
            });
        let sessions: Vec<SessionSummary> = iter
            .by_ref()
            .take(validate::effective_limit(options.limit))
            .collect();
        let cursor = match iter.next() {
            Some(_) => sessions.last().map(|s| s.session_id.clone()),
            None => None,
        };
        Ok(SessionList { sessions, cursor })
    }

    fn read_events_sync(&self, session_id: &str, options: ReadEventsOptions) -> Result<EventsPage> {
        validate::session_id(session_id)?;
        validate::limit("limit", options.limit)?;
        let state = self.inner.lock()?;
        let Some(session) = state.sessions.get(session_id) else {
            return Ok(EventsPage {
                events: Vec::new(),
                through_index: 0,
            });
        };
        let frontier = session.frontier();
        let through = options.through_index.unwrap_or(frontier).min(frontier);
        let events = session.stored_events(
            options.after_index,
            through,
            validate::effective_limit(options.limit),
        )?;
        Ok(EventsPage {
            events,
            through_index: through,
        })
    }

    fn list_snapshots_sync(&self, session_id: &str) -> Result<Vec<SnapshotInfo>> {
        validate::session_id(session_id)?;
        let state = self.inner.lock()?;
        Ok(state
            .snapshots
            .get(session_id)
            .map(|m| {
                m.iter()
                    .map(|(reducer, s)| SnapshotInfo {
                        reducer: reducer.clone(),
                        index: s.index,
                        updated_at: s.updated_at,
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    fn clear_sync(&self, session_id: &str) -> Result<()> {
        validate::session_id(session_id)?;
        let mut guard = self.inner.lock()?;
        let state = &mut *guard;
        state.sessions.remove(session_id);
        state.pending.remove(session_id);
        state.snapshots.remove(session_id);
        state.presence.remove(session_id);
        if let Some(tx) = state.feeds.get(session_id) {
            tx.send_replace(0);
        }
        Ok(())
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

/// The id of an event that went through `MemoryStore::assign_ids`, which
/// set every id; the empty default never shows.
fn final_id(event: &NewEvent) -> &str {
    event.id.as_deref().unwrap_or_default()
}

fn out_of_range(session: &str, index: u64, frontier: u64) -> Error {
    Error::invalid(format!(
        "index {index} is outside 1..={frontier} of session {session:?}"
    ))
}

/// The row at `index`, which the caller found under the lock it holds.
fn rec_row(session: &SessionState, index: u64) -> Result<StoredEvent> {
    session
        .stored(index)
        .ok_or_else(|| Error::unavailable(format!("event {index} vanished under the lock")))?
}

/// A5: every id exists in this session; the batch is a retry if each event
/// has the stored type and payload. Returns the stored rows by index.
fn retry_rows(
    session: &SessionState,
    events: &[NewEvent],
    existing: &[u64],
) -> Result<AppendOutcome> {
    let mut rows = Vec::with_capacity(events.len());
    for (event, &index) in events.iter().zip(existing) {
        let id = final_id(event);
        let gone = || Error::unavailable("the id index names an index that is gone");
        let rec = session.get(index).ok_or_else(gone)?;
        // The payloads compare as values, as they always have (the texts
        // of 0.0 and -0.0 differ, the values do not).
        if *rec.ev.event_type != *event.event_type
            || session.payload(index).ok_or_else(gone)?? != event.payload
        {
            return Err(Error::duplicate(format!(
                "id {id:?} exists with another type or payload"
            )));
        }
        rows.push(session.stored(index).ok_or_else(gone)??);
    }
    rows.sort_by_key(|r| r.event.index);
    Ok(AppendOutcome {
        events: rows,
        has_pending: session.has_pending(),
        claimed: Vec::new(),
    })
}

#[async_trait]
impl Store for MemoryStore {
    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.options.clock.clone()
    }

    async fn append(&self, session: &str, events: Vec<NewEvent>) -> Result<AppendOutcome> {
        self.append_sync(session, events, None)
    }

    async fn append_and_claim(
        &self,
        session: &str,
        events: Vec<NewEvent>,
        claim: AppendClaim,
    ) -> Result<AppendOutcome> {
        self.append_sync(session, events, Some(&claim))
    }

    async fn read(&self, session: &str, range: ReadRange) -> Result<Vec<StoredEvent>> {
        self.read_sync(session, range)
    }

    async fn read_history(&self, session: &str, options: HistoryOptions) -> Result<HistoryPage> {
        self.read_history_sync(session, options)
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

    async fn pending_sessions(&self, page: PageRequest) -> Result<SessionPage> {
        self.pending_sessions_sync(page)
    }

    async fn read_state(&self, session: &str, reducer: &str) -> Result<StateRead> {
        self.read_state_sync(session, reducer)
    }

    async fn put_snapshots(&self, session: &str, snapshots: Vec<SnapshotWrite>) -> Result<()> {
        self.put_snapshots_sync(session, snapshots)
    }

    async fn presence_set(
        &self,
        ns: &str,
        participant: &str,
        values: BTreeMap<String, Option<Value>>,
        meta: PresenceMeta,
    ) -> Result<Option<PresencePatch>> {
        self.presence_set_sync(ns, participant, values, meta)
    }

    async fn presence_read(&self, ns: &str) -> Result<Vec<PresenceEntry>> {
        self.presence_read_sync(ns)
    }

    async fn presence_subscribe(&self, ns: &str) -> Result<PresenceStream> {
        feed::subscribe(&self.inner, ns)
    }

    fn stream(&self, session: &str, after_index: u64) -> EventStream {
        feed::stream(&self.inner, session, after_index)
    }

    fn pending_wakeups(&self) -> WakeupStream {
        // A wake-up is a hint (PS2): one missed because this receiver fell
        // behind is covered by the worker's periodic listing.
        let receiver = self.inner.wakeups.subscribe();
        Box::pin(futures::stream::unfold(
            receiver,
            |mut receiver| async move {
                loop {
                    match receiver.recv().await {
                        Ok(session) => return Some((Ok(session.to_string()), receiver)),
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            },
        ))
    }

    async fn list_sessions(&self, options: ListSessionsOptions) -> Result<SessionList> {
        self.list_sessions_sync(options)
    }

    async fn read_events(&self, session: &str, options: ReadEventsOptions) -> Result<EventsPage> {
        self.read_events_sync(session, options)
    }

    async fn list_snapshots(&self, session: &str) -> Result<Vec<SnapshotInfo>> {
        self.list_snapshots_sync(session)
    }

    async fn clear(&self, session: &str) -> Result<()> {
        self.clear_sync(session)
    }

    async fn close(&self) {
        self.close_sync();
    }
}

#[cfg(test)]
mod tests;
