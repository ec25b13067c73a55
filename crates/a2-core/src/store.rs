//! The [`Store`] trait: the contract of SPEC §2–§7 that every backend keeps.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::Value;

use crate::clock::{Clock, IdSource, SystemClock, TimeOrderedIds};
use crate::error::Result;
use crate::model::*;
use crate::validate::Limits;

/// A live feed of a session's events (§6).
pub type EventStream = BoxStream<'static, Result<Event>>;

/// A live feed of a presence namespace's patches (P4).
pub type PresenceStream = BoxStream<'static, Result<PresencePatch>>;

/// Ids of sessions that gained pending work (PS2).
pub type WakeupStream = BoxStream<'static, Result<String>>;

/// Attempts cancelled while leased (CN5).
pub type CancelStream = BoxStream<'static, Result<Cancellation>>;

/// What every store is built with: the injected clock and id source, and the
/// limits of A12. `StoreOptions::default()` uses the wall clock, random ids
/// and the default limits; the `with_` setters replace them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// The store clock: `created_at`, leases, expiries all come from it.
    pub clock: Arc<dyn Clock>,
    /// Where ids of events appended without one come from.
    pub ids: Arc<dyn IdSource>,
    /// Batch and payload limits.
    pub limits: Limits,
    /// The expiry of a session created without one (EX2); `None` keeps
    /// such sessions until they are cleared.
    pub default_expiry: Option<crate::Expiry>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            ids: Arc::new(TimeOrderedIds),
            limits: Limits::default(),
            default_expiry: None,
        }
    }
}

impl StoreOptions {
    /// Replaces the clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Replaces the id source.
    pub fn with_ids(mut self, ids: Arc<dyn IdSource>) -> Self {
        self.ids = ids;
        self
    }

    /// Replaces the limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The options a store instance keeps: its clock read through a
    /// [`crate::MonotonicClock`] of its own, so that the instance never
    /// reads time backward (EX3). Every store calls this as it opens.
    pub fn instance(mut self) -> Self {
        self.clock = Arc::new(crate::MonotonicClock::new(self.clock));
        self
    }

    /// Gives every session created without an expiry this one (EX2).
    pub fn with_default_expiry(mut self, expiry: crate::Expiry) -> Self {
        self.default_expiry = (!expiry.is_none()).then_some(expiry);
        self
    }
}

