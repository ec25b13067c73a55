//! Live event feeds (ST1–ST5) and presence subscriptions (P4).
//!
//! A feed registers a listener on its session's channel through the
//! [`Subscriber`](crate::subscriber::Subscriber) seam, then alternates
//! between two sources:
//!
//! - wake-ups in its inbox: a caught-up feed applies the events a wake-up
//!   carries when they continue its sequence, without reading;
//! - catch-up reads (`XRANGE`, a bounded page at a time) whenever it cannot
//!   be sure: at the start, after a gap, an oversized (frontier-only) or
//!   unreadable wake-up, an inbox overflow, a (re)subscription, and every
//!   safety interval.
//!
//! A feed only ever delivers the event following the last one it delivered,
//! so whatever the mix of sources, it yields each event exactly once, in
//! order. A read failure or the store closing ends it with
//! `StoreUnavailable`.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use a2_core::presence::PresenceView;
use a2_core::{
    Error, Event, EventStream, Millis, PresenceEntry, PresencePatch, PresenceStream, Result,
    validate,
};
use futures::StreamExt;
use serde_json::Value as Json;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::store::{Inner, PAGE};
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

/// A wake-up: `{"f": frontier, "t": created_at, "e": [[id, type, payload]...]}`.
#[derive(serde::Deserialize)]
struct Wake {
    f: u64,
    #[serde(default)]
    t: Option<i64>,
    #[serde(default)]
    e: Option<Vec<(String, String, Json)>>,
}

struct EventFeed {
    inner: Arc<Inner>,
    session: String,
    inbox: Arc<Inbox>,
    _subscription: Subscription,
    /// The last index handed to the consumer or queued in `ready`.
    last: u64,
    ready: VecDeque<Event>,
    must_read: bool,
    next_safety_read: Instant,
    done: bool,
}

/// The live feed of `session` after `after_index` (ST1).
pub fn event_stream(inner: Arc<Inner>, session: &str, after_index: u64) -> EventStream {
    if let Err(e) = validate::session_id(session) {
        return futures::stream::once(async move { Err(e) }).boxed();
    }
    if inner.is_closed() {
        return futures::stream::once(async { Err(Error::unavailable("the store is closed")) })
            .boxed();
    }
    let inbox = Arc::new(Inbox::default());
    let channel = inner.session_keys(session).events_channel;
    let subscription = inner.subscriber.subscribe(&channel, inbox.clone());
    let feed = EventFeed {
        next_safety_read: Instant::now() + inner.safety_reread,
        inner,
        session: session.to_owned(),
        inbox,
        _subscription: subscription,
        last: after_index,
        ready: VecDeque::new(),
        must_read: true,
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
            if self.done {
                return None;
            }
            let inbox = self.inbox.take();
            if let Some(error) = inbox.failed {
                self.done = true;
                return Some(Err(error));
            }
            if inbox.dirty || Instant::now() >= self.next_safety_read {
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
                    self.done = true;
                    return Some(Err(error));
                }
                continue;
            }
            if !self.ready.is_empty() {
                continue;
            }
            tokio::select! {
                () = self.inbox.notify.notified() => {}
                () = tokio::time::sleep_until(self.next_safety_read) => {}
            }
        }
    }

    /// Applies one wake-up; false when it calls for a read instead.
    fn apply(&mut self, message: &[u8]) -> bool {
        let Ok(wake) = serde_json::from_slice::<Wake>(message) else {
            return false;
        };
        if wake.f <= self.last {
            return true;
        }
        let (Some(created_at), Some(events)) = (wake.t, wake.e) else {
            return false;
        };
        let Some(first) = (wake.f + 1).checked_sub(events.len() as u64) else {
            return false;
        };
        if first == 0 || first > self.last + 1 {
            return false;
        }
        for (k, (id, event_type, payload)) in events.into_iter().enumerate() {
            let index = first + k as u64;
            if index <= self.last {
                continue;
            }
            self.ready.push_back(Event {
                id,
                event_type,
                payload,
                index,
                session_id: self.session.clone(),
                created_at,
            });
            self.last = index;
        }
        true
    }

    /// Reads one page after the last queued event (R1); another page
    /// follows on the next turn when this one was full.
    async fn catch_up(&mut self) -> Result<()> {
        let page = self
            .inner
            .read_events_after(&self.session, self.last, PAGE)
            .await?;
        self.must_read = page.len() == PAGE;
        self.next_safety_read = Instant::now() + self.inner.safety_reread;
        for event in page {
            if event.index != self.last + 1 {
                return Err(Error::unavailable(format!(
                    "the log of {:?} skips from {} to {}",
                    self.session, self.last, event.index
                )));
            }
            self.last = event.index;
            self.ready.push_back(event);
        }
        Ok(())
    }
}

