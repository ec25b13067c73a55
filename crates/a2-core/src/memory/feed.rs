//! Live feeds of the memory store: event streams (§6) and presence
//! subscriptions (P4).
//!
//! # Event feeds
//! Each session with an open feed has a `watch` channel carrying its
//! frontier; every write that appends sends the new frontier right after
//! releasing the store lock (a feed woken while the writer still held it
//! would only wait for the lock). A feed marks the channel seen and reads
//! the log under that lock, so a write either lands before the read (and
//! is read; its send, which follows, may wake the feed once more to find
//! nothing new) or after it (and its send wakes the feed): no wake-up is
//! lost and nothing is polled. A feed holds at most [`FEED_CHUNK`] events
//! at a time and reads the next chunk only once those are consumed, so its
//! memory is bounded whatever the backlog (ST4).
//!
//! A feed remembers the id of the last event it read; `clear` wakes the
//! session's feeds, and a feed that finds that event gone (or another in
//! its place) ends with `SessionCleared` (ST6).
//!
//! A feed remembers its session's deadline (EX1) from its last read and
//! wakes at it: a session that expired ends its feeds with
//! `SessionExpired` (EX4), as does one gone or replaced after that
//! deadline.
//!
//! A feed of a closed session ends cleanly once it delivered the close's
//! frontier (CL4); one whose next read starts before a trim point yields
//! `Trimmed` and ends (TR3).
//!
//! `close` drops every sender: waiting feeds wake, find the store closed and
//! end with `StoreUnavailable` (ST5).

use std::collections::VecDeque;
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::{broadcast, watch};

use super::Inner;
use crate::error::{Error, Result};
use crate::feed::{FeedSource, ReadCounter};
use crate::model::{Event, PresencePatch};
use crate::presence::PresenceView;
use crate::rules;
use crate::store::{EventStream, PresenceStream};
use crate::validate;

/// How many events a feed reads from the log at a time.
pub(super) const FEED_CHUNK: usize = 256;

/// How many patches a presence subscriber may fall behind before it
/// recovers by re-reading the namespace.
pub(super) const PRESENCE_BUFFER: usize = 256;

fn closed() -> Error {
    Error::closed("the memory store is closed")
}

fn failed<T: Send + 'static>(error: Error) -> futures::stream::BoxStream<'static, Result<T>> {
    futures::stream::once(async move { Err(error) }).boxed()
}

/// Removes a session's frontier channel once its last feed is gone.
struct FeedGuard {
    inner: Arc<Inner>,
    session: String,
}

impl Drop for FeedGuard {
    fn drop(&mut self) {
        if let Ok(mut state) = self.inner.state.lock()
            && state
                .feeds
                .get(&self.session)
                .is_some_and(|tx| tx.receiver_count() == 0)
        {
            state.feeds.remove(&self.session);
        }
    }
}

struct Feed {
    // Declared before the guard: fields drop in order, so the guard sees
    // this receiver gone when it counts the remaining ones.
    rx: watch::Receiver<u64>,
    guard: FeedGuard,
    /// The last index read from the log.
    after: u64,
    /// The id of the event at `after`, once one was read: how a feed finds
    /// that its session was cleared under it (ST6).
    after_id: Option<String>,
    reads: ReadCounter,
    buf: VecDeque<Event>,
    /// Read before waiting: at the start, after a wake-up, and after a
    /// full chunk (more may follow). After a shorter one, every later write
    /// wakes the feed, since the read marked the channel seen.
    must_read: bool,
    /// The session is closed and this feed read its last event (CL4).
    complete: bool,
    /// The session's deadline at the last read (EX4).
    deadline: Option<crate::clock::Millis>,
    done: bool,
}

impl Feed {
    /// Reads the next chunk after `after` under the store lock, marking the
    /// wake-up channel seen in the same critical section.
    fn fill(&mut self) -> Result<()> {
        let state = self.guard.inner.lock()?;
        self.rx.borrow_and_update();
        self.reads.count();
        let session = state.sessions.get(self.guard.session.as_str());
        if let Some(session) = session {
            // TR3: the next event must not have been trimmed away.
            rules::lifecycle::check_retained(
                &self.guard.session,
                session.first_index(),
                self.after,
            )?;
        }
        // ST6: the event this feed read last must still be there; if it is
        // gone or another event holds its index, the log was cleared. One
        // trimmed since it was read (the next one is retained) cannot be
        // checked.
        let trimmed = session.is_some_and(|s| self.after < s.first_index());
        if let Some(id) = self.after_id.as_ref().filter(|_| !trimmed) {
            let same = session
                .and_then(|s| s.id_of(self.after))
                .is_some_and(|stored| stored == id);
            if !same {
                let now = self.guard.inner.options.clock.now_ms();
                return Err(rules::lifecycle::log_gone(
                    &self.guard.session,
                    self.deadline,
                    now,
                ));
            }
        }
        if let Some(session) = session {
            self.deadline = session.deadline();
        }
        let mut read = 0;
        if let Some(session) = session {
            let events = session.events(self.after, u64::MAX, FEED_CHUNK)?;
            read = events.len();
            self.buf.extend(events);
        }
        self.must_read = read == FEED_CHUNK;
        if let Some(last) = self.buf.back() {
            self.after = last.index;
            self.after_id = Some(last.id.clone());
        }
        let closed = session.and_then(|s| s.closed).map(|(frontier, _)| frontier);
        self.complete = rules::lifecycle::feed_complete(closed, self.after);
        Ok(())
    }
}

/// The memory store's own feed of a session, which its shared readers
/// open (see [`crate::feed`]).
pub(super) struct Source(pub Arc<Inner>);

