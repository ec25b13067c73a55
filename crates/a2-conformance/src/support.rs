//! What the cases share. This crate is a test suite: a function here that meets
//! an unexpected outcome panics with a message saying what it expected, the
//! way an assertion does.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use a2_core::{
    Claim, ClaimOutcome, ClaimRequest, CompleteOutcome, CompleteRequest, ErrorCode, FailOutcome,
    FailRequest, Lease, ListSessionsOptions, Millis, NewEvent, PageRequest, PresenceMeta,
    ReadRange, Result, SessionSummary, SnapshotInfo, Store, StoredEvent,
};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

/// How long a case waits for something asynchronous (a feed item, a presence
/// patch) before it fails. Generous: it only matters when the store is wrong.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// The lease most cases use.
pub(crate) const TTL: u64 = 10_000;

/// An unsettled, lane-less event with a generated id and a payload naming it.
pub(crate) fn ev(event_type: &str) -> NewEvent {
    NewEvent::new(event_type, json!({ "type": event_type }))
}

/// An unsettled, lane-less event with this id.
pub(crate) fn ev_id(id: &str) -> NewEvent {
    NewEvent::new("test.event", json!({ "id": id })).id(id)
}

/// Appends and returns the stored rows, panicking on an error.
pub(crate) async fn append(
    store: &dyn Store,
    session: &str,
    events: Vec<NewEvent>,
) -> Vec<StoredEvent> {
    match store.append(session, events).await {
        Ok(outcome) => outcome.events,
        Err(err) => panic!("append to {session:?} failed: {err}"),
    }
}

/// Appends `n` lane-less unsettled events `e1…en` (types `t1…tn`).
pub(crate) async fn append_n(store: &dyn Store, session: &str, n: usize) -> Vec<StoredEvent> {
    let events = (1..=n).map(|i| ev(&format!("t{i}"))).collect();
    append(store, session, events).await
}

/// Every row of a session that is retained (TR3: from its first retained
/// index).
pub(crate) async fn read_all(store: &dyn Store, session: &str) -> Vec<StoredEvent> {
    let mut range = ReadRange::default();
    loop {
        match store.read(session, range).await {
            Ok(rows) => return rows,
            Err(a2_core::Error::Trimmed { first_index, .. })
                if range.after_index + 1 < first_index =>
            {
                range.after_index = first_index - 1;
            }
            Err(err) => panic!("read of {session:?} failed: {err}"),
        }
    }
}

/// The row at `index`.
pub(crate) async fn row(store: &dyn Store, session: &str, index: u64) -> StoredEvent {
    let rows = read_all(store, session).await;
    match rows.into_iter().find(|r| r.event.index == index) {
        Some(row) => row,
        None => panic!("session {session:?} has no event {index}"),
    }
}

/// The indexes of some rows.
pub(crate) fn indexes(rows: &[StoredEvent]) -> Vec<u64> {
    rows.iter().map(|r| r.event.index).collect()
}

/// A claim request with a ttl lease and no exclusions.
pub(crate) fn claim_request(session: &str, holder: &str, ttl: u64, limit: usize) -> ClaimRequest {
    ClaimRequest {
        session: session.to_owned(),
        holder: holder.to_owned(),
        lease: Lease::Ttl(ttl),
        exclude_indexes: Vec::new(),
        limit,
    }
}

/// `claim_available`, panicking on an error.
pub(crate) async fn claim(
    store: &dyn Store,
    session: &str,
    holder: &str,
    ttl: u64,
    limit: usize,
) -> ClaimOutcome {
    match store
        .claim_available(claim_request(session, holder, ttl, limit))
        .await
    {
        Ok(outcome) => outcome,
        Err(err) => panic!("claim in {session:?} failed: {err}"),
    }
}

/// `claim_available` that must hand out events.
pub(crate) async fn claimed(
    store: &dyn Store,
    session: &str,
    holder: &str,
    ttl: u64,
    limit: usize,
) -> Vec<StoredEvent> {
    match claim(store, session, holder, ttl, limit).await {
        ClaimOutcome::Claimed { events: rows, .. } => rows,
        other => panic!("expected Claimed in {session:?}, got {other:?}"),
    }
}

/// The (index, attempt) pairs of claimed rows.
pub(crate) fn claims_of(rows: &[StoredEvent]) -> Vec<Claim> {
    rows.iter()
        .map(|r| Claim {
            index: r.event.index,
            attempt: r.attempt_count,
        })
        .collect()
}

/// A claim value.
pub(crate) fn at(index: u64, attempt: u32) -> Claim {
    Claim { index, attempt }
}