/// A presence subscription's first read of its namespace: each entry with
/// the writer's clock at its write.
type Baseline = futures::future::BoxFuture<'static, Result<Vec<(PresenceEntry, Option<Millis>)>>>;

/// How far the clocks of two processes sharing a store may disagree: an
/// entry stamped by its writer no more than this before a subscription
/// opened may have been written after it, and is reported once more when
/// the subscription takes effect.
pub const CLOCK_SKEW_MS: Millis = 1_000;

struct PresenceFeed {
    inner: Arc<Inner>,
    ns: String,
    inbox: Arc<Inbox>,
    _subscription: Subscription,
    /// The namespace as it was when the subscription was opened, until
    /// the first poll folds it into `view`.
    baseline: Option<Baseline>,
    /// The store clock when the subscription opened.
    opened_at: Millis,
    /// What the subscriber has been shown.
    view: PresenceView,
    /// Entries of the baseline that may have been written after the
    /// subscription opened, their messages unheard: the first resync
    /// reports them even when unchanged.
    uncertain: BTreeSet<(String, String)>,
    /// Patches the last resync reported: the messages of those very writes
    /// may still arrive, and are not reported twice.
    recovered: Vec<PresencePatch>,
    ready: VecDeque<PresencePatch>,
    done: bool,
}

/// Presence patches of `ns` (P4).
///
/// Every patch applied after this returns is reported, by any process:
/// - the listener is registered at once, so any message the subscriber
///   connection hears from now on reaches this subscription;
/// - the baseline read of the namespace is sent at once as well (on the
///   current tokio runtime, which finishes it even while the stream is not
///   polled);
/// - a write that lands before the channel subscription is confirmed is
///   not heard, but the confirmation makes the subscription re-read and
///   report the difference baseline → now, like a reconnect does;
/// - a write that lands before the baseline read is in the baseline: the
///   confirmation reports again every entry its writer stamped less than
///   [`CLOCK_SKEW_MS`] before the subscription opened (a duplicate at
///   worst), unless its message was heard meanwhile.
///
/// Outside a tokio runtime the baseline is read on the first poll instead.
pub fn presence_stream(inner: Arc<Inner>, ns: &str) -> PresenceStream {
    if let Err(e) = validate::name("namespace", ns) {
        return futures::stream::once(async move { Err(e) }).boxed();
    }
    if inner.is_closed() {
        return futures::stream::once(async { Err(Error::unavailable("the store is closed")) })
            .boxed();
    }
    let inbox = Arc::new(Inbox::default());
    let channel = inner.session_keys(ns).presence_channel;
    let subscription = inner.subscriber.subscribe(&channel, inbox.clone());
    let feed = PresenceFeed {
        baseline: Some(baseline(&inner, ns)),
        opened_at: inner.now(),
        inner,
        ns: ns.to_owned(),
        inbox,
        _subscription: subscription,
        view: PresenceView::default(),
        uncertain: BTreeSet::new(),
        recovered: Vec::new(),
        ready: VecDeque::new(),
        done: false,
    };
    futures::stream::unfold(feed, |mut feed| async move {
        let item = feed.next().await?;
        Some((item, feed))
    })
    .boxed()
}

