//! Live event feeds (ST1, ST2, ST3, ST4, ST5) and presence subscriptions (P4).
//!
//! A feed registers a listener on its session's channel through the
//! [`Subscriber`](crate::subscriber::Subscriber) seam, then alternates
//! between two sources:
//!
//! - wake-ups in its inbox: a caught-up feed applies the events a wake-up
//!   carries when they continue its sequence, without reading;
//! - catch-up reads (`XRANGE`, a bounded page at a time) whenever it cannot
//!   be sure: at the start, after a gap, an oversized (frontier-only) or
//!   unreadable wake-up, an inbox overflow, a (re)subscription, and when
//!   the keeper finds its session's mark was lost (`src/keeper.rs`).
//!   No timer: an idle feed costs nothing but its share of the keeper's
//!   one refresh per period.
//!
//! A feed only ever delivers the event following the last one it delivered,
//! so whatever the mix of sources, it yields each event exactly once, in
//! order. A read failure or the store closing ends it with
//! `StoreUnavailable`; a log that skips an index ends it with `Corrupted`
//! (E1), after the events before the gap.
//!
//! # A cleared session (ST6)
//! A feed remembers the id of the last event it queued. A catch-up read
//! starts one event earlier and checks that this event is still there; a
//! wake-up carrying the event at that index checks its id, and one with the
//! feed's frontier but no events calls for such a read. A new log reaches
//! the feed's last index before it passes it, and every wake-up that
//! reaches it carries that event or calls for a read, so a clear is found
//! at the latest when the new log passes the feed's position; a lost
//! wake-up leads to a read, which finds it too. When the event is
//! gone or another id holds its index, the session was cleared under the
//! feed: it ends with `SessionCleared`.
//!
//! # Closed and trimmed sessions (CL4, TR3)
//! Every catch-up read returns the session's bounds with its page: a feed
//! that has read through the frontier of the session's close ends cleanly
//! (a close publishes a wake-up marked `"c"` that calls for that read), and
//! one whose next event was trimmed away yields `Trimmed` and ends. When
//! the event at the feed's position was trimmed but the next one is
//! retained, its id cannot be checked (ST6) and the read starts after it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use a2_core::feed::{FeedSource, ReadCounter};
use a2_core::presence::PresenceView;
use a2_core::{Error, Event, EventStream, PresencePatch, PresenceStream, Result, validate};
use futures::StreamExt;
use serde_json::Value as Json;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::follows::Following;
use crate::inner::Inner;
use crate::ops::follow::Follow;
use crate::subscriber::{Listener, Subscription};

/// A feed whose unread wake-ups exceed this drops them and catches up by
/// reading (ST4).
pub const INBOX_CAP_BYTES: usize = 512 * 1024;

#[derive(Default)]
struct InboxState {
    messages: VecDeque<Vec<u8>>,
    bytes: usize,
    /// Something may have been missed: read before trusting the inbox.
    dirty: bool,
    failed: Option<Error>,
}

/// The listener half of a feed: what the subscriber connection hands over.
#[derive(Default)]
struct Inbox {
    // A std mutex: held only to push or take messages, never across an
    // await.
    state: Mutex<InboxState>,
    notify: Notify,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, InboxState> {
        // Every critical section leaves the state consistent, so a poisoned
        // lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self) -> InboxState {
        std::mem::take(&mut *self.lock())
    }
}

impl Listener for Inbox {
    fn message(&self, payload: &[u8]) {
        {
            let mut state = self.lock();
            if state.bytes + payload.len() > INBOX_CAP_BYTES {
                state.messages.clear();
                state.bytes = 0;
                state.dirty = true;
            } else {
                state.bytes += payload.len();
                state.messages.push_back(payload.to_vec());
            }
        }
        self.notify.notify_one();
    }

    fn resync(&self) {
        self.lock().dirty = true;
        self.notify.notify_one();
    }

    fn fail(&self, error: Error) {
        self.lock().failed = Some(error);
        self.notify.notify_one();
    }
}

/// A wake-up: `{"f": frontier, "t": created_at, "e": [[id, type, payload,
/// lane?, cause?]...]}` (`Batch::wake`).
#[derive(serde::Deserialize)]
struct Wake {
    f: u64,
    #[serde(default)]
    t: Option<i64>,
    #[serde(default)]
    e: Option<Vec<Carried>>,
    /// Set by a close (CL4): read, to learn where the log ends.
    #[serde(default)]
    c: Option<u8>,
    /// Set by the keeper (`src/keeper.rs`), which read the frontier `f`:
    /// a feed behind it reads, one at it or past it does nothing.
    #[serde(default)]
    k: Option<u8>,
}