/// `complete_attempt`.
pub(crate) async fn complete(
    store: &dyn Store,
    session: &str,
    index: u64,
    attempt: u32,
    events: Vec<NewEvent>,
) -> Result<CompleteOutcome> {
    store
        .complete_attempt(CompleteRequest {
            session: session.to_owned(),
            index,
            attempt,
            events,
            batch_size: None,
        })
        .await
}

/// `complete_attempt` that must complete; returns the returned rows.
pub(crate) async fn completed(
    store: &dyn Store,
    session: &str,
    index: u64,
    attempt: u32,
    events: Vec<NewEvent>,
) -> Vec<StoredEvent> {
    match complete(store, session, index, attempt, events).await {
        Ok(CompleteOutcome::Completed { events }) => events,
        other => panic!("expected Completed for {session:?} {index}/{attempt}, got {other:?}"),
    }
}

/// `fail_attempt`.
pub(crate) async fn fail(
    store: &dyn Store,
    session: &str,
    index: u64,
    attempt: u32,
    max_failures: u32,
    retry_at: Option<Millis>,
) -> Result<FailOutcome> {
    store
        .fail_attempt(FailRequest {
            session: session.to_owned(),
            index,
            attempt,
            error: format!("attempt {attempt} of {index} failed"),
            max_failures,
            retry_at,
        })
        .await
}

/// `fail_attempt` that must succeed.
pub(crate) async fn failed(
    store: &dyn Store,
    session: &str,
    index: u64,
    attempt: u32,
    max_failures: u32,
    retry_at: Option<Millis>,
) -> FailOutcome {
    match fail(store, session, index, attempt, max_failures, retry_at).await {
        Ok(outcome) => outcome,
        Err(err) => panic!("fail of {session:?} {index}/{attempt} errored: {err}"),
    }
}

/// Asserts that `result` is an error with `code`.
#[track_caller]
pub(crate) fn expect_code<T: Debug>(result: Result<T>, code: ErrorCode, what: &str) {
    match result {
        Err(err) => assert_eq!(err.code(), code, "{what}: wrong error {err}"),
        Ok(value) => panic!("{what}: expected {code:?}, got Ok({value:?})"),
    }
}

/// The listing of one session, which must be listed.
pub(crate) async fn summary(store: &dyn Store, session: &str) -> SessionSummary {
    match all_sessions(store)
        .await
        .into_iter()
        .find(|s| s.session_id == session)
    {
        Some(summary) => summary,
        None => panic!("{session:?} is not listed"),
    }
}

/// Every session summary, through all pages.
pub(crate) async fn all_sessions(store: &dyn Store) -> Vec<SessionSummary> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..10_000 {
        let page = match store
            .list_sessions(ListSessionsOptions::new(100).cursor(cursor.clone()))
            .await
        {
            Ok(page) => page,
            Err(err) => panic!("list_sessions failed: {err}"),
        };
        out.extend(page.sessions);
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
    panic!("list_sessions never returned a last page");
}

/// Every session with pending events, through all pages.
pub(crate) async fn all_pending(store: &dyn Store) -> Vec<String> {
    pending_pages(store, 100).await.concat()
}

/// The pages of `pending_sessions` with this page size.
pub(crate) async fn pending_pages(store: &dyn Store, limit: usize) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..10_000 {
        let page = match store
            .pending_sessions(PageRequest {
                cursor: cursor.clone(),
                limit,
            })
            .await
        {
            Ok(page) => page,
            Err(err) => panic!("pending_sessions failed: {err}"),
        };
        assert!(
            page.sessions.len() <= limit,
            "PS1: page longer than its limit"
        );
        out.push(page.sessions);
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
    panic!("pending_sessions never returned a last page");
}

/// Everything a user can see of some sessions: their rows, snapshots and
/// presence, plus the store's session listing and pending sessions. Bad input
/// must leave it unchanged.
#[derive(Debug, PartialEq)]
pub(crate) struct World {
    rows: BTreeMap<String, Vec<StoredEvent>>,
    snapshots: BTreeMap<String, Vec<SnapshotInfo>>,
    presence: BTreeMap<String, Vec<a2_core::PresenceEntry>>,
    listed: Vec<SessionSummary>,
    pending: Vec<String>,
}

impl World {
    /// The same view with a session left out of the listings.
    pub(crate) fn without(mut self, session: &str) -> World {
        self.listed.retain(|summary| summary.session_id != session);
        self.pending.retain(|id| id != session);
        self
    }
}

