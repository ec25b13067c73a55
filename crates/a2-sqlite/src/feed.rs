//! Live feeds (§6) and presence subscriptions (P4) of the SQLite store.
//!
//! # Event feeds
//! A feed remembers the last index it delivered and reads the log after it
//! in chunks of [`FEED_CHUNK`] (so its memory is bounded, ST4). Between
//! reads it waits for one of: its session's wake-up channel (a local
//! commit, pushed by the writer with the events it appended), the hub's
//! external epoch (another process committed, seen by the poller), or the
//! store closing. It marks both channels seen *before* each read, and
//! writers publish only after their commit, so a write lands either before
//! the read (and is read) or after the mark (and wakes the feed): no
//! wake-up is lost. A local wake-up whose events continue the feed's
//! sequence, with no clear of the session since the feed's last read, is
//! taken as it is, without a read; any other wake-up costs one indexed
//! read. The feeds of one session share one such feed (ST7, `a2_core::feed`).
//!
//! # Presence subscriptions
//! Local patches arrive exactly through the namespace's broadcast channel.
//! On an external epoch (or after falling behind), the subscription
//! re-reads the namespace and emits the difference from what it showed
//! (P4 recovery), draining its channel under the hub lock in the same step
//! so nothing is reported twice (see `hub`).

use std::collections::VecDeque;
use std::sync::Arc;

use a2_core::feed::{FeedSource, ReadCounter};
use a2_core::presence::PresenceView;
use a2_core::{Error, Event, PresenceEntry, PresencePatch, Result, rules, validate};
use futures::StreamExt;
use tokio::sync::{broadcast, watch};

use crate::hub::{Hub, PRESENCE_BUFFER, Wake};
use crate::readers::{Readers, in_read_tx};
use crate::reads;

/// How many events a feed reads from the log at a time.
pub const FEED_CHUNK: usize = 256;

/// What feeds and subscriptions need of their store instance.
#[derive(Clone)]
pub struct Shared {
    pub hub: Arc<Hub>,
    pub readers: Arc<Readers>,
    pub clock: Arc<dyn a2_core::Clock>,
    /// True once the store instance is closed.
    pub closed: watch::Receiver<bool>,
}

fn closed() -> Error {
    Error::closed("the SQLite store is closed")
}

fn failed<T: Send + 'static>(error: Error) -> futures::stream::BoxStream<'static, Result<T>> {
    futures::stream::once(async move { Err(error) }).boxed()
}

/// Removes a session's frontier channel once its last feed is gone.
struct FeedGuard {
    hub: Arc<Hub>,
    session: String,
}

impl Drop for FeedGuard {
    fn drop(&mut self) {
        let mut state = self.hub.lock();
        if state
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
    rx: watch::Receiver<Wake>,
    guard: FeedGuard,
    external: watch::Receiver<u64>,
    shared: Shared,
    /// The session's clear count when the feed last read (ST6).
    clears: Option<u64>,
    after: u64,
    /// The id of the event at `after`, once one was read (ST6).
    last_id: Option<String>,
    reads: ReadCounter,
    buf: VecDeque<Event>,
    /// Read before waiting: at the start, after a wake-up, and after a
    /// full chunk (more may follow). After a shorter one, every later
    /// commit wakes the feed, since the read marked both channels seen.
    must_read: bool,
    /// The session is closed and this feed read its last event (CL4).
    complete: bool,
    /// The session's deadline at the last read (EX4).
    deadline: Option<a2_core::Millis>,
    done: bool,
}

impl Feed {
    /// Reads the next chunk. Once an event was delivered, the read starts
    /// at it and checks that it is still there: a session cleared and
    /// written again has other events at those indexes (ST6).
    async fn fill(&mut self) -> Result<()> {
        self.clears = Some(self.rx.borrow_and_update().clears);
        self.external.borrow_and_update();
        let session = self.guard.session.clone();
        let check = self.last_id.is_some() && self.after > 0;
        let after = self.after;
        let now = self.shared.clock.now_ms();
        self.reads.count();
        let read = self
            .shared
            .readers
            .read(move |conn| reads::feed_read(conn, &session, after, check, FEED_CHUNK, now))
            .await?;
        self.must_read = read.events.len() == FEED_CHUNK;
        let mut events = read.events.into_iter();
        if read.checked {
            let still_there = events.next().is_some_and(|event| {
                event.index == self.after && Some(&event.id) == self.last_id.as_ref()
            });
            if !still_there {
                return Err(rules::lifecycle::log_gone(
                    &self.guard.session,
                    self.deadline,
                    now,
                ));
            }
        }
        self.deadline = read.deadline;
        for event in events {
            self.after = event.index;
            self.last_id = Some(event.id.clone());
            self.buf.push_back(event);
        }
        self.complete = rules::lifecycle::feed_complete(read.closed, self.after);
        Ok(())
    }