/// An event a wake-up carries: id, type, payload, then its lane and its
/// cause (`{index}:{attempt}[:{batch}]`) when it has either.
#[derive(serde::Deserialize)]
struct Carried(
    String,
    String,
    Json,
    #[serde(default)] Option<String>,
    #[serde(default)] Option<String>,
);

/// The keeper's message to the feeds of a session whose frontier it read.
pub(crate) fn frontier_message(frontier: u64) -> Vec<u8> {
    format!(r#"{{"f":{frontier},"k":1}}"#).into_bytes()
}

struct EventFeed {
    inner: Arc<Inner>,
    session: String,
    inbox: Arc<Inbox>,
    _subscription: Subscription,
    /// Set before the first read; dropped after the subscription (fields
    /// drop in order), so the mark never ends before the listening does.
    following: Option<Following>,
    /// Whether the feed still has to join its session's mark: only on a
    /// subscriber that hears wake-ups.
    must_follow: bool,
    /// The last index handed to the consumer or queued in `ready`.
    last: u64,
    /// The id of the event at `last`, once one was queued (ST6).
    last_id: Option<String>,
    reads: ReadCounter,
    /// A terminal error, returned once `ready` is drained: nothing follows
    /// it (E1).
    error: Option<Error>,
    ready: VecDeque<Event>,
    must_read: bool,
    /// EX4: when an idle session's deadline passes, the feed reads to
    /// learn that it expired.
    deadline_read: Option<Instant>,
    /// The session is closed and this feed read its last event (CL4).
    complete: bool,
    /// The session's deadline at the last read (EX4).
    deadline: Option<a2_core::Millis>,
    done: bool,
}

/// The Redis store's own feed of a session, which its shared readers open
/// (see `a2_core::feed`).
pub struct Source(pub Arc<Inner>);

impl FeedSource for Source {
    fn open(
        &self,
        session: &str,
        after_index: u64,
        after_id: Option<String>,
        reads: ReadCounter,
    ) -> EventStream {
        event_stream(self.0.clone(), session, after_index, after_id, reads)
    }
}

/// The live feed of `session` after `after_index` (ST1).
fn event_stream(
    inner: Arc<Inner>,
    session: &str,
    after_index: u64,
    after_id: Option<String>,
    reads: ReadCounter,
) -> EventStream {
    if let Err(e) = validate::session_id(session) {
        return futures::stream::once(async move { Err(e) }).boxed();
    }
    if inner.is_closed() {
        return futures::stream::once(async { Err(Error::closed("the store is closed")) }).boxed();
    }
    let inbox = Arc::new(Inbox::default());
    let channel = inner.session_keys(session).events_channel.clone();
    let subscription = inner.subscriber.subscribe(&channel, inbox.clone());
    let must_follow = inner.subscriber.hears_publishes();
    let feed = EventFeed {
        deadline_read: None,
        inner,
        session: session.to_owned(),
        inbox,
        _subscription: subscription,
        following: None,
        must_follow,
        last: after_index,
        last_id: after_id,
        reads,
        error: None,
        ready: VecDeque::new(),
        must_read: true,
        complete: false,
        deadline: None,
        done: false,
    };
    futures::stream::unfold(feed, |mut feed| async move {
        let item = feed.next().await?;
        Some((item, feed))
    })
    .boxed()
}

impl EventFeed {
    async fn next(&mut self) -> Option<Result<Event>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(Ok(event));
            }
            if let Some(error) = self.error.take() {
                self.done = true;
                return Some(Err(error));
            }
            if self.done || self.complete {
                // CL4: a closed log read to its end ends the feed cleanly.
                return None;
            }
            if self.must_follow {
                // Joined before the first read: every write the feed's
                // reads miss sees the mark and publishes (ST2). The
                // instance joins once for all its feeds of the session:
                // the first refreshes its entry, the others wait for that.
                // The place is taken first, so a feed dropped while it
                // waits still gives it back.
                let listener = Arc::downgrade(&self.inbox) as std::sync::Weak<dyn Listener>;
                let (id, count_in) = self.inner.follows.join(&self.session, listener, || {
                    let (inner, session) = (self.inner.clone(), self.session.clone());
                    Box::pin(async move { inner.follow(&session, Follow::Refresh).await })
                });
                self.following = Some(Following {
                    inner: self.inner.clone(),
                    session: self.session.clone(),
                    id,
                });
                self.must_follow = false;
                if let Err(error) = count_in.await {
                    self.done = true;
                    return Some(Err(error));
                }
            }
            let inbox = self.inbox.take();
            if let Some(error) = inbox.failed {
                self.done = true;
                return Some(Err(error));
            }
            if inbox.dirty || self.deadline_read.is_some_and(|at| Instant::now() >= at) {
                self.must_read = true;
            }
            if !self.must_read {
                for message in &inbox.messages {
                    if !self.apply(message) {
                        self.must_read = true;
                        break;
                    }
                }
            }
            if self.must_read {
                if let Err(error) = self.catch_up().await {
                    // Events queued before the failure still go out first.
                    self.error = Some(error);
                }
                continue;
            }
            if !self.ready.is_empty() {
                continue;
            }
            // Push delivery is all a caught-up feed waits for: a lost
            // wake-up can only follow a lost mark or subscription, and both
            // are found and call for a read (`src/keeper.rs`, `resync`).
            match self.deadline_read {
                Some(at) => tokio::select! {
                    () = self.inbox.notify.notified() => {}
                    () = tokio::time::sleep_until(at) => {}
                },
                None => self.inbox.notify.notified().await,
            }
        }
    }

    /// Applies one wake-up; false when it calls for a read instead.
    fn apply(&mut self, message: &[u8]) -> bool {
        let Ok(wake) = serde_json::from_slice::<Wake>(message) else {
            return false;
        };
        if wake.c.is_some() {
            return false;
        }
        if wake.k.is_some() {
            return wake.f <= self.last;
        }
        // A stale wake-up (the feed read past it) says nothing new.
        if wake.f < self.last {
            return true;
        }
        let (Some(created_at), Some(events)) = (wake.t, wake.e) else {
            // Frontier only: read, also when it equals ours, since the
            // event there may belong to a new log (ST6).
            return wake.f == self.last && self.last_id.is_none();
        };
        let Some(first) = (wake.f + 1).checked_sub(events.len() as u64) else {
            return false;
        };
        if first == 0 || first > self.last + 1 {
            return false;
        }
        for (k, Carried(id, event_type, payload, lane, cause)) in events.into_iter().enumerate() {
            let index = first + k as u64;
            if index < self.last {
                continue;
            }
            if index == self.last {
                if self.last_id.as_ref().is_some_and(|last| *last != id) {
                    // Another event at our last index: let a read confirm
                    // the clear (ST6).
                    return false;
                }
                continue;
            }
            let cause = match cause.as_deref().map(crate::codec::parse_cause) {
                Some(None) => return false, // Unreadable: read instead.
                Some(cause) => cause,
                None => None,
            };
            self.ready.push_back(Event {
                id,
                event_type,
                payload,
                index,
                session_id: self.session.clone(),
                created_at,
                cause,
                lane,
            });
            self.last = index;
            self.last_id = self.ready.back().map(|e| e.id.clone());
        }
        true
    }

    /// Reads one page after the last queued event (R1); another page
    /// follows on the next turn when this one was full.
    ///
    /// Once an event was queued, the read starts at that event and checks
    /// it is still there (ST6).
    async fn catch_up(&mut self) -> Result<()> {
        let check = self.last_id.is_some() && self.last > 0;
        let from = if check { self.last - 1 } else { self.last };
        self.reads.count();
        let want = self.inner.feed_page();
        let (bounds, page) = match self
            .inner
            .read_events_after(&self.session, from, want)
            .await
        {
            // The event at the feed's position was trimmed (the next one
            // may not be): read after it, unchecked.
            Err(Error::Trimmed { first_index, .. }) if check && first_index > self.last => {
                self.reads.count();
                self.inner
                    .read_events_after(&self.session, self.last, want)
                    .await?
            }
            read => read?,
        };
        let check = check && bounds.first <= self.last;
        self.must_read = page.len() == want;
        // EX4: an idle session's feed reads again at its deadline.
        self.deadline_read = bounds.deadline.map(|deadline| {
            let wait = deadline.saturating_sub(self.inner.now()).max(0) as u64 + 1;
            Instant::now() + std::time::Duration::from_millis(wait)
        });
        let mut page = page.into_iter();
        if check {
            let still_there = page.next().is_some_and(|event| {
                event.index == self.last && Some(&event.id) == self.last_id.as_ref()
            });
            if !still_there {
                let now = self.inner.now();
                return Err(a2_core::rules::lifecycle::log_gone(
                    &self.session,
                    self.deadline,
                    now,
                ));
            }
        }
        for event in page {
            if event.index != self.last + 1 {
                return Err(Error::corrupted(
                    format!(
                        "the log of {:?} skips from {} to {}",
                        self.session, self.last, event.index
                    ),
                    Some(&self.session),
                    Some(self.last + 1),
                ));
            }
            self.last = event.index;
            self.last_id = Some(event.id.clone());
            self.ready.push_back(event);
        }
        self.complete = a2_core::rules::lifecycle::feed_complete(bounds.closed, self.last);
        self.deadline = bounds.deadline;
        Ok(())
    }
}