/// Reads the [`World`] around these sessions (also read as presence
/// namespaces).
pub(crate) async fn world(store: &dyn Store, sessions: &[&str]) -> World {
    let mut rows = BTreeMap::new();
    let mut snapshots = BTreeMap::new();
    let mut presence = BTreeMap::new();
    for &session in sessions {
        rows.insert(session.to_owned(), read_all(store, session).await);
        let snaps = match store.list_snapshots(session).await {
            Ok(snaps) => snaps,
            Err(err) => panic!("list_snapshots of {session:?} failed: {err}"),
        };
        snapshots.insert(session.to_owned(), snaps);
        let entries = match store.presence_read(session).await {
            Ok(entries) => entries,
            Err(err) => panic!("presence_read of {session:?} failed: {err}"),
        };
        presence.insert(session.to_owned(), entries);
    }
    World {
        rows,
        snapshots,
        presence,
        listed: all_sessions(store).await,
        pending: all_pending(store).await,
    }
}

/// The next item of a feed, waiting at most [`WAIT`].
pub(crate) async fn next_item<S, T>(stream: &mut S, what: &str) -> Result<T>
where
    S: Stream<Item = Result<T>> + Unpin,
{
    match tokio::time::timeout(WAIT, stream.next()).await {
        Ok(Some(item)) => item,
        Ok(None) => panic!("{what}: the feed ended"),
        Err(_) => panic!("{what}: nothing arrived within {WAIT:?}"),
    }
}

/// The next `n` events of a feed, each required to be `Ok`.
pub(crate) async fn next_indexes<S>(stream: &mut S, n: usize, what: &str) -> Vec<u64>
where
    S: Stream<Item = Result<a2_core::Event>> + Unpin,
{
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        match next_item(stream, what).await {
            Ok(event) => out.push(event.index),
            Err(err) => panic!("{what}: the feed failed after {out:?}: {err}"),
        }
    }
    out
}

/// Presence metadata.
pub(crate) fn meta(at: Millis, ttl_ms: u64) -> PresenceMeta {
    PresenceMeta {
        seen: at,
        at,
        ttl_ms,
    }
}

/// Presence values from pairs; `Value::Null` stands for a deletion.
pub(crate) fn values(pairs: &[(&str, Value)]) -> BTreeMap<String, Option<Value>> {
    pairs
        .iter()
        .map(|(field, value)| {
            let value = if value.is_null() {
                None
            } else {
                Some(value.clone())
            };
            ((*field).to_owned(), value)
        })
        .collect()
}

/// `revive`.
pub(crate) async fn revive(
    store: &dyn Store,
    session: &str,
    index: u64,
) -> Result<a2_core::ReviveOutcome> {
    store.revive(session, index).await
}

/// `revive` that must revive; returns the revived row.
pub(crate) async fn revived(store: &dyn Store, session: &str, index: u64) -> StoredEvent {
    match revive(store, session, index).await {
        Ok(a2_core::ReviveOutcome::Revived(row)) => row,
        other => panic!("expected Revived for {session:?} {index}, got {other:?}"),
    }
}

/// The listed counters of a session: `(event_count, pending_count,
/// failed_count, attempt_count, failure_count)`.
pub(crate) async fn counters(store: &dyn Store, session: &str) -> (u64, u64, u64, u64, u64) {
    let all = all_sessions(store).await;
    match all.iter().find(|x| x.session_id == session) {
        Some(x) => (
            x.event_count,
            x.pending_count,
            x.failed_count,
            x.attempt_count,
            x.failure_count,
        ),
        None => panic!("session {session:?} is not listed"),
    }
}

/// The next wake-up within 200 ms, or `None`.
pub(crate) async fn next_wakeup(wakeups: &mut a2_core::WakeupStream) -> Option<String> {
    next_wakeup_within(wakeups, Duration::from_millis(200)).await
}

/// The next wake-up of `wakeups` within `wait`, if any.
pub(crate) async fn next_wakeup_within(
    wakeups: &mut a2_core::WakeupStream,
    wait: Duration,
) -> Option<String> {
    match tokio::time::timeout(wait, wakeups.next()).await {
        Ok(Some(woken)) => Some(woken.expect("PS2: a wake-up, not an error")),
        Ok(None) => panic!("PS2: the wake-up stream ended"),
        Err(_) => None,
    }
}

/// `pending_wakeups` of `store`, live when it returns (PS2): every wake-up
/// published from then on reaches it.
pub(crate) async fn live_wakeups(store: &dyn Store) -> a2_core::WakeupStream {
    match store.pending_wakeups().await {
        Ok(wakeups) => wakeups,
        Err(err) => panic!("PS2: pending_wakeups failed: {err}"),
    }
}

/// `cancellations` of `store`, live when it returns (CN5).
pub(crate) async fn live_cancellations(store: &dyn Store) -> a2_core::CancelStream {
    match store.cancellations().await {
        Ok(cancels) => cancels,
        Err(err) => panic!("CN5: cancellations failed: {err}"),
    }
}
