//! Live event feeds (ST1, ST2, ST3, ST4, ST5) and presence subscriptions (P4).
//!
//! The feed loop is `a2_core::feed`'s; this store gives its `LogTail`. A
//! feed registers a listener on its session's channel through the
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

use a2_core::feed::{Change, FeedSource, LogPage, LogTail};
use a2_core::presence::{self, Heard, PresenceTail};
use a2_core::{
    Error, Event, Millis, PresenceEntry, PresencePatch, PresenceStream, Result, validate,
};
use async_trait::async_trait;
use serde_json::Value as Json;
use tokio::sync::Notify;

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

/// The Redis store's side of a live feed (see `a2_core::feed::tail`): a
/// listener on its session's channel and, on a subscriber that hears
/// publishes, the instance's entry in the session's mark.
struct Tail {
    inner: Arc<Inner>,
    session: String,
    inbox: Arc<Inbox>,
    _subscription: Subscription,
    /// Set before the first read; dropped after the subscription (fields
    /// drop in order), so the mark never ends before the listening does.
    mark: Option<MarkHold>,
    /// Whether the feed still has to join its session's mark: only on a
    /// subscriber that hears wake-ups.
    must_follow: bool,
    /// Wake-ups taken from the inbox and not yet handed to the loop.
    pending: VecDeque<Change>,
}

#[async_trait]
impl LogTail for Tail {
    /// One page of `XRANGE` from the event at `after` (when checked) with
    /// the session's bounds (R1).
    async fn read(&mut self, after: u64, check: bool, limit: usize) -> Result<LogPage> {
        if self.must_follow {
            self.follow().await?;
        }
        // What the inbox holds was published before this read, which
        // therefore covers it.
        let inbox = self.inbox.take();
        self.pending.clear();
        if let Some(error) = inbox.failed {
            return Err(error);
        }
        let from = if check { after - 1 } else { after };
        let (bounds, events) = match self
            .inner
            .read_events_after(&self.session, from, limit)
            .await
        {
            // The event at the feed's position was trimmed (the next one
            // may not be): read after it, unchecked.
            Err(Error::Trimmed { first_index, .. }) if check && first_index > after => {
                self.inner
                    .read_events_after(&self.session, after, limit)
                    .await?
            }
            read => read?,
        };
        Ok(LogPage {
            checked: check && bounds.first <= after,
            events,
            deadline: bounds.deadline,
            closed: bounds.closed,
        })
    }

    async fn change(&mut self) -> Change {
        loop {
            if let Some(change) = self.pending.pop_front() {
                return change;
            }
            let inbox = self.inbox.take();
            if let Some(error) = inbox.failed {
                return Change::End(error);
            }
            if inbox.dirty {
                // Something may have been missed (an overflow, a
                // resubscription, a lost mark).
                return Change::Read;
            }
            for message in &inbox.messages {
                let change = self.wake_up(message);
                self.pending.push_back(change);
            }
            if self.pending.is_empty() {
                // Push delivery is all a caught-up feed waits for: a lost
                // wake-up can only follow a lost mark or subscription, and
                // both are found and call for a read (`src/keeper.rs`,
                // `resync`).
                self.inbox.notify.notified().await;
            }
        }
    }

    fn now(&self) -> Millis {
        self.inner.now()
    }

    fn page(&self) -> usize {
        self.inner.feed_page()
    }
}

impl Tail {
    /// Joins the session's mark before the first read: every write the
    /// feed's reads miss sees the mark and publishes (ST2). The instance
    /// joins once for all its feeds of the session: the first refreshes
    /// its entry, the others wait for that. The place is taken first, so
    /// a feed dropped while it waits still gives it back.
    async fn follow(&mut self) -> Result<()> {
        let listener = Arc::downgrade(&self.inbox) as std::sync::Weak<dyn Listener>;
        let (id, count_in) = self.inner.marks.join(&self.session, listener, || {
            let (inner, session) = (self.inner.clone(), self.session.clone());
            Box::pin(async move { inner.follow(&session, Follow::Refresh).await })
        });
        self.mark = Some(MarkHold {
            inner: self.inner.clone(),
            session: self.session.clone(),
            id,
        });
        self.must_follow = false;
        count_in.await
    }