impl FeedSource for Source {
    fn open(
        &self,
        session: &str,
        after_index: u64,
        after_id: Option<String>,
        reads: ReadCounter,
    ) -> EventStream {
        stream(&self.0, session, after_index, after_id, reads)
    }
}

/// ST1, ST5: every event after `after_index`, then every later one.
fn stream(
    inner: &Arc<Inner>,
    session: &str,
    after_index: u64,
    after_id: Option<String>,
    reads: ReadCounter,
) -> EventStream {
    if let Err(error) = validate::session_id(session) {
        return failed(error);
    }
    let rx = match inner.lock() {
        Ok(mut state) => state
            .feeds
            .entry(session.to_owned())
            .or_insert_with(|| Arc::new(watch::channel(0).0))
            .subscribe(),
        Err(error) => return failed(error),
    };
    let feed = Feed {
        rx,
        guard: FeedGuard {
            inner: inner.clone(),
            session: session.to_owned(),
        },
        after: after_index,
        after_id,
        reads,
        buf: VecDeque::new(),
        must_read: true,
        complete: false,
        deadline: None,
        done: false,
    };
    futures::stream::unfold(feed, |mut feed| async move {
        if feed.done {
            return None;
        }
        loop {
            if let Some(event) = feed.buf.pop_front() {
                return Some((Ok(event), feed));
            }
            if feed.complete {
                // CL4: the log is final and every event of it delivered.
                return None;
            }
            if feed.must_read {
                if let Err(error) = feed.fill() {
                    feed.done = true;
                    return Some((Err(error), feed));
                }
                if !feed.buf.is_empty() || feed.must_read || feed.complete {
                    continue;
                }
            }
            // EX4: an idle session's feed wakes at its deadline to find it
            // expired.
            let until_deadline = feed.deadline.map(|deadline| {
                let now = feed.guard.inner.options.clock.now_ms();
                std::time::Duration::from_millis(deadline.saturating_sub(now).max(0) as u64 + 1)
            });
            let changed = match until_deadline {
                Some(wait) => tokio::select! {
                    changed = feed.rx.changed() => changed,
                    () = tokio::time::sleep(wait) => Ok(()),
                },
                None => feed.rx.changed().await,
            };
            if changed.is_err() {
                // The sender is only dropped by `close`.
                feed.done = true;
                return Some((Err(closed()), feed));
            }
            feed.must_read = true;
        }
    })
    .boxed()
}

/// Removes a namespace's broadcast channel once its last subscriber is gone.
struct PresenceGuard {
    inner: Arc<Inner>,
    ns: String,
}

impl Drop for PresenceGuard {
    fn drop(&mut self) {
        if let Ok(mut state) = self.inner.state.lock()
            && state
                .presence_channels
                .get(&self.ns)
                .is_some_and(|tx| tx.receiver_count() == 0)
        {
            state.presence_channels.remove(&self.ns);
        }
    }
}

struct Subscription {
    // Before the guard, for the same reason as in `Feed`.
    rx: broadcast::Receiver<PresencePatch>,
    guard: PresenceGuard,
    /// What this subscriber has been shown, to compute a recovery diff.
    view: PresenceView,
    out: VecDeque<PresencePatch>,
    done: bool,
}

impl Subscription {
    /// After falling behind: resubscribes and re-reads the namespace in one
    /// critical section, so later patches follow the read exactly, and
    /// queues the difference from what this subscriber saw (P4 recovery).
    fn recover(&mut self) -> Result<()> {
        let inner = self.guard.inner.clone();
        let mut state = inner.lock()?;
        let now = inner.options.clock.now_ms();
        let Some(tx) = state.presence_channels.get(&self.guard.ns) else {
            return Err(closed());
        };
        self.rx = tx.subscribe();
        let entries = super::read_namespace(&mut state, &self.guard.ns, now);
        drop(state);
        self.out.extend(self.view.resync(entries));
        Ok(())
    }
}

/// P4: patches applied to `ns` from now on. The subscription joins the
/// namespace's channel and reads its baseline in one critical section, the
/// one every write takes too: a write either lands before (in the baseline,
/// not reported) or after (broadcast to this subscription). So it is live
/// as soon as this returns.
pub(super) fn subscribe(inner: &Arc<Inner>, ns: &str) -> Result<PresenceStream> {
    validate::name("namespace", ns)?;
    let (rx, entries) = {
        let mut state = inner.lock()?;
        let now = inner.options.clock.now_ms();
        let rx = state
            .presence_channels
            .entry(ns.to_owned())
            .or_insert_with(|| broadcast::channel(PRESENCE_BUFFER).0)
            .subscribe();
        (rx, super::read_namespace(&mut state, ns, now))
    };
    let view = PresenceView::from_entries(entries);
    let subscription = Subscription {
        rx,
        guard: PresenceGuard {
            inner: inner.clone(),
            ns: ns.to_owned(),
        },
        view,
        out: VecDeque::new(),
        done: false,
    };
    Ok(futures::stream::unfold(subscription, |mut sub| async move {
        if sub.done {
            return None;
        }
        loop {
            if let Some(patch) = sub.out.pop_front() {
                return Some((Ok(patch), sub));
            }
            match sub.rx.recv().await {
                Ok(patch) => {
                    sub.view.apply(&patch);
                    return Some((Ok(patch), sub));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if let Err(error) = sub.recover() {
                        sub.done = true;
                        return Some((Err(error), sub));
                    }
                }
                Err(broadcast::error::RecvError::Closed) => {
                    // The sender is only dropped by `close`.
                    sub.done = true;
                    return Some((Err(closed()), sub));
                }
            }
        }
    })
    .boxed())
}
