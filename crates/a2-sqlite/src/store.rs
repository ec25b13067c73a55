//! [`SqliteStore`] and its options.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2_core::*;
use async_trait::async_trait;
use tokio::sync::watch;

use a2_core::FeedStats;
use a2_core::feed::Feeds;

use crate::checkpoint::Checkpointer;
use crate::feed::{self, Shared};
use crate::hub::Hub;
use crate::readers::Readers;
use crate::writer::Writer;
use crate::{ops, reads, schema};

/// When a commit counts as durable: SQLite's `PRAGMA synchronous` on the
/// write connection (the database is always in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// `synchronous = FULL`: every commit fsyncs the write-ahead log before
    /// the operation returns, so an acknowledged write survives a crash of
    /// the process *and* of the machine (power loss). One fsync per group
    /// commit, not per operation.
    #[default]
    Full,
    /// `synchronous = NORMAL`: a commit is written to the write-ahead log
    /// but fsynced only at checkpoints. An acknowledged write survives a
    /// crash of the process (the log is in the operating system's cache),
    /// but the last commits before a power loss or kernel crash may be
    /// lost; the database stays consistent either way.
    Normal,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "PRAGMA synchronous = FULL",
            Synchronous::Normal => "PRAGMA synchronous = NORMAL",
        }
    }
}

/// How to open a [`SqliteStore`]. `SqliteOptions::default()` is durable
/// (`synchronous = FULL`) and polls for other processes' writes every 20 ms.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Clock, id source and limits.
    pub store: StoreOptions,
    /// When a commit counts as durable (default [`Synchronous::Full`]).
    pub synchronous: Synchronous,
    /// How often the store looks for other processes' commits, to wake its
    /// feeds and subscribers (default 20 ms); its own commits wake them at once.
    pub poll_interval: Duration,
    /// How long an operation waits for another process's write
    /// transaction before failing with `StoreUnavailable` (default 10 s).
    pub busy_timeout: Duration,
    /// At most this many queued operations share one commit (default 512).
    pub max_group: usize,
    /// Reads that run at once, each on a connection kept open between
    /// reads (default 4): the pool never holds more for them.
    pub read_connections: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            store: StoreOptions::default(),
            synchronous: Synchronous::Full,
            poll_interval: Duration::from_millis(20),
            busy_timeout: Duration::from_secs(10),
            max_group: 512,
            read_connections: 4,
        }
    }
}

impl SqliteOptions {
    /// Replaces the store options (clock, ids, limits).
    pub fn store(mut self, store: StoreOptions) -> Self {
        self.store = store;
        self
    }

    /// Sets [`SqliteOptions::synchronous`].
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Sets [`SqliteOptions::poll_interval`] (at least 1 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Sets [`SqliteOptions::busy_timeout`].
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets [`SqliteOptions::max_group`] (at least 1).
    pub fn max_group(mut self, max_group: usize) -> Self {
        self.max_group = max_group.max(1);
        self
    }
}

/// The SQLite store: every [`Store`] operation on one database file, durable
/// when it returns, shared safely by several processes.
///
/// Cloning is cheap and clones share the connections. Another instance
/// opened on the same file (in this process or another) is a peer, like a
/// second connection to a server.
///
/// ```
/// use a2_core::{NewEvent, Store};
/// use a2_sqlite::{SqliteOptions, SqliteStore};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), a2_core::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let store = SqliteStore::open(dir.path().join("a2.db"), SqliteOptions::default())?;
/// let appended = store.append("chat-1", vec![NewEvent::new("user.message", json!({"text": "hi"}))]).await?;
/// assert_eq!(appended.events[0].event.index, 1);
/// store.close().await;
///
/// // Reopened, the session is still there.
/// let store = SqliteStore::open(dir.path().join("a2.db"), SqliteOptions::default())?;
/// let rows = store.read("chat-1", Default::default()).await?;
/// assert_eq!(rows[0].event.payload, json!({"text": "hi"}));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

struct Inner {
    path: PathBuf,
    options: StoreOptions,
    /// `None` once closed.
    writer: Mutex<Option<Writer>>,
    shared: Shared,
    /// The shared readers of live feeds (see `a2_core::feed`).
    feeds: Feeds,
    closed: watch::Sender<bool>,
    /// When (store clock) a write last deleted expired sessions (EX5).
    last_expiry: Arc<AtomicI64>,
}

fn closed() -> Error {
    Error::closed("the SQLite store is closed")
}

impl SqliteStore {
    /// The store clock's time.
    fn now(&self) -> Millis {
        self.inner.options.clock.now_ms()
    }

