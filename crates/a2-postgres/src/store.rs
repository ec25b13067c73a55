//! [`PostgresStore`]: a2's sessions in a Postgres database, written in the
//! store's own transactions or in the application's.

use std::sync::Arc;

use a2_core::{
    AppendOptions, AppendOutcome, AppendRequest, CancelOutcome, CancelRequest, ClaimOutcome,
    ClaimRequest, CompleteOutcome, CompleteRequest, FailOutcome, FailRequest, Millis, NewEvent,
    PageRequest, ReadRange, ReleaseRequest, RenewOutcome, RenewRequest, Result, ReviveOutcome,
    SessionPage, SnapshotWrite, StateRead, StoreOptions, StoredEvent, rules, validate,
};
use futures::future::BoxFuture;

use a2_core::feed::Feeds;

use crate::append::{self, Extras};
use crate::feed::Source;
use crate::listen::Hub;
use crate::notify::Notices;
use crate::op::{self, Mode, On};
use crate::sql::Sql;
use crate::{Database, PostgresOptions, schema};

/// a2's sessions in a Postgres database: every write one transaction,
/// safe with any number of processes and hosts on the database; or, with
/// [`PostgresStore::append_in`], part of the application's own
/// transaction.
///
/// ```no_run
/// # async fn demo() -> a2_core::Result<()> {
/// use a2_core::{NewEvent, ReadRange, StoreOptions};
/// use a2_postgres::{PostgresOptions, PostgresStore};
/// use serde_json::json;
///
/// let store = PostgresStore::connect(
///     "postgres://a2:secret@localhost/app",
///     PostgresOptions::default(),
///     StoreOptions::default(),
/// )
/// .await?;
/// store
///     .append("chat-1", vec![NewEvent::new("message", json!({ "text": "hi" }))])
///     .await?;
/// let events = store.read("chat-1", ReadRange::default()).await?;
/// assert_eq!(events.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Database,
    options: StoreOptions,
    /// What feeds, subscriptions, wake-ups and cancels hear.
    source: Source,
    /// The shared readers of live feeds (see `a2_core::feed`).
    feeds: Feeds,
}