    /// What one wake-up says changed.
    fn wake_up(&self, message: &[u8]) -> Change {
        let Ok(wake) = serde_json::from_slice::<Wake>(message) else {
            return Change::Read;
        };
        if wake.c.is_some() {
            // A close: read, to learn where the log ends (CL4).
            return Change::Read;
        }
        if wake.k.is_some() {
            return Change::AtMost(wake.f);
        }
        let (Some(created_at), Some(carried)) = (wake.t, wake.e) else {
            return Change::Reached(wake.f);
        };
        let Some(first) = (wake.f + 1).checked_sub(carried.len() as u64) else {
            return Change::Read;
        };
        if first == 0 {
            return Change::Read;
        }
        let mut events = Vec::with_capacity(carried.len());
        for (k, Carried(id, event_type, payload, lane, cause)) in carried.into_iter().enumerate() {
            let cause = match cause.as_deref().map(crate::codec::parse_cause) {
                Some(None) => return Change::Read, // Unreadable: read instead.
                Some(cause) => cause,
                None => None,
            };
            events.push(Event {
                id,
                event_type,
                payload,
                index: first + k as u64,
                session_id: self.session.clone(),
                created_at,
                cause,
                lane,
            });
        }
        Change::Appended(events)
    }
}

/// The Redis store's own feed of a session, which its shared readers open
/// (see `a2_core::feed`).
pub struct Source(pub Arc<Inner>);

impl FeedSource for Source {
    fn tail(&self, session: &str) -> Result<Box<dyn LogTail>> {
        self.0.check_open()?;
        let inbox = Arc::new(Inbox::default());
        let channel = self.0.session_keys(session).events_channel.clone();
        let subscription = self.0.subscriber.subscribe(&channel, inbox.clone());
        Ok(Box::new(Tail {
            must_follow: self.0.subscriber.hears_publishes(),
            inner: self.0.clone(),
            session: session.to_owned(),
            inbox,
            _subscription: subscription,
            mark: None,
            pending: VecDeque::new(),
        }))
    }
}

/// A feed's place among its instance's feeds of the session (`Marks`),
/// taken before the feed's first read; dropping the last one releases the
/// instance's entry in the session's mark (ST2).
pub(crate) struct MarkHold {
    pub(crate) inner: Arc<Inner>,
    pub(crate) session: String,
    pub(crate) id: u64,
}

impl Drop for MarkHold {
    fn drop(&mut self) {
        let session = std::mem::take(&mut self.session);
        let release = self.inner.marks.leave(&session, self.id, || {
            let (inner, session) = (self.inner.clone(), session.clone());
            Box::pin(async move {
                if let Err(error) = inner.follow(&session, Follow::Release).await {
                    tracing::debug!(%error, session, "a feed could not release its session's mark; it lapses");
                }
            })
        });
        let Some(release) = release else {
            return;
        };
        // Without a runtime, or once the store is closed (which released
        // every entry), nothing is sent: the entry lapses within three
        // refresh periods, as after a crash.
        let runtime = tokio::runtime::Handle::try_current();
        let inner = self.inner.clone();
        match runtime {
            Ok(runtime) if !inner.is_closed() => {
                runtime.spawn(async move {
                    release.clone().await;
                    inner.marks.released(&session, &release);
                });
            }
            _ => inner.marks.released(&session, &release),
        }
    }
}

/// The Redis store's side of a presence subscription: a listener on its
/// namespace's channel.
struct Presence {
    inner: Arc<Inner>,
    ns: String,
    inbox: Arc<Inbox>,
    _subscription: Subscription,
    /// What was heard and not yet handed over.
    heard: VecDeque<Heard>,
}

#[async_trait]
impl PresenceTail for Presence {
    async fn next(&mut self) -> Heard {
        loop {
            if let Some(heard) = self.heard.pop_front() {
                return heard;
            }
            let inbox = self.inbox.take();
            if let Some(error) = inbox.failed {
                return Heard::End(error);
            }
            for message in &inbox.messages {
                if let Ok(patch) = serde_json::from_slice::<PresencePatch>(message) {
                    self.heard.push_back(Heard::Patch(patch));
                }
            }
            // The connection came back (or the inbox overflowed): patches
            // may have been missed.
            if inbox.dirty {
                self.heard.push_back(Heard::Missed);
            }
            if self.heard.is_empty() {
                self.inbox.notify.notified().await;
            }
        }
    }

    async fn reread(&mut self) -> Result<Vec<PresenceEntry>> {
        self.inner.presence_entries(&self.ns).await
    }
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
    let tail = Presence {
        inner,
        ns: ns.to_owned(),
        inbox,
        _subscription: subscription,
        heard: VecDeque::new(),
    };
    Ok(presence::subscription(Box::new(tail), baseline))
}

#[cfg(test)]
mod tests;
