//! `a2_core::Store` for [`PostgresStore`]: every operation of the
//! contract, each one transaction (or one snapshot for a read).

use std::sync::Arc;

use a2_core::{
    AppendOutcome, AppendRequest, CancelOutcome, CancelRequest, CancelStream, ClaimOutcome,
    ClaimRequest, Clock, CloseOutcome, CompleteOutcome, CompleteRequest, EventStream, EventsPage,
    Expiry, ExpiryOutcome, FailOutcome, FailRequest, FeedStats, ForkOutcome, HistoryOptions,
    HistoryPage, ListSessionsOptions, PageRequest, PresenceEntry, PresencePatch, PresenceRequest,
    PresenceStream, ReadEventsOptions, ReadRange, ReleaseRequest, RenewOutcome, RenewRequest,
    Result, ReviveOutcome, SessionList, SessionPage, SnapshotInfo, SnapshotWrite, StateRead, Store,
    StoredEvent, TrimOutcome, WakeupStream, rules, validate,
};
use async_trait::async_trait;

use crate::PostgresStore;
use crate::op::Mode;
use crate::{inspect, lifecycle};

#[async_trait]
impl Store for PostgresStore {
    async fn append_apply(&self, request: AppendRequest<'_>) -> Result<AppendOutcome> {
        let request = self.prepare(request)?;
        self.apply(request).await
    }

    async fn set_expiry(&self, session: &str, expiry: Expiry) -> Result<ExpiryOutcome> {
        validate::session_id(session)?;
        let at = (session.to_owned(), expiry);
        self.transaction("setting the expiry", |on| {
            Box::pin(lifecycle::set_expiry(on, at))
        })
        .await
    }

    async fn read(&self, session: &str, range: ReadRange) -> Result<Vec<StoredEvent>> {
        PostgresStore::read(self, session, range).await
    }

    async fn read_history(&self, session: &str, options: HistoryOptions) -> Result<HistoryPage> {
        validate::session_id(session)?;
        let at = (session.to_owned(), options);
        self.reading(|on| Box::pin(inspect::history(on, at))).await
    }

    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimOutcome> {
        PostgresStore::claim_available(self, request).await
    }

    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewOutcome> {
        PostgresStore::renew_claims(self, request).await
    }

    async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteOutcome> {
        PostgresStore::complete_attempt(self, request).await
    }

    async fn fail_attempt(&self, request: FailRequest) -> Result<FailOutcome> {
        PostgresStore::fail_attempt(self, request).await
    }

    async fn revive(&self, session: &str, index: u64) -> Result<ReviveOutcome> {
        PostgresStore::revive(self, session, index).await
    }

    async fn cancel_apply(&self, request: CancelRequest<'_>) -> Result<CancelOutcome> {
        PostgresStore::cancel_apply(self, request).await
    }

    async fn cancellations(&self) -> Result<CancelStream> {
        crate::feed::cancels(self.source()).await
    }

    async fn release_claims(&self, request: ReleaseRequest) -> Result<Vec<u64>> {
        PostgresStore::release_claims(self, request).await
    }

    async fn pending_sessions(&self, page: PageRequest) -> Result<SessionPage> {
        PostgresStore::pending_sessions(self, page).await
    }

    async fn read_state(&self, session: &str, reducer: &str) -> Result<StateRead> {
        PostgresStore::read_state(self, session, reducer).await
    }

    async fn put_snapshots(&self, session: &str, snapshots: Vec<SnapshotWrite>) -> Result<()> {
        PostgresStore::put_snapshots(self, session, snapshots).await
    }

    async fn presence_apply(&self, write: PresenceRequest<'_>) -> Result<Option<PresencePatch>> {
        let owned = (
            write.ns.to_owned(),
            write.participant.to_owned(),
            write.values,
            write.meta,
        );
        self.transaction("writing presence", |on| {
            Box::pin(crate::presence::set(on, owned))
        })
        .await
    }

    async fn presence_read(&self, ns: &str) -> Result<Vec<PresenceEntry>> {
        let ns = ns.to_owned();
        self.transaction("reading presence", |on| {
            Box::pin(crate::presence::read(on, ns))
        })
        .await
    }

    async fn presence_subscribe(&self, ns: &str) -> Result<PresenceStream> {
        crate::feed::subscribe(self.source(), ns).await
    }

    /// ST7: the feeds of a session share one reader (`a2_core::feed`).
    fn stream(&self, session: &str, after_index: u64) -> EventStream {
        self.feeds().follow(session, after_index)
    }

    /// PS2: sessions that gain claimable work, in any process, heard by
    /// this instance's listener; live once this returns.
    async fn pending_wakeups(&self) -> Result<WakeupStream> {
        crate::feed::wakeups(self.source()).await
    }

    /// Whether the listener is connected: every new piece of work is
    /// announced (PS2).
    fn pushes_wakeups(&self) -> bool {
        self.source().hub.live()
    }

    fn feed_stats(&self) -> FeedStats {
        self.feeds().stats()
    }

    fn session_followers(&self, session: &str) -> usize {
        self.feeds().followers(session)
    }

    async fn list_sessions(&self, options: ListSessionsOptions) -> Result<SessionList> {
        self.run(Mode::Read, "listing sessions", |on| {
            Box::pin(inspect::sessions(on, options))
        })
        .await
    }

    async fn read_events(&self, session: &str, options: ReadEventsOptions) -> Result<EventsPage> {
        validate::session_id(session)?;
        let at = (session.to_owned(), options);
        self.reading(|on| Box::pin(inspect::events(on, at))).await
    }

    async fn list_snapshots(&self, session: &str) -> Result<Vec<SnapshotInfo>> {
        validate::session_id(session)?;
        let name = session.to_owned();
        self.run(Mode::Read, "listing snapshots", |on| {
            Box::pin(inspect::snapshots(on, name))
        })
        .await
    }

    async fn clear(&self, session: &str) -> Result<()> {
        validate::session_id(session)?;
        let name = session.to_owned();
        self.transaction("clearing", |on| Box::pin(lifecycle::clear(on, name)))
            .await
    }

    async fn close_session(&self, session: &str) -> Result<CloseOutcome> {
        validate::session_id(session)?;
        let name = session.to_owned();
        self.transaction("closing", |on| Box::pin(lifecycle::close(on, name)))
            .await
    }

    async fn trim(&self, session: &str, through_index: u64) -> Result<TrimOutcome> {
        validate::session_id(session)?;
        let at = (session.to_owned(), through_index);
        self.transaction("trimming", |on| Box::pin(lifecycle::trim(on, at)))
            .await
    }

    async fn fork(&self, source: &str, at_index: u64, target: &str) -> Result<ForkOutcome> {
        validate::session_id(source)?;
        validate::session_id(target)?;
        rules::fork::check_request(source, at_index, target)?;
        let default_expiry = self.options().default_expiry;
        let at = (
            source.to_owned(),
            at_index,
            target.to_owned(),
            default_expiry,
        );
        self.transaction("forking", |on| Box::pin(crate::fork::fork(on, at)))
            .await
    }

    async fn close(&self) {
        self.shut();
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.options().clock.clone()
    }
}