impl Drop for Inner {
    /// The last handle of the instance is gone: its listener stops (its
    /// feeds end as after a close).
    fn drop(&mut self) {
        self.source.hub.close();
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("db", &self.db)
            .field("listener", &self.source.hub)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the database `url` names (see [`Database::connect`])
    /// and makes its schema ready: created with its tables when missing
    /// (by one process when many start at once), checked when present. A
    /// schema written by a newer a2, or holding tables that are not a2's,
    /// is `InvalidArgument`, left untouched.
    pub async fn connect(
        url: &str,
        postgres: PostgresOptions,
        options: StoreOptions,
    ) -> Result<Self> {
        // EX3: the instance never reads time backward.
        let options = options.instance();
        let timeout = postgres.connect_timeout;
        let db = Database::connect(url, postgres).await?;
        schema::prepare(&db, db.schema()).await?;
        let source = Source {
            db: db.clone(),
            hub: Hub::new(),
            clock: options.clock.clone(),
        };
        crate::listen::spawn(db.clone(), source.hub.clone());
        // Feeds, subscriptions, wake-ups and cancels hear every notice
        // from the return on; a listener that cannot connect within the
        // connect timeout leaves them polling until it can.
        let mut live = source.hub.liveness();
        let waited = tokio::time::timeout(timeout, live.wait_for(|live| *live)).await;
        if !matches!(waited, Ok(Ok(_))) {
            tracing::warn!("the Postgres listener is not connected yet; feeds poll until it is");
        }
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                options,
                feeds: Feeds::new(Arc::new(source.clone())),
                source,
            }),
        })
    }

    /// The database and its pool.
    pub fn database(&self) -> &Database {
        &self.inner.db
    }

    fn now(&self) -> Millis {
        self.inner.options.clock.now_ms()
    }

    fn sql(&self) -> Sql<'_> {
        Sql::new(&self.inner.db)
    }

    /// Appends events to a session (`docs/spec.md` §2, as
    /// [`a2_core::Store::append`] describes), in one transaction.
    pub async fn append(
        &self,
        session: &str,
        events: impl IntoIterator<Item = NewEvent>,
    ) -> Result<AppendOutcome> {
        self.append_with(session, events, AppendOptions::default())
            .await
    }

    /// Appends with options — a claim of the new events (AC2), an expiry
    /// (EX2), an expected frontier (A13), a close (CL6) — in one
    /// transaction, as [`a2_core::Store::append_with`] describes.
    pub async fn append_with(
        &self,
        session: &str,
        events: impl IntoIterator<Item = NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendOutcome> {
        let request = self.request(session, events, options)?;
        self.apply(request).await
    }

    /// The store's half of an append whose request passed
    /// [`PostgresStore::prepare`], in one transaction.
    pub(crate) async fn apply(&self, request: AppendRequest<'_>) -> Result<AppendOutcome> {
        let AppendRequest {
            session,
            events,
            options,
        } = request;
        let (session, default_expiry) = (session.to_owned(), self.inner.options.default_expiry);
        self.transaction("appending", move |on| {
            Box::pin(async move {
                let request = AppendRequest {
                    session: &session,
                    events,
                    options,
                };
                let extras = Extras::of(&request.options, default_expiry);
                append::append(&on.sql, on.client, on.notices, &request, extras, on.now).await
            })
        })
        .await
    }

    /// Appends events to a session inside the application's own open
    /// transaction: the events exist — and wake workers and followers —
    /// only if that transaction commits; when it rolls back, nothing of the
    /// append is left, not even a wake-up.
    ///
    /// The append runs in a savepoint of `tx`: when it is refused (bad
    /// input, a partial duplicate, a closed session…) its statements are
    /// undone and `tx` goes on as it was. From the append until `tx` ends,
    /// the session's row is locked: other writes to the same session wait
    /// for the commit or rollback, writes to other sessions do not.
    ///
    /// ```no_run
    /// # async fn demo(store: a2_postgres::PostgresStore, mut client: tokio_postgres::Client)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// use a2_core::NewEvent;
    /// use serde_json::json;
    ///
    /// let mut tx = client.transaction().await?;
    /// tx.execute("INSERT INTO orders (id, total) VALUES ($1, $2)", &[&42i64, &990i64])
    ///     .await?;
    /// store
    ///     .append_in(&mut tx, "order-42", vec![NewEvent::new("order.placed", json!({ "id": 42 }))])
    ///     .await?;
    /// tx.commit().await?; // the order and its event, or neither
    /// # Ok(()) }
    /// ```
    pub async fn append_in(
        &self,
        tx: &mut tokio_postgres::Transaction<'_>,
        session: &str,
        events: impl IntoIterator<Item = NewEvent>,
    ) -> Result<AppendOutcome> {
        let request = self.request(session, events, AppendOptions::default())?;
        let sql = self.sql();
        let savepoint = tx
            .savepoint("a2_append")
            .await
            .map_err(|e| sql.error("starting a savepoint", e))?;
        let mut notices = Notices::default();
        let on = On {
            sql,
            client: &savepoint,
            now: self.now(),
            notices: &mut notices,
        };
        let extras = Extras::of(&request.options, self.inner.options.default_expiry);
        let mut applied =
            append::append(&on.sql, on.client, on.notices, &request, extras, on.now).await;
        if applied.is_ok() {
            // Queued in the application's transaction: delivered at its
            // commit, never after a rollback.
            if let Err(error) = notices.send(&sql, &savepoint, self.inner.db.schema()).await {
                applied = Err(error);
            }
        }
        // Refused, it is undone: the application's transaction goes on as
        // it was.
        let (end, doing) = match applied {
            Ok(_) => (savepoint.commit().await, "releasing the savepoint"),
            Err(_) => (savepoint.rollback().await, "rolling the savepoint back"),
        };
        end.map_err(|e| sql.error(doing, e))?;
        applied
    }

    /// Leases ready events to a holder (§3 of `docs/spec.md`, as
    /// [`a2_core::Store::claim_available`] describes), in one transaction.
    pub async fn claim_available(&self, mut request: ClaimRequest) -> Result<ClaimOutcome> {
        validate::claim_request(&request)?;
        request.limit = validate::effective_limit(request.limit);
        self.transaction("claiming", |on| Box::pin(crate::work::claim(on, request)))
            .await
    }

    /// Records an attempt's success and appends the events it returned,
    /// caused by it, in one transaction (§3 of `docs/spec.md`, as
    /// [`a2_core::Store::complete_attempt`] describes).
    pub async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteOutcome> {
        validate::complete_request(&request, &self.inner.options.limits)?;
        let mut request = request;
        rules::append::assign_ids(&mut request.events, self.inner.options.ids.as_ref())?;
        self.transaction("completing", |on| {
            Box::pin(crate::complete::complete(on, request))
        })
        .await
    }

    /// Records an attempt's failure (§3 of `docs/spec.md`, as
    /// [`a2_core::Store::fail_attempt`] describes), in one transaction.
    pub async fn fail_attempt(&self, request: FailRequest) -> Result<FailOutcome> {
        validate::fail_request(&request)?;
        self.transaction("failing", |on| Box::pin(crate::complete::fail(on, request)))
            .await
    }

    /// Makes a dead-lettered event pending again (RV1, RV2, RV3), in one
    /// transaction; announced to the workers.
    pub async fn revive(&self, session: &str, index: u64) -> Result<ReviveOutcome> {
        validate::session_id(session)?;
        let at = (session.to_owned(), index);
        self.transaction("reviving", |on| Box::pin(crate::settle::revive(on, at)))
            .await
    }

    /// Cancels an event (CN1, CN3, CN4) as a checked request says
    /// ([`validate::cancel_request`] makes one), in one transaction; the
    /// cancel of a leased attempt reaches every process (CN5).
    pub async fn cancel_apply(&self, request: CancelRequest<'_>) -> Result<CancelOutcome> {
        let at = (request.session.to_owned(), request.index, request.reason);
        self.transaction("cancelling", |on| Box::pin(crate::settle::cancel(on, at)))
            .await
    }

    /// Writes reducers' snapshots (S2), in one transaction: each within
    /// the log, none moving back.
    pub async fn put_snapshots(&self, session: &str, snapshots: Vec<SnapshotWrite>) -> Result<()> {
        validate::snapshots(session, &snapshots)?;
        let at = (session.to_owned(), snapshots);
        self.transaction("writing snapshots", |on| {
            Box::pin(crate::state::put(on, at))
        })
        .await
    }

    /// A reducer's snapshot and the events after it (S1).
    pub async fn read_state(&self, session: &str, reducer: &str) -> Result<StateRead> {
        validate::session_id(session)?;
        validate::name("reducer", reducer)?;
        let at = (session.to_owned(), reducer.to_owned());
        self.run(Mode::Read, "reading state", |on| {
            Box::pin(crate::state::read(on, at))
        })
        .await
    }

    /// Sessions with pending events, a page at a time (PS1).
    pub async fn pending_sessions(&self, mut page: PageRequest) -> Result<SessionPage> {
        page.limit = validate::page_limit(page.limit)?;
        self.transaction("listing", |on| Box::pin(crate::state::pending(on, page)))
            .await
    }

    /// Extends leases still held (RN1, RN2, RN3), in one transaction.
    pub async fn renew_claims(&self, request: RenewRequest) -> Result<RenewOutcome> {
        validate::renew_request(&request)?;
        self.transaction("renewing", |on| Box::pin(crate::work::renew(on, request)))
            .await
    }

    /// Ends this holder's live leases on these claims at once (RL1), in
    /// one transaction; the released events are announced.
    pub async fn release_claims(&self, request: ReleaseRequest) -> Result<Vec<u64>> {
        validate::release_request(&request)?;
        self.transaction("releasing", |on| {
            Box::pin(crate::work::release(on, request))
        })
        .await
    }

    /// Runs `op` in a transaction of its own (see [`op::run`]) at the
    /// store's time now; a closed store is `StoreUnavailable`.
    pub(crate) async fn transaction<T>(
        &self,
        doing: &str,
        op: impl for<'t> FnOnce(On<'t, crate::op::Tx>) -> BoxFuture<'t, Result<T>>,
    ) -> Result<T> {
        self.run(Mode::Write, doing, op).await
    }

    /// Runs a read of several statements in one snapshot.
    pub(crate) async fn reading<T>(
        &self,
        op: impl for<'t> FnOnce(On<'t, crate::op::Tx>) -> BoxFuture<'t, Result<T>>,
    ) -> Result<T> {
        self.run(Mode::Read, "reading", op).await
    }

    /// Runs `op` in a transaction of its own of `mode` (see [`op::run`])
    /// at the store's time now; a closed store is `StoreUnavailable`.
    pub(crate) async fn run<T>(
        &self,
        mode: Mode,
        doing: &str,
        op: impl for<'t> FnOnce(On<'t, crate::op::Tx>) -> BoxFuture<'t, Result<T>>,
    ) -> Result<T> {
        if self.inner.source.hub.is_closed() {
            return Err(crate::feed::closed());
        }
        op::run(&self.inner.db, (mode, self.now()), doing, op).await
    }

    /// What feeds and subscriptions hear through.
    pub(crate) fn source(&self) -> &Source {
        &self.inner.source
    }

    /// The shared readers of live feeds.
    pub(crate) fn feeds(&self) -> &Feeds {
        &self.inner.feeds
    }

    /// The store's options.
    pub(crate) fn options(&self) -> &StoreOptions {
        &self.inner.options
    }

    /// Closes this instance: its listener stops, its feeds end, its pool
    /// closes; operations are `StoreUnavailable` from now on.
    pub(crate) fn shut(&self) {
        self.inner.source.hub.close();
        self.inner.db.close();
    }

    /// What an append must be before it reaches the database: the
    /// request's own checks, the batch's limits (A12), final ids (A3, A11).
    fn request<'s>(
        &self,
        session: &'s str,
        events: impl IntoIterator<Item = NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendRequest<'s>> {
        let events = events.into_iter().collect();
        self.prepare(validate::append_request(session, events, options)?)
    }

    /// What a request that passed [`validate::append_request`] must be
    /// before it reaches the database: the batch's limits (A12), final ids
    /// (A3, A11), the claim's effective limit.
    pub(crate) fn prepare<'s>(&self, mut request: AppendRequest<'s>) -> Result<AppendRequest<'s>> {
        if let Some(claim) = &mut request.options.claim {
            claim.limit = validate::effective_limit(claim.limit);
        }
        validate::batch(&request.events, &self.inner.options.limits, true)?;
        rules::append::assign_ids(&mut request.events, self.inner.options.ids.as_ref())?;
        Ok(request)
    }

    /// Every event after `range.after_index` through `range.through_index`
    /// (or the frontier), in index order (R1), in one snapshot; an unknown
    /// session reads as none.
    pub async fn read(&self, session: &str, range: ReadRange) -> Result<Vec<StoredEvent>> {
        validate::session_id(session)?;
        let session = session.to_owned();
        self.run(Mode::Read, "reading", move |on| {
            Box::pin(async move {
                let Some(current) =
                    crate::session::read(&on.sql, on.client, &session, on.now).await?
                else {
                    return Ok(Vec::new());
                };
                let span = rules::read::span(
                    &session,
                    current.log.first_index,
                    current.log.frontier,
                    range,
                )?;
                let key = (session.as_str(), current.sid);
                crate::rows::range(&on.sql, on.client, key, span, usize::MAX).await
            })
        })
        .await
    }
}