    /// Waits for a wake-up, or for the session's deadline (EX4).
    async fn wait(&mut self) -> Woken {
        let mut closed = self.shared.closed.clone();
        if *closed.borrow_and_update() {
            return Woken::Closed;
        }
        let deadline = async {
            match self.deadline {
                Some(deadline) => {
                    let wait = deadline.saturating_sub(self.shared.clock.now_ms()).max(0);
                    tokio::time::sleep(std::time::Duration::from_millis(wait as u64 + 1)).await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = self.rx.changed() => match changed {
                Ok(()) => Woken::Local,
                Err(_) => Woken::Closed,
            },
            _ = self.external.changed() => Woken::External,
            () = deadline => Woken::External,
            _ = closed.changed() => Woken::Closed,
        }
    }

    /// Takes the events a commit of this process carried, when they
    /// continue this feed's sequence in the log it read (no clear since);
    /// false when it must read instead.
    fn take_carried(&mut self) -> bool {
        let wake = self.rx.borrow_and_update().clone();
        if self.clears != Some(wake.clears) || wake.closed || wake.uncarried {
            return false;
        }
        for event in wake.events.iter() {
            if event.index <= self.after {
                continue;
            }
            if event.index != self.after + 1 {
                return false;
            }
            self.after = event.index;
            self.last_id = Some(event.id.clone());
            self.buf.push_back(event.clone());
        }
        true
    }
}

/// What woke a waiting feed.
enum Woken {
    /// A commit of this process.
    Local,
    /// A commit of another process (the poller).
    External,
    /// The store closed.
    Closed,
}

impl FeedSource for Shared {
    fn open(
        &self,
        session: &str,
        after_index: u64,
        after_id: Option<String>,
        reads: ReadCounter,
    ) -> a2_core::EventStream {
        stream(self, session, after_index, after_id, reads)
    }
}

/// ST1, ST5: every event after `after_index`, then every later one. The
/// store's shared readers open it (see `a2_core::feed`).
fn stream(
    shared: &Shared,
    session: &str,
    after_index: u64,
    after_id: Option<String>,
    reads: ReadCounter,
) -> a2_core::EventStream {
    if let Err(error) = validate::session_id(session) {
        return failed(error);
    }
    if *shared.closed.borrow() {
        return failed(closed());
    }
    let rx = shared
        .hub
        .lock()
        .feeds
        .entry(session.to_owned())
        .or_insert_with(|| watch::channel(Wake::default()).0)
        .subscribe();
    let feed = Feed {
        rx,
        guard: FeedGuard {
            hub: shared.hub.clone(),
            session: session.to_owned(),
        },
        external: shared.hub.external(),
        shared: shared.clone(),
        clears: None,
        after: after_index,
        last_id: after_id,
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
            if *feed.shared.closed.borrow() {
                feed.done = true;
                return Some((Err(closed()), feed));
            }
            if let Some(event) = feed.buf.pop_front() {
                return Some((Ok(event), feed));
            }
            if feed.complete {
                // CL4: the log is final and every event of it delivered.
                return None;
            }
            if feed.must_read {
                if let Err(error) = feed.fill().await {
                    feed.done = true;
                    return Some((Err(error), feed));
                }
                if !feed.buf.is_empty() || feed.must_read || feed.complete {
                    continue;
                }
            }
            match feed.wait().await {
                Woken::Closed => {
                    feed.done = true;
                    return Some((Err(closed()), feed));
                }
                Woken::External => feed.must_read = true,
                Woken::Local => feed.must_read = !feed.take_carried(),
            }
        }
    })
    .boxed()
}

/// Removes a namespace's broadcast channel once its last subscriber is gone.
struct PresenceGuard {
    hub: Arc<Hub>,
    ns: String,
}

impl Drop for PresenceGuard {
    fn drop(&mut self) {
        let mut state = self.hub.lock();
        if state
            .presence
            .get(&self.ns)
            .is_some_and(|tx| tx.receiver_count() == 0)
        {
            state.presence.remove(&self.ns);
        }
    }
}

struct Subscription {
    // Before the guard, for the same reason as in `Feed`.
    rx: Option<broadcast::Receiver<PresencePatch>>,
    guard: PresenceGuard,
    external: watch::Receiver<u64>,
    shared: Shared,
    view: PresenceView,
    out: VecDeque<PresencePatch>,
    done: bool,
}

/// Reads the live entries of `ns` under the hub lock, first draining `rx`
/// (or joining the channel when `rx` is `None`): see the module docs.
fn read_locked(
    shared: &Shared,
    ns: &str,
    rx: Option<broadcast::Receiver<PresencePatch>>,
) -> Result<(broadcast::Receiver<PresencePatch>, Vec<PresenceEntry>)> {
    let now = shared.clock.now_ms();
    let mut state = shared.hub.lock();
    let rx = match rx {
        Some(mut rx) => {
            // Everything queued was committed before this read, which
            // therefore includes it.
            while let Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) = rx.try_recv() {}
            rx
        }
        None => state
            .presence
            .entry(ns.to_owned())
            .or_insert_with(|| broadcast::channel(PRESENCE_BUFFER).0)
            .subscribe(),
    };
    let (entries, _) = shared
        .readers
        .blocking(|conn| in_read_tx(conn, |conn| reads::presence(conn, ns, now)))?;
    drop(state);
    Ok((rx, entries))
}

