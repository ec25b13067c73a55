//! [`RedisStore`]: the [`Store`] contract on Redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use a2_core::feed::Feeds;
use a2_core::*;
use async_trait::async_trait;

mod appending;
mod fork;
mod partitions;
mod reads;
mod shares;
mod work;
mod writes;

use crate::options::RedisOptions;
use partitions::*;

use crate::feed;
use crate::inner::Inner;
use crate::layout::{LAYOUT_VERSION, Layout, SessionKeys};
use crate::ops::{self};
use crate::options::check_options;
use crate::subscriber::Subscriber;
use crate::transport::Transport;

/// The Redis store. Cheap to share behind an `Arc`; one instance holds one
/// command connection (reconnecting by itself) and one push connection for
/// all of its live feeds and presence subscriptions.
///
/// Live feeds need no handshake: they read from their `after_index` and
/// re-read whenever a wake-up may have been missed. `presence_subscribe`
/// does: it returns once the server has confirmed the channel subscription
/// on the push connection and the namespace's baseline is read, so every
/// patch applied after it returns, by any process, is reported (P4). After
/// the push connection comes back, a subscription re-reads the namespace
/// and reports what changed meanwhile. See `docs/redis-layout.md`.
pub struct RedisStore {
    inner: Arc<Inner>,
    /// The shared readers of live feeds (see `a2_core::feed`).
    feeds: Arc<Feeds>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.layout.prefix())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// What the store's operations share, once it is known open: a closed
    /// store answers `StoreUnavailable` to every call.
    fn open(&self) -> Result<&Inner> {
        self.inner.check_open()?;
        Ok(&*self.inner)
    }

    /// The key prefix this store works under (RD3).
    pub fn prefix(&self) -> &str {
        self.inner.layout.prefix()
    }

    /// The keys and channels of a session (or presence namespace), for
    /// looking at it with `redis-cli` (RD4, docs/redis-layout.md).
    ///
    /// ```no_run
    /// # async fn demo() -> a2_core::Result<()> {
    /// use a2_redis::{RedisOptions, RedisStore};
    /// let store = RedisStore::connect("redis://127.0.0.1/", RedisOptions::default()).await?;
    /// let keys = store.session_keys("user:42");
    /// println!("redis-cli XRANGE '{}' - +", keys.log);
    /// # Ok(()) }
    /// ```
    pub fn session_keys(&self, session: &str) -> SessionKeys {
        self.inner.session_keys(session).as_ref().clone()
    }

    /// Operations of this instance that wait for their reply in its group
    /// commit (RD7), queued or sent (feature `testing`): how a test knows
    /// that the calls it started have all reached the batcher.
    #[cfg(feature = "testing")]
    pub fn operations_waiting(&self) -> usize {
        self.inner.batcher.waiting()
    }

    /// `trim` through `through` with `ids` sent as the log's event ids
    /// from its first retained event, as if read by this instance before
    /// other writers moved on (feature `testing`): `None` when the script
    /// finds them stale and writes nothing.
    #[cfg(feature = "testing")]
    pub async fn trim_with_ids(
        &self,
        session: &str,
        through: u64,
        ids: &[impl AsRef<str>],
    ) -> Result<Option<a2_core::TrimOutcome>> {
        let ids: Vec<Vec<u8>> = ids
            .iter()
            .map(|id| format!("#{}", id.as_ref()).into_bytes())
            .collect();
        self.trim_with(session, through, &ids).await
    }

    /// How many channels (the sessions of live feeds, presence
    /// namespaces) this store follows by polling right now: every one over
    /// REST with `LiveMode::Poll` or a provider without subscriptions; with
    /// event streams, those whose stream failed, until it is back
    /// (`docs/rest.md`). Always 0 over RESP.
    pub fn polling_channels(&self) -> usize {
        self.inner.subscriber.polling_channels()
    }

    /// How many event-stream connections this store holds over REST: one
    /// per session (or presence namespace) followed over server-sent
    /// events, whatever the number of feeds (the protocol carries one
    /// channel per request; over HTTP/2 they share a TCP connection).
    /// Always 0 over RESP, which carries every channel on one connection.
    pub fn event_streams(&self) -> usize {
        self.inner.subscriber.event_streams()
    }

    /// The partition count of this store's key prefix.
    pub fn partitions(&self) -> usize {
        self.inner.layout.partitions().len()
    }

    /// A store over any command transport and subscriber: the scripts, key
    /// layout, reply decoding and feed logic do not depend on how commands
    /// travel (a REST transport plugs in here). Checks the prefix's
    /// recorded layout first.
    pub(crate) async fn from_parts(
        transport: Arc<dyn Transport>,
        subscriber: Arc<dyn Subscriber>,
        options: RedisOptions,
    ) -> Result<Self> {
        check_options(&options)?;
        let layout = Layout::new(options.prefix.clone(), options.partitions);
        let reply = transport
            .script(
                &crate::lua::CONFIG,
                &[layout.config().as_str()],
                &ops::config::encode(LAYOUT_VERSION, options.partitions),
            )
            .await?;
        let (version, partitions) = ops::config::decode(reply)?;
        if version != LAYOUT_VERSION {
            return Err(Error::invalid(format!(
                "the prefix {:?} holds data of layout {version}; this version of a2 reads layout {LAYOUT_VERSION}",
                options.prefix
            )));
        }
        if partitions != options.partitions.to_string() {
            return Err(Error::invalid(format!(
                "the prefix {:?} was laid out with {partitions} partitions; open it with RedisOptions::partitions({partitions})",
                options.prefix
            )));
        }
        let inner = Arc::new(Inner {
            batcher: Arc::new(crate::batcher::Batcher::new(
                transport.clone(),
                &ops::BATCH,
                &ops::LIBRARY,
                &ops::ALL,
                options.wake_carry_cap,
            )),
            transport,
            subscriber,
            layout,
            options: options.store.instance(),
            follow_refresh: options.follow_refresh,
            instance: RandomIds.next_id(),
            subscribe_timeout: options.connect_timeout + options.command_timeout * 3,
            wake_carry_cap: options.wake_carry_cap,
            closed: AtomicBool::new(false),
            key_cache: Default::default(),
            marks: Default::default(),
        });
        if inner.subscriber.hears_publishes() {
            crate::keeper::spawn(&inner);
        }
        Ok(Self {
            feeds: Arc::new(Feeds::new(Arc::new(feed::Source(inner.clone())))),
            inner,
        })
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn append_apply(&self, request: AppendRequest<'_>) -> Result<AppendOutcome> {
        self.append_claiming(request).await
    }

    async fn set_expiry(&self, session: &str, expiry: Expiry) -> Result<ExpiryOutcome> {
        self.set_expiry_op(session, expiry).await
    }

    async fn read(&self, session: &str, range: ReadRange) -> Result<Vec<StoredEvent>> {
        self.read_op(session, range).await
    }

    async fn read_history(&self, session: &str, options: HistoryOptions) -> Result<HistoryPage> {
        self.read_history_op(session, options).await
    }

    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimOutcome> {
        self.claim_available_op(request).await
    }

    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewOutcome> {
        self.renew_claims_op(request).await
    }

    async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteOutcome> {
        self.complete_attempt_op(request).await
    }

    async fn fail_attempt(&self, request: FailRequest) -> Result<FailOutcome> {
        self.fail_attempt_op(request).await
    }

    async fn release_claims(&self, request: ReleaseRequest) -> Result<Vec<u64>> {
        self.release_claims_op(request).await
    }

    async fn revive(&self, session: &str, index: u64) -> Result<ReviveOutcome> {
        self.revive_op(session, index).await
    }

    async fn cancel_apply(&self, request: CancelRequest<'_>) -> Result<CancelOutcome> {
        self.cancel_op(request).await
    }

    async fn pending_sessions(&self, page: PageRequest) -> Result<SessionPage> {
        self.pending_sessions_op(page).await
    }

    async fn read_state(&self, session: &str, reducer: &str) -> Result<StateRead> {
        self.read_state_op(session, reducer).await
    }

    async fn put_snapshots(&self, session: &str, snapshots: Vec<SnapshotWrite>) -> Result<()> {
        self.put_snapshots_op(session, snapshots).await
    }

    async fn presence_apply(&self, write: PresenceRequest<'_>) -> Result<Option<PresencePatch>> {
        self.presence_apply_op(write).await
    }

    async fn presence_read(&self, ns: &str) -> Result<Vec<PresenceEntry>> {
        self.presence_read_op(ns).await
    }

    async fn presence_subscribe(&self, ns: &str) -> Result<PresenceStream> {
        feed::presence_stream(self.inner.clone(), ns).await
    }

    /// ST7: the feeds of a session share one reader (`a2_core::feed`).
    fn stream(&self, session: &str, after_index: u64) -> EventStream {
        self.feeds.follow(session, after_index)
    }

    fn feed_stats(&self) -> FeedStats {
        self.feeds.stats()
    }

    fn session_followers(&self, session: &str) -> usize {
        self.feeds.followers(session)
    }

    async fn pending_wakeups(&self) -> Result<WakeupStream> {
        crate::wakeups::wakeup_stream(self.inner.clone()).await
    }

    fn pushes_wakeups(&self) -> bool {
        self.inner.subscriber.pushes()
    }

    async fn cancellations(&self) -> Result<CancelStream> {
        crate::wakeups::cancel_stream(self.inner.clone()).await
    }

    async fn list_sessions(&self, options: ListSessionsOptions) -> Result<SessionList> {
        self.list_sessions_op(options).await
    }

    async fn read_events(&self, session: &str, options: ReadEventsOptions) -> Result<EventsPage> {
        self.read_events_op(session, options).await
    }

    /// I3: the session's snapshots, by reducer name, from its snapshot hash.
    async fn list_snapshots(&self, session: &str) -> Result<Vec<SnapshotInfo>> {
        self.list_snapshots_op(session).await
    }

    async fn close_session(&self, session: &str) -> Result<CloseOutcome> {
        self.close_session_op(session).await
    }

    async fn trim(&self, session: &str, through_index: u64) -> Result<TrimOutcome> {
        self.trim_op(session, through_index).await
    }

    async fn fork(&self, source: &str, at_index: u64, target: &str) -> Result<ForkOutcome> {
        self.fork_op(source, at_index, target).await
    }

    async fn clear(&self, session: &str) -> Result<()> {
        self.clear_op(session).await
    }

    async fn close(&self) {
        // ST2: the sessions this instance follows stop publishing for it.
        if !self.inner.is_closed() {
            crate::keeper::release_all(&self.inner).await;
        }
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner
            .subscriber
            .close(Error::closed("the store is closed"));
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.options.clock.clone()
    }
}