struct PresenceFeed {
    inner: Arc<Inner>,
    ns: String,
    inbox: Arc<Inbox>,
    _subscription: Subscription,
    /// What the subscriber has been shown: the baseline, then every patch
    /// reported.
    view: PresenceView,
    ready: VecDeque<PresencePatch>,
    done: bool,
}

/// Presence patches of `ns` (P4), returned once the subscription is live:
///
/// 1. the listener registers with the store's push connection (which sends
///    `SUBSCRIBE` unless this store holds the channel already), then a sync
///    waits until the server has confirmed the subscription and answered a
///    `PING` sent after it, and every message received before that answer
///    has been handed over. From then on the listener hears every patch the
///    server publishes on the channel, in the order the patches applied;
/// 2. what the listener heard until then is dropped: those writes were
///    applied before the baseline read is sent, so it holds them;
/// 3. the baseline read of the namespace: what recovery diffs against
///    after a reconnect.
///
/// Every patch applied after this returns is therefore reported, once and
/// in order, unless the push connection is lost; it then re-reads and
/// reports the difference (a patch racing that re-read may come both in the
/// difference and as itself). A patch applied while this runs may be
/// reported too. A bad `ns` is `InvalidArgument`; a closed store, a failed
/// push connection or a failed read is `StoreUnavailable`.
pub async fn presence_stream(inner: Arc<Inner>, ns: &str) -> Result<PresenceStream> {
    validate::name("namespace", ns)?;
    inner.check_open()?;
    let inbox = Arc::new(Inbox::default());
    let channel = inner.session_keys(ns).presence_channel.clone();
    let subscription = inner.subscriber.subscribe(&channel, inbox.clone());
    // The subscriber bounds each step of a sync by its connect and command
    // timeouts; this bound only guards against it stalling.
    let synced = tokio::time::timeout(inner.subscribe_timeout, inner.subscriber.sync()).await;
    // What was heard so far is dropped: it was applied before the baseline
    // read below is sent, so the read holds it.
    if let Some(error) = inbox.take().failed {
        return Err(error);
    }
    match synced {
        Ok(Ok(())) => {}
        Ok(Err(error)) => return Err(error),
        Err(_) => {
            return Err(Error::unavailable(format!(
                "timed out subscribing to the presence of {ns:?}"
            )));
        }
    }
    let baseline = inner.presence_entries(ns).await?;
    let feed = PresenceFeed {
        inner,
        ns: ns.to_owned(),
        inbox,
        _subscription: subscription,
        view: PresenceView::from_entries(baseline),
        ready: VecDeque::new(),
        done: false,
    };
    Ok(futures::stream::unfold(feed, |mut feed| async move {
        let item = feed.next().await?;
        Some((item, feed))
    })
    .boxed())
}