    /// Opens (creating when missing) the a2 database at `path`.
    ///
    /// A file that is not an a2 database (another SQLite database, or not
    /// SQLite at all), an a2 database of a newer schema version, or a file
    /// this process cannot write is refused with `InvalidArgument`, and
    /// nothing is written to it.
    pub fn open(path: impl AsRef<Path>, mut options: SqliteOptions) -> Result<Self> {
        options.store = options.store.instance();
        let path = path.as_ref().to_path_buf();
        let conn = schema::connect(&path, options.busy_timeout)?;
        schema::prepare(&conn, &path, options.busy_timeout)?;
        conn.execute_batch(options.synchronous.pragma())
            .map_err(|e| schema::open_error(&path, e))?;
        let hub = Hub::for_path(&path, options.poll_interval, options.busy_timeout)?;
        let checkpointer = Checkpointer::start(&conn, &path, options.busy_timeout)?;
        let writer = Writer::start(conn, checkpointer, hub.clone(), options.max_group)?;
        let readers = Arc::new(Readers::new(
            path.clone(),
            options.busy_timeout,
            options.read_connections,
        ));
        let (closed, closed_rx) = watch::channel(false);
        let shared = Shared {
            hub,
            readers,
            clock: options.store.clock.clone(),
            closed: closed_rx,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                feeds: Feeds::new(Arc::new(shared.clone())),
                shared,
                path,
                options: options.store,
                writer: Mutex::new(Some(writer)),
                closed,
                last_expiry: Arc::new(AtomicI64::new(i64::MIN)),
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How many read connections this instance opened so far: at most
    /// [`SqliteOptions::read_connections`] in steady state, plus one per
    /// presence recovery that found them all busy.
    pub fn read_connections_opened(&self) -> u64 {
        self.inner.shared.readers.opened()
    }

    fn writer(&self) -> Result<Writer> {
        self.inner
            .writer
            .lock()
            .ok()
            .and_then(|w| w.clone())
            .ok_or_else(closed)
    }

    fn check_open(&self) -> Result<()> {
        if *self.inner.closed.borrow() {
            return Err(closed());
        }
        Ok(())
    }

    /// Runs a write on the writer thread with the store clock read there.
    async fn write<T, F>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection, &mut crate::effects::Effects, Millis) -> Result<T>
            + Send
            + 'static,
    {
        let writer = self.writer()?;
        let clock = self.inner.options.clock.clone();
        ops::queue_expiry(&writer, &clock, &self.inner.last_expiry);
        writer
            .write(move |conn, effects| op(conn, effects, clock.now_ms()))
            .await
    }

    async fn read<T, F>(&self, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> Result<T> + Send + 'static,
    {
        self.check_open()?;
        self.inner.shared.readers.read(read).await
    }

    /// [`SqliteStore::read`] of `session`, which must be a session id, at
    /// the store clock's time.
    async fn read_session<T, F>(&self, session: &str, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection, &str, Millis) -> Result<T> + Send + 'static,
    {
        validate::session_id(session)?;
        let (session, now) = (session.to_owned(), self.now());
        self.read(move |conn| read(conn, &session, now)).await
    }

    /// Gives every event its final id (A11, A3: [`rules::append::assign_ids`]).
    fn assign_ids(&self, mut events: Vec<NewEvent>) -> Result<Vec<NewEvent>> {
        rules::append::assign_ids(&mut events, self.inner.options.ids.as_ref())?;
        Ok(events)
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn append_apply(&self, request: AppendRequest<'_>) -> Result<AppendOutcome> {
        let AppendRequest {
            session,
            events,
            options,
        } = request;
        // AC1: the lease's expiry (and EX1 the session's) is checked against
        // the clock on the writer thread, before any write.
        let mut claim = options.claim;
        if let Some(claim) = &mut claim {
            claim.limit = validate::effective_limit(claim.limit);
        }
        validate::batch(&events, &self.inner.options.limits, true)?;
        self.check_open()?;
        let events = self.assign_ids(events)?;
        let session = session.to_owned();
        let (expiry, if_frontier, close) = (options.expiry, options.if_frontier, options.close);
        let default_expiry = self.inner.options.default_expiry;
        self.write(move |conn, effects, now| {
            let extras = ops::Extras {
                claim: claim.as_ref(),
                expiry,
                default_expiry,
                if_frontier,
                close,
            };
            ops::append(conn, effects, &session, events, extras, now)
        })
        .await
    }

    async fn set_expiry(&self, session: &str, expiry: Expiry) -> Result<ExpiryOutcome> {
        validate::session_id(session)?;
        let session = session.to_owned();
        self.write(move |conn, _, now| ops::set_expiry(conn, &session, expiry, now))
            .await
    }

    async fn read(&self, session: &str, range: ReadRange) -> Result<Vec<StoredEvent>> {
        self.read_session(session, move |conn, session, now| {
            reads::read(conn, session, range, now)
        })
        .await
    }

    async fn read_history(
        &self,
        session: &str,
        mut options: HistoryOptions,
    ) -> Result<HistoryPage> {
        options.limit = validate::page_limit(options.limit)?;
        self.read_session(session, move |conn, session, now| {
            reads::read_history(conn, session, options, now)
        })
        .await
    }

    async fn claim_available(&self, mut request: ClaimRequest) -> Result<ClaimOutcome> {
        validate::claim_request(&request)?;
        request.limit = validate::effective_limit(request.limit);
        self.write(move |conn, _, now| ops::claim(conn, &request, now))
            .await
    }

    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewOutcome> {
        validate::renew_request(&request)?;
        self.write(move |conn, _, now| ops::renew(conn, &request, now))
            .await
    }

    async fn complete_attempt(&self, mut request: CompleteRequest) -> Result<CompleteOutcome> {
        validate::complete_request(&request, &self.inner.options.limits)?;
        self.check_open()?;
        request.events = self.assign_ids(std::mem::take(&mut request.events))?;
        self.write(move |conn, effects, now| ops::complete(conn, effects, request, now))
            .await
    }

    async fn fail_attempt(&self, request: FailRequest) -> Result<FailOutcome> {
        validate::fail_request(&request)?;
        self.write(move |conn, _, now| ops::fail(conn, &request, now))
            .await
    }

    async fn release_claims(&self, request: ReleaseRequest) -> Result<Vec<u64>> {
        validate::release_request(&request)?;
        self.write(move |conn, effects, now| ops::release(conn, effects, &request, now))
            .await
    }

    async fn revive(&self, session: &str, index: u64) -> Result<ReviveOutcome> {
        validate::session_id(session)?;
        let session = session.to_owned();
        self.write(move |conn, effects, now| ops::revive(conn, effects, &session, index, now))
            .await
    }

    async fn cancel_apply(&self, request: CancelRequest<'_>) -> Result<CancelOutcome> {
        let CancelRequest {
            session,
            index,
            reason,
        } = request;
        let session = session.to_owned();
        self.write(move |conn, effects, now| {
            ops::cancel(conn, effects, &session, index, reason, now)
        })
        .await
    }

    async fn pending_sessions(&self, mut page: PageRequest) -> Result<SessionPage> {
        page.limit = validate::page_limit(page.limit)?;
        let now = self.now();
        self.read(move |conn| reads::pending_sessions(conn, &page, now))
            .await
    }

    async fn read_state(&self, session: &str, reducer: &str) -> Result<StateRead> {
        validate::session_id(session)?;
        validate::name("reducer", reducer)?;
        let (session, reducer) = (session.to_owned(), reducer.to_owned());
        let now = self.now();
        self.read(move |conn| reads::read_state(conn, &session, &reducer, now))
            .await
    }

    async fn put_snapshots(&self, session: &str, snapshots: Vec<SnapshotWrite>) -> Result<()> {
        validate::snapshots(session, &snapshots)?;
        let session = session.to_owned();
        self.write(move |conn, effects, now| {
            ops::put_snapshots(conn, effects, &session, snapshots, now)
        })
        .await
    }

    async fn presence_apply(&self, write: PresenceRequest<'_>) -> Result<Option<PresencePatch>> {
        let (ns, participant) = (write.ns.to_owned(), write.participant.to_owned());
        let (values, meta) = (write.values, write.meta);
        self.write(move |conn, effects, now| {
            ops::presence_set(conn, effects, &ns, &participant, values, meta, now)
        })
        .await
    }

    async fn presence_read(&self, ns: &str) -> Result<Vec<PresenceEntry>> {
        validate::name("namespace", ns)?;
        let now = self.now();
        let owned = ns.to_owned();
        let (entries, expired) = self
            .read(move |conn| reads::presence(conn, &owned, now))
            .await?;
        if expired && let Ok(writer) = self.writer() {
            // P3 prunes expired entries; readers already leave them out, so
            // the deletion need not hold up this read.
            let ns = ns.to_owned();
            writer.enqueue(move |conn, _| ops::presence_prune(conn, &ns, now));
        }
        Ok(entries)
    }

    async fn presence_subscribe(&self, ns: &str) -> Result<PresenceStream> {
        feed::subscribe(&self.inner.shared, ns).await
    }

    /// ST7: the feeds of a session share one reader (`a2_core::feed`).
    fn stream(&self, session: &str, after_index: u64) -> EventStream {
        self.inner.feeds.follow(session, after_index)
    }

    fn feed_stats(&self) -> FeedStats {
        self.inner.feeds.stats()
    }

    /// PS2: sessions that gain claimable work, this process's at their
    /// commit, other processes' within a poll interval (read from
    /// `sessions.woke` when the poller sees their commits). Live as soon
    /// as this returns, as [`Store::cancellations`] is.
    async fn pending_wakeups(&self) -> Result<WakeupStream> {
        self.check_open()?;
        Ok(self.inner.shared.hub.wakeup_stream())
    }

    fn pushes_wakeups(&self) -> bool {
        true
    }

    /// CN5: this process's cancels at once, other processes' within a poll
    /// interval (read from `cancels` when the poller sees their commits).
    /// Live as soon as this returns: the stream joins the process's
    /// broadcast within the call, and the poller hands on every `cancels`
    /// row committed after the rows it read.
    async fn cancellations(&self) -> Result<CancelStream> {
        self.check_open()?;
        Ok(self.inner.shared.hub.cancel_stream())
    }

    fn session_followers(&self, session: &str) -> usize {
        self.inner.feeds.followers(session)
    }

    async fn list_sessions(&self, mut options: ListSessionsOptions) -> Result<SessionList> {
        options.limit = validate::page_limit(options.limit)?;
        let now = self.now();
        self.read(move |conn| reads::list_sessions(conn, &options, now))
            .await
    }

    async fn read_events(
        &self,
        session: &str,
        mut options: ReadEventsOptions,
    ) -> Result<EventsPage> {
        options.limit = validate::page_limit(options.limit)?;
        self.read_session(session, move |conn, session, now| {
            reads::read_events(conn, session, options, now)
        })
        .await
    }

    async fn list_snapshots(&self, session: &str) -> Result<Vec<SnapshotInfo>> {
        self.read_session(session, move |conn, session, now| {
            reads::list_snapshots(conn, session, now)
        })
        .await
    }

    async fn close_session(&self, session: &str) -> Result<CloseOutcome> {
        validate::session_id(session)?;
        let session = session.to_owned();
        self.write(move |conn, effects, now| ops::close_session(conn, effects, &session, now))
            .await
    }

    async fn fork(&self, source: &str, at_index: u64, target: &str) -> Result<ForkOutcome> {
        validate::session_id(source)?;
        validate::session_id(target)?;
        rules::fork::check_request(source, at_index, target)?;
        let (source, target) = (source.to_owned(), target.to_owned());
        let default_expiry = self.inner.options.default_expiry;
        self.write(move |conn, effects, now| {
            ops::fork(
                conn,
                effects,
                &source,
                at_index,
                &target,
                default_expiry,
                now,
            )
        })
        .await
    }

    async fn trim(&self, session: &str, through_index: u64) -> Result<TrimOutcome> {
        validate::session_id(session)?;
        let session = session.to_owned();
        self.write(move |conn, _, now| ops::trim(conn, &session, through_index, now))
            .await
    }

    async fn clear(&self, session: &str) -> Result<()> {
        validate::session_id(session)?;
        let session = session.to_owned();
        self.write(move |conn, effects, _| ops::clear(conn, effects, &session))
            .await
    }

    async fn close(&self) {
        if self.inner.closed.send_replace(true) {
            return;
        }
        let writer = self.inner.writer.lock().ok().and_then(|mut w| w.take());
        if let Some(writer) = writer {
            // The thread commits what is queued, then closes its connection.
            let stopped = writer.stop();
            drop(writer);
            let _ = stopped.await;
        }
        self.inner.shared.readers.close();
        self.inner.shared.hub.release().await;
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.options.clock.clone()
    }
}