/// One backend holding many sessions. Usable as `Arc<dyn Store>`.
///
/// Every method that writes is atomic: it applies entirely or not at all, and
/// bad input (an [`crate::Error::InvalidArgument`]) writes nothing. Session
/// ids, reducer names, lanes and presence names are arbitrary non-empty UTF-8
/// strings; no two distinct names ever share storage.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Appends a batch to a session (A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12).
    ///
    /// The batch gets indexes frontier+1 … frontier+n, all or none (A1). An
    /// empty batch writes nothing and reports `has_pending` (A2). Ids are
    /// unique within a session only: an id of another session is another
    /// event (A4). Ids repeated in the batch (A3) or present in this session
    /// for only part of the batch (A6) fail with `PartialDuplicateBatch`; a batch whose
    /// ids all exist in this session with the same type and payload is a retry
    /// and returns the original rows in index order (A5), else
    /// `PartialDuplicateBatch`. An event with a `cause` must name an existing
    /// index (`InvalidArgument`) whose latest attempt is `cause.attempt` and
    /// which is not dead-lettered (`SupersededAttempt`) (A7). Settled events
    /// are processed at append (A8); the others become pending (A9). Missing
    /// ids come from the id source, `created_at` from the clock (A11); limits
    /// are checked first (A12).
    async fn append(&self, session: &str, events: Vec<NewEvent>) -> Result<AppendOutcome> {
        self.append_with(session, events, AppendOptions::new())
            .await
    }

    /// Appends like [`Store::append`] and, in the same atomic step, leases
    /// the appended events that are ready at once to `claim.holder`
    /// (AC1, AC2, AC3, AC4, AC5).
    ///
    /// In index order and up to `claim.limit`, every appended event that is
    /// pending and lane-less, or the first pending event of its lane, is
    /// claimed as C2 claims it: attempt 1, `first_claimed_at` and
    /// `last_claimed_at` now, the holder and the expiry set (AC2). Earlier
    /// events of the session are left to [`Store::claim_available`]. A retry
    /// (A5) or an empty batch claims nothing (AC3); a limit of 0 is a plain
    /// append (AC4). An append whose every new pending event is claimed
    /// announces nothing on [`Store::pending_wakeups`] (AC5).
    async fn append_and_claim(
        &self,
        session: &str,
        events: Vec<NewEvent>,
        claim: AppendClaim,
    ) -> Result<AppendOutcome> {
        self.append_with(session, events, AppendOptions::new().claim(claim))
            .await
    }

    /// Appends like [`Store::append`] — or, with `options.claim`, like
    /// [`Store::append_and_claim`] — and sets the session's expiry to
    /// `options.expiry` in the same atomic step (EX1, EX2): on the append
    /// that creates the session or a later one. An empty batch or a replay
    /// sets nothing. A bad expiry is `InvalidArgument`, nothing written.
    ///
    /// Checks what needs no store first
    /// ([`crate::validate::append_request`]), then hands the append to
    /// [`Store::append_apply`].
    async fn append_with(
        &self,
        session: &str,
        events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendOutcome> {
        let request = crate::validate::append_request(session, events, options)?;
        self.append_apply(request).await
    }

    /// The store's half of [`Store::append_with`]: appends as it describes,
    /// given a request whose session id, claim and close passed
    /// [`crate::validate::append_request`]; the batch's limits (A12), the
    /// expiry and the due times are the store's to check. Call
    /// `append_with`, which validates first.
    async fn append_apply(&self, request: AppendRequest<'_>) -> Result<AppendOutcome>;

    /// Replaces a session's expiry (EX1, EX2) and answers its new deadline;
    /// [`Expiry::none`] keeps it until cleared. A session without events is
    /// `InvalidArgument`. At its deadline the session is gone as after
    /// [`Store::clear`] (EX3), and its feeds end with `SessionExpired`
    /// (EX4).
    async fn set_expiry(&self, session: &str, expiry: Expiry) -> Result<ExpiryOutcome>;

    /// Every row with `after_index < index ≤ min(through_index, frontier)`, in
    /// index order, contiguous; an unknown session reads as `[]` (R1).
    async fn read(&self, session: &str, range: ReadRange) -> Result<Vec<StoredEvent>>;

    /// The newest `limit` events before `before_index` (default: after the
    /// frontier), in index order, and whether older ones exist (R2).
    async fn read_history(&self, session: &str, options: HistoryOptions) -> Result<HistoryPage>;

    /// Leases ready events to a holder (C1, C2, C3, C4, C5, C6).
    ///
    /// `Settled` when nothing is pending (C1). Else claims, in index order and
    /// up to `limit`, every ready, non-excluded event whose lease is absent or
    /// expired and whose retry time has come: `attempt_count += 1`,
    /// `first_claimed_at` set once, `last_claimed_at = now`, holder and expiry
    /// set (C2). With nothing claimable but ready events leased or waiting for
    /// a retry time, `Busy` with the earliest such time (C3); otherwise
    /// `Settled` (C4). An expired lease can be claimed by anyone (C5). No
    /// `(index, attempt)` is ever handed out twice (C6).
    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimOutcome>;

    /// Extends leases still held (RN1, RN2, RN3): `superseded` lists claims a newer
    /// attempt replaced; `renewed` those whose lease is this holder's,
    /// unexpired, on an unsettled event, and whose new expiry is in the
    /// future. Others appear in neither list. Both lists ascend.
    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewOutcome>;

    /// Completes an attempt (CO1, CO2, CO3, CO4, CO5, CO6).
    ///
    /// An index outside 1…frontier is `InvalidArgument` (CO1). Completing the
    /// current attempt (not failed, not dead-lettered; an expired lease counts
    /// while no newer claim exists) marks the event processed, clears its
    /// lease, advances its lane, and appends the returned events with
    /// `cause = {index, attempt}` in one step (CO2). The same completion again
    /// returns the original rows (CO3). Processed by another attempt, or a
    /// newer attempt exists, or this attempt failed, or the event is
    /// dead-lettered or was never claimed: `Superseded` (CO4, CO5); processed by
    /// this attempt with other returned ids: `PartialDuplicateBatch` (CO4). A
    /// returned id that exists in this session is `PartialDuplicateBatch`; returned
    /// events may not set `cause` (CO6).
    async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteOutcome>;

    /// Records a failed attempt (F1, F2, F3, F4, F5, F6).
    ///
    /// An index outside 1…frontier is `InvalidArgument` (F1). Processed, or
    /// not the current attempt, or never claimed: `Superseded` (F2, F5).
    /// Dead-lettered: `DeadLettered` (F3). This attempt already failed:
    /// `Failed`, count unchanged (F4). Otherwise `failure_count += 1`, the
    /// error and times are recorded, the lease is cleared, and the event is
    /// dead-lettered once `failure_count ≥ max_failures`, else ready again at
    /// once or from `retry_at` (F6).
    async fn fail_attempt(&self, request: FailRequest) -> Result<FailOutcome>;

    /// Makes a dead-lettered event pending again (RV1, RV2, RV3), in one atomic
    /// step.
    ///
    /// An index outside 1…frontier is `InvalidArgument` (RV1). A
    /// dead-lettered event gets `failed_at` cleared and `failure_count`
    /// reset to 0, and is ready at once (no lease, no retry time); it still
    /// heads its lane, so the lane moves again, in order. `attempt_count`
    /// keeps counting: its next claim is a new attempt and every earlier
    /// one stays superseded. The session's counters follow (I1); it is
    /// listed by [`Store::pending_sessions`] and announced to
    /// [`Store::pending_wakeups`], even when events blocked behind the dead
    /// letter kept its pending count above zero (RV2). Any other event is
    /// `NotDeadLettered` with nothing written, so of several concurrent or
    /// repeated revives of one dead letter exactly one revives it (RV3).
    async fn revive(&self, session: &str, index: u64) -> Result<ReviveOutcome>;

    /// Cancels an event (CN1, CN2, CN3, CN4), in one atomic step.
    ///
    /// A pending event (waiting, leased, delayed, or waiting for a retry)
    /// or a dead-lettered one is settled as cancelled: `cancelled_at` and
    /// `processed_at` now, `cancel_reason` as given, its lease and retry
    /// time cleared; its lane moves on. Its current attempt is superseded
    /// at once: completing or failing it answers `Superseded`, renewing it
    /// lists it as superseded, a progress append naming it is
    /// `SupersededAttempt`. A leased event's cancellation reaches
    /// [`Store::cancellations`] in every process sharing the store (CN5).
    /// A settled event is `NotPending`, nothing written. An index outside
    /// 1…frontier or a reason over [`crate::validate::MAX_REASON_BYTES`]
    /// is `InvalidArgument`, a trimmed index `Trimmed` (CN4).
    ///
    /// Validates the request ([`crate::validate::cancel_request`]) and
    /// makes an empty reason none (CN1), then hands it to
    /// [`Store::cancel_apply`].
    async fn cancel(
        &self,
        session: &str,
        index: u64,
        reason: Option<String>,
    ) -> Result<CancelOutcome> {
        let request = crate::validate::cancel_request(session, index, reason)?;
        self.cancel_apply(request).await
    }

    /// The store's half of [`Store::cancel`]: cancels as `cancel`
    /// describes, given a request that passed its checks. Call `cancel`,
    /// which validates first.
    async fn cancel_apply(&self, request: CancelRequest<'_>) -> Result<CancelOutcome>;

    /// Cancellations of leased attempts (CN5), made by any process sharing
    /// the store, so that the worker running one stops it at once. Returns
    /// once the subscription is live: every cancel made after this returns,
    /// by any process, reaches the stream (a subscription that takes a
    /// round trip to the server has made it). A hint, like
    /// [`Store::pending_wakeups`]: one may still be lost later (a
    /// reconnect), and a worker learns of the rest when it renews (RN1). A
    /// store that cannot push keeps the default, a stream that never
    /// yields. A closed or unreachable store is an error.
    async fn cancellations(&self) -> Result<CancelStream> {
        Ok(Box::pin(futures::stream::pending()))
    }

    /// Ends this holder's unexpired leases on these claims at once; the
    /// attempts stay counted. Returns the released indexes, ascending (RL1).
    async fn release_claims(&self, request: ReleaseRequest) -> Result<Vec<u64>>;

    /// Sessions that have pending events, in byte order, a page at a time (PS1).
    async fn pending_sessions(&self, page: PageRequest) -> Result<SessionPage>;

    /// The reducer's snapshot (if any) and every event after its index up to
    /// one frontier, read in one atomic step (S1).
    async fn read_state(&self, session: &str, reducer: &str) -> Result<StateRead>;

    /// Stores snapshots; each only if newer than the stored one, so a
    /// snapshot never moves backward. An index beyond the frontier is
    /// `InvalidArgument` (S2).
    async fn put_snapshots(&self, session: &str, snapshots: Vec<SnapshotWrite>) -> Result<()>;

    /// Sets presence fields of a participant (P1, P2): per field, last writer
    /// wins by `meta.at` (a tie goes to the incoming write), `None` deletes,
    /// each applied entry expires at store-now + ttl. Returns the applied part
    /// as a patch, or `None` when nothing applied. Applied patches reach every
    /// subscriber of `ns` in any process sharing the store (P4).
    ///
    /// Validates the write (P2: [`crate::validate::presence_set`]); an empty
    /// one applies nothing and answers `None` without reaching the store;
    /// any other is handed to [`Store::presence_apply`].
    async fn presence_set(
        &self,
        ns: &str,
        participant: &str,
        values: BTreeMap<String, Option<Value>>,
        meta: PresenceMeta,
    ) -> Result<Option<PresencePatch>> {
        crate::validate::presence_set(ns, participant, &values, &meta)?;
        if values.is_empty() {
            return Ok(None);
        }
        let request = PresenceRequest {
            ns,
            participant,
            values,
            meta,
        };
        self.presence_apply(request).await
    }

    /// The store's half of [`Store::presence_set`]: applies a write that
    /// passed validation and sets at least one field, as `presence_set`
    /// describes. Call `presence_set`, which validates first.
    async fn presence_apply(&self, write: PresenceRequest<'_>) -> Result<Option<PresencePatch>>;

    /// The live entries of a namespace, by participant then field; expired
    /// entries are pruned in the same atomic step (P3).
    async fn presence_read(&self, ns: &str) -> Result<Vec<PresenceEntry>>;

    /// Subscribes to the patches of `ns` (P4). Returns once the subscription
    /// is live: every patch applied after this returns, by any process
    /// sharing the store, is delivered, in the order it applied (patches
    /// applied while the call runs may or may not be). Should the
    /// subscription miss patches later (a reconnect, or a subscriber that
    /// fell behind), it re-reads the namespace and emits what changed
    /// meanwhile. A bad `ns` is `InvalidArgument`, a closed or unreachable
    /// store `StoreUnavailable`; once open, a backend failure or closing the
    /// store ends the stream with `StoreUnavailable`.
    async fn presence_subscribe(&self, ns: &str) -> Result<PresenceStream>;

    /// A live feed (ST1, ST2, ST3, ST4, ST5): every event with index > `after_index`, in order,
    /// each exactly once, with no gap, then every later event, until dropped.
    /// Ends with `StoreUnavailable` on a backend failure or when the store
    /// closes.
    fn stream(&self, session: &str, after_index: u64) -> EventStream;

    /// Wake-ups for workers (PS2): the id of a session each time its
    /// pending count rises from zero, written by any process sharing the
    /// store. Returns once the subscription is live: every wake-up
    /// published after this returns reaches the stream, so a worker that
    /// subscribes, then lists [`Store::pending_sessions`], misses nothing
    /// between the two. A hint that spares polling, not a ledger: a wake-up
    /// can still be lost later (a reconnect) and work older than the
    /// stream is not announced, so a worker lists now and then. A store
    /// without push keeps the default, a stream that never yields. A
    /// closed or unreachable store is an error.
    async fn pending_wakeups(&self) -> Result<WakeupStream> {
        Ok(Box::pin(futures::stream::pending()))
    }

    /// Whether [`Store::pending_wakeups`] pushes (PS2): every session that
    /// gains claimable work is announced, so a worker waiting for a time
    /// (`Busy{retry_at}`) may sleep until it instead of asking again every
    /// poll interval (RT18). False for a store without push, the default.
    fn pushes_wakeups(&self) -> bool {
        false
    }

    /// What this instance's live feeds have done (their reads of the log,
    /// the events they delivered) and how many are open: see
    /// [`Feeds`](crate::feed::Feeds). A store without shared readers keeps
    /// the default, all zero.
    fn feed_stats(&self) -> FeedStats {
        FeedStats::default()
    }

    /// How many live feeds of `session` are open in this instance.
    fn session_followers(&self, session: &str) -> usize {
        let _ = session;
        0
    }

    /// Sessions in byte order of id with their counters (I1); cost per listed
    /// session does not grow with its number of events.
    async fn list_sessions(&self, options: ListSessionsOptions) -> Result<SessionList>;

    /// A page of stored events; the first page freezes the frontier as
    /// `through_index` so pagination is stable (I2).
    async fn read_events(&self, session: &str, options: ReadEventsOptions) -> Result<EventsPage>;

    /// The session's snapshots by reducer name (I3).
    async fn list_snapshots(&self, session: &str) -> Result<Vec<SnapshotInfo>>;

    /// Deletes the session entirely: events, processing records, snapshots,
    /// presence of the namespace named like it, its ids, its listing (I4).
    async fn clear(&self, session: &str) -> Result<()>;

    /// Closes a session (CL1, CL2, CL3, CL4, CL5): its log is final at
    /// its frontier from now on.
    ///
    /// Later appends, progress appends and completions that return events
    /// fail with `SessionClosed`, nothing written, unless they replay what
    /// is stored (A5, CO3); pending events are still claimed and completed
    /// (without events). Live feeds deliver every event through the final
    /// frontier and then end cleanly. Closing a closed session answers
    /// `AlreadyClosed`; a session without events is `InvalidArgument`.
    async fn close_session(&self, session: &str) -> Result<CloseOutcome>;

    /// Trims the settled prefix of a session through `through_index`
    /// (TR1, TR2, TR3, TR4, TR5): those events, their records and ids go;
    /// every later event keeps its index. Returns the first retained index.
    ///
    /// An index beyond the frontier, or a pending or dead-lettered event in
    /// the range, is `InvalidArgument` (naming the first such index) and
    /// writes nothing. At most 10 000 events go per call: the returned
    /// index tells how far it got. Reads that need trimmed events fail with
    /// `Trimmed` afterwards.
    async fn trim(&self, session: &str, through_index: u64) -> Result<TrimOutcome>;

    /// Forks `source` at `at_index` into a new session `target`
    /// (FK1, FK2, FK3, FK4, FK5): the target's events `first ..= at_index`
    /// are the source's (same ids, types, payloads, `created_at`, causes,
    /// lanes), with their processing records as they are in the source,
    /// leases released; snapshots at or below `at_index` come along. The
    /// branches share nothing afterwards. The target appears complete in
    /// one step, or not at all.
    ///
    /// The same fork again answers `AlreadyForked`, nothing written; a
    /// target that exists otherwise is `SessionExists`. An index of 0 or
    /// past the source's frontier, a source without events, a target equal
    /// to the source or a bad name is `InvalidArgument`; an index whose
    /// events were trimmed away is `Trimmed`. Nothing is written on error.
    async fn fork(&self, source: &str, at_index: u64, target: &str) -> Result<ForkOutcome>;

    /// Closes the store: every open feed and subscription ends with
    /// `StoreUnavailable`, and later calls fail with it.
    async fn close(&self);

    /// The store clock: the time every rule above reads.
    fn clock(&self) -> Arc<dyn Clock>;
}

/// A store handed to what keeps it, such as `App::builder`: any store by
/// value (it is put in an [`Arc`]), an `Arc` of one, or an
/// `Arc<dyn Store>`, so that a caller need not write `Arc::new`.
///
/// ```
/// use std::sync::Arc;
/// use a2_core::{IntoStore, MemoryStore, Store, StoreOptions};
///
/// let by_value: Arc<dyn Store> = MemoryStore::new(StoreOptions::default()).into_store();
/// let shared = Arc::new(MemoryStore::new(StoreOptions::default()));
/// let same: Arc<dyn Store> = shared.clone().into_store();
/// let dynamic: Arc<dyn Store> = same.clone().into_store();
/// assert!(Arc::ptr_eq(&same, &dynamic));
/// # let _ = by_value;
/// ```
pub trait IntoStore {
    /// The store, shared.
    fn into_store(self) -> Arc<dyn Store>;
}

impl<S: Store> IntoStore for S {
    fn into_store(self) -> Arc<dyn Store> {
        Arc::new(self)
    }
}

impl<S: Store> IntoStore for Arc<S> {
    fn into_store(self) -> Arc<dyn Store> {
        self
    }
}

impl IntoStore for Arc<dyn Store> {
    fn into_store(self) -> Arc<dyn Store> {
        self
    }
}