impl PresenceFeed {
    async fn next(&mut self) -> Option<Result<PresencePatch>> {
        loop {
            if let Some(patch) = self.ready.pop_front() {
                return Some(Ok(patch));
            }
            if self.done {
                return None;
            }
            let inbox = self.inbox.take();
            if let Some(error) = inbox.failed {
                self.done = true;
                return Some(Err(error));
            }
            for message in &inbox.messages {
                if let Ok(patch) = serde_json::from_slice::<PresencePatch>(message) {
                    self.view.apply(&patch);
                    self.ready.push_back(patch);
                }
            }
            // The connection came back (or the inbox overflowed): patches
            // may have been missed.
            if inbox.dirty
                && let Err(error) = self.resync().await
            {
                self.done = true;
                return Some(Err(error));
            }
            if !self.ready.is_empty() {
                continue;
            }
            self.inbox.notify.notified().await;
        }
    }

    /// Re-reads the namespace and emits what changed since the view was
    /// last right (P4 recovery), the way every store reports recovery
    /// ([`PresenceView::resync`]).
    async fn resync(&mut self) -> Result<()> {
        let entries = self.inner.presence_entries(&self.ns).await?;
        self.ready.extend(self.view.resync(entries));
        Ok(())
    }
}

#[cfg(test)]
mod tests;