/// Starts reading the namespace now: the request is handed to the command
/// connection before this returns, and a task on the current runtime
/// completes it, so the read is not held back by a consumer that polls
/// late (its command timeout runs from now).
fn baseline(inner: &Arc<Inner>, ns: &str) -> Baseline {
    let reading = inner.clone();
    let ns = ns.to_owned();
    let mut read: Baseline = Box::pin(async move { reading.presence_entries_written(&ns).await });
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return read;
    };
    // One poll sends the request (or finds the answer).
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    if let std::task::Poll::Ready(entries) = read.as_mut().poll(&mut context) {
        return Box::pin(std::future::ready(entries));
    }
    let task = runtime.spawn(read);
    Box::pin(async move {
        task.await
            .unwrap_or_else(|e| Err(Error::unavailable(format!("the presence read failed: {e}"))))
    })
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
            if let Some(baseline) = self.baseline.take() {
                match baseline.await {
                    // Messages heard meanwhile are applied on top below, in
                    // order; those already in the read change nothing.
                    Ok(entries) => {
                        let recent = self.opened_at.saturating_sub(CLOCK_SKEW_MS);
                        self.uncertain = entries
                            .iter()
                            .filter(|(_, written_at)| written_at.is_some_and(|w| w >= recent))
                            .map(|(e, _)| (e.participant.clone(), e.field.clone()))
                            .collect();
                        self.view = PresenceView::from_entries(entries.into_iter().map(|(e, _)| e));
                    }
                    Err(error) => {
                        self.done = true;
                        return Some(Err(error));
                    }
                }
            }
            let inbox = self.inbox.take();
            if let Some(error) = inbox.failed {
                self.done = true;
                return Some(Err(error));
            }
            for message in &inbox.messages {
                if let Ok(patch) = serde_json::from_slice::<PresencePatch>(message) {
                    self.learn(&patch);
                    if let Some(k) = self.recovered.iter().position(|p| *p == patch) {
                        self.recovered.swap_remove(k);
                        continue;
                    }
                    self.ready.push_back(patch);
                }
            }
            // The subscription took effect (or came back): what was written
            // before may not have been heard.
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

    fn learn(&mut self, patch: &PresencePatch) {
        // Heard: whatever the baseline held for these fields is now known.
        for field in patch.values.keys() {
            self.uncertain
                .remove(&(patch.participant.clone(), field.clone()));
        }
        self.view.apply(patch);
    }

    /// Re-reads the namespace and emits what changed since the view was
    /// last right (recovery after a reconnect or on confirmation, P4), the
    /// way every store reports recovery ([`PresenceView::resync`]), plus
    /// the baseline's uncertain entries that are still there.
    async fn resync(&mut self) -> Result<()> {
        let entries = self.inner.presence_entries(&self.ns).await?;
        let uncertain = std::mem::take(&mut self.uncertain);
        let patches = self.view.resync_reporting(entries, |participant, field| {
            uncertain.contains(&(participant.to_owned(), field.to_owned()))
        });
        self.recovered.clone_from(&patches);
        self.ready.extend(patches);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ST4: an inbox over 512 KiB drops its wake-ups and asks for a read.
    #[test]
    fn st4_inbox_overflow_drops_messages_and_marks_dirty() {
        let inbox = Inbox::default();
        let message = vec![b'x'; 100 * 1024];
        for _ in 0..5 {
            inbox.message(&message);
        }
        {
            let state = inbox.lock();
            assert_eq!(state.messages.len(), 5);
            assert!(!state.dirty);
        }
        inbox.message(&message);
        let state = inbox.take();
        assert!(state.messages.is_empty(), "the inbox was dropped");
        assert!(state.dirty, "the feed must catch up by reading");
        assert_eq!(state.bytes, 0);
    }

    #[test]
    fn wake_ups_parse_with_and_without_events() {
        let carried: Wake = serde_json::from_str(r#"{"f":3,"t":5,"e":[["a","t",{"x":1}]]}"#)
            .expect("a carried wake-up");
        assert_eq!(carried.f, 3);
        assert_eq!(carried.e.map(|e| e.len()), Some(1));
        let bare: Wake = serde_json::from_str(r#"{"f":9}"#).expect("a frontier");
        assert!(bare.e.is_none() && bare.t.is_none());
    }
}