impl Subscription {
    async fn recover(&mut self) -> Result<()> {
        self.external.borrow_and_update();
        let shared = self.shared.clone();
        let ns = self.guard.ns.clone();
        let rx = self.rx.take();
        let (rx, entries) = tokio::task::spawn_blocking(move || read_locked(&shared, &ns, rx))
            .await
            .map_err(|e| Error::unavailable_from("a SQLite read task failed", e))??;
        self.rx = Some(rx);
        self.out.extend(self.view.resync(entries));
        Ok(())
    }

    /// The next patch, a recovery, or the end.
    async fn step(&mut self) -> Option<Result<PresencePatch>> {
        loop {
            if *self.shared.closed.borrow() {
                return Some(Err(closed()));
            }
            if let Some(patch) = self.out.pop_front() {
                return Some(Ok(patch));
            }
            let mut closed = self.shared.closed.clone();
            let Some(rx) = self.rx.as_mut() else {
                return Some(Err(closed_error()));
            };
            let recover = tokio::select! {
                received = rx.recv() => match received {
                    Ok(patch) => {
                        self.view.apply(&patch);
                        return Some(Ok(patch));
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => true,
                    Err(broadcast::error::RecvError::Closed) => return Some(Err(closed_error())),
                },
                _ = self.external.changed() => true,
                _ = closed.changed() => return Some(Err(closed_error())),
            };
            if recover && let Err(error) = self.recover().await {
                return Some(Err(error));
            }
        }
    }
}

fn closed_error() -> Error {
    closed()
}

/// P4: patches applied to `ns` from now on; live once this returns.
pub async fn subscribe(shared: &Shared, ns: &str) -> Result<a2_core::PresenceStream> {
    validate::name("namespace", ns)?;
    if *shared.closed.borrow() {
        return Err(closed());
    }
    // Marked seen before the baseline read: a commit of another process
    // after this point wakes the subscription.
    let mut external = shared.hub.external();
    external.borrow_and_update();
    let (rx, entries) = {
        let shared = shared.clone();
        let ns = ns.to_owned();
        tokio::task::spawn_blocking(move || read_locked(&shared, &ns, None))
            .await
            .map_err(|e| Error::unavailable_from("a SQLite read task failed", e))??
    };
    let subscription = Subscription {
        rx: Some(rx),
        guard: PresenceGuard {
            hub: shared.hub.clone(),
            ns: ns.to_owned(),
        },
        external,
        shared: shared.clone(),
        view: PresenceView::from_entries(entries),
        out: VecDeque::new(),
        done: false,
    };
    Ok(futures::stream::unfold(subscription, |mut sub| async move {
        if sub.done {
            return None;
        }
        let item = sub.step().await?;
        if item.is_err() {
            sub.done = true;
        }
        Some((item, sub))
    })
    .boxed())
}
