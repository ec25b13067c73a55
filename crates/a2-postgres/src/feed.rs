//! Live feeds (§6), presence subscriptions (P4), wake-ups (PS2) and
//! cancels (CN5) of the Postgres store, all heard through the instance's
//! one listener (`listen`).
//!
//! A feed marks its session's channel and the hub's epoch seen before each
//! read; notices are delivered after their transaction commits, so a write
//! lands either before the read (and is read) or after the mark (and wakes
//! the feed). A notice names the session's frontier: a feed already there
//! reads nothing ([`Change::Reached`]); a close, clear, trim, fork or
//! expiry asks every feed of the session to read. The feeds of one
//! session share one such feed (ST7). While the listener is down every
//! feed reads each [`FALLBACK_POLL`].

use std::sync::Arc;

use a2_core::feed::{Change, ChannelGuard, FeedSource, LogPage, LogTail, forget_unheard};
use a2_core::presence::{self, Heard, PresenceTail};
use a2_core::{
    CancelStream, Clock, Error, Millis, PresenceEntry, PresencePatch, PresenceStream, Result,
    WakeupStream, validate,
};
use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::{broadcast, watch};

use crate::Database;
use crate::listen::{FALLBACK_POLL, Hub, Notice};
use crate::op::{self, Mode};

/// How many events a feed reads at a time.
pub(crate) const FEED_CHUNK: usize = 256;

/// What feeds and subscriptions need of their store instance.
#[derive(Clone)]
pub(crate) struct Source {
    pub(crate) db: Database,
    pub(crate) hub: Arc<Hub>,
    pub(crate) clock: Arc<dyn Clock>,
}

pub(crate) fn closed() -> Error {
    Error::closed("the Postgres store is closed")
}

impl Source {
    /// Waits for the first of: `changed`, a read of everything (the epoch),
    /// a poll while the listener is down, the store closing.
    async fn wait<T>(
        &self,
        changed: impl std::future::Future<Output = T>,
        epoch: &mut watch::Receiver<u64>,
    ) -> Waited<T> {
        let mut closing = self.hub.closing();
        if *closing.borrow_and_update() {
            return Waited::Closed;
        }
        let polling = !self.hub.live();
        tokio::select! {
            out = changed => Waited::Changed(out),
            _ = epoch.changed() => Waited::Read,
            _ = tokio::time::sleep(FALLBACK_POLL), if polling => Waited::Read,
            _ = closing.changed() => Waited::Closed,
        }
    }
}

enum Waited<T> {
    Changed(T),
    Read,
    Closed,
}

/// The Postgres store's side of a live feed: its session's notices, the
/// hub's epoch and the store's closing.
struct Tail {
    // Declared before the guard: fields drop in order, so the guard sees
    // this receiver gone when it counts the remaining ones.
    rx: watch::Receiver<Notice>,
    guard: ChannelGuard<Hub>,
    epoch: watch::Receiver<u64>,
    source: Source,
    /// The `read_seq` of the last notice seen.
    read_seq: u64,
}

#[async_trait]
impl LogTail for Tail {
    async fn read(&mut self, after: u64, check: bool, limit: usize) -> Result<LogPage> {
        self.read_seq = self.rx.borrow_and_update().read_seq;
        self.epoch.borrow_and_update();
        let at = (self.guard.key().to_owned(), after, check, limit);
        let (db, now) = (self.source.db.clone(), self.source.clock.now_ms());
        detached(async move {
            op::run(&db, (Mode::Read, now), "reading a feed", |on| {
                Box::pin(crate::inspect::feed(on, at))
            })
            .await
        })
        .await
    }

    async fn change(&mut self) -> Change {
        let source = self.source.clone();
        match source.wait(self.rx.changed(), &mut self.epoch).await {
            Waited::Changed(Ok(())) => {
                let notice = *self.rx.borrow_and_update();
                if notice.read_seq != self.read_seq {
                    self.read_seq = notice.read_seq;
                    Change::Read
                } else {
                    Change::Reached(notice.frontier)
                }
            }
            Waited::Changed(Err(_)) | Waited::Closed => Change::End(closed()),
            Waited::Read => Change::Read,
        }
    }

    fn ended(&self) -> Option<Error> {
        self.source.hub.is_closed().then(closed)
    }

    fn now(&self) -> Millis {
        self.source.clock.now_ms()
    }

    fn page(&self) -> usize {
        FEED_CHUNK
    }
}

impl FeedSource for Source {
    fn tail(&self, session: &str) -> Result<Box<dyn LogTail>> {
        if self.hub.is_closed() {
            return Err(closed());
        }
        Ok(Box::new(Tail {
            rx: self.hub.follow(session),
            guard: ChannelGuard::new(self.hub.clone(), session, |hub, key| {
                forget_unheard(&mut hub.lock().feeds, key)
            }),
            epoch: self.hub.epoch(),
            source: self.clone(),
            read_seq: 0,
        }))
    }
}

/// The Postgres store's side of a presence subscription.
struct Presence {
    // Before the guard, for the same reason as in `Tail`.
    rx: broadcast::Receiver<Option<PresencePatch>>,
    guard: ChannelGuard<Hub>,
    epoch: watch::Receiver<u64>,
    source: Source,
}

#[async_trait]
impl PresenceTail for Presence {
    async fn next(&mut self) -> Heard {
        let source = self.source.clone();
        match source.wait(self.rx.recv(), &mut self.epoch).await {
            Waited::Changed(Ok(Some(patch))) => Heard::Patch(patch),
            Waited::Changed(Ok(None) | Err(broadcast::error::RecvError::Lagged(_))) => {
                Heard::Missed
            }
            Waited::Read => Heard::Missed,
            Waited::Changed(Err(broadcast::error::RecvError::Closed)) | Waited::Closed => {
                Heard::End(closed())
            }
        }
    }

    async fn reread(&mut self) -> Result<Vec<PresenceEntry>> {
        self.epoch.borrow_and_update();
        // Everything queued was committed before this read, which
        // therefore includes it.
        while let Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) = self.rx.try_recv() {}
        read_presence(&self.source, self.guard.key()).await
    }
}

async fn read_presence(source: &Source, ns: &str) -> Result<Vec<PresenceEntry>> {
    let (db, now, ns) = (source.db.clone(), source.clock.now_ms(), ns.to_owned());
    detached(async move {
        op::run(&db, (Mode::Write, now), "reading presence", |on| {
            Box::pin(crate::presence::read(on, ns))
        })
        .await
    })
    .await
}

/// Runs a feed's or subscription's read in a task of its own: a stream
/// its program stops polling mid-read (one of many it holds, polled in
/// turn) must not keep a pooled connection, in an open transaction, until
/// it is polled again — a few such streams would empty the pool.
async fn detached<T: Send + 'static>(
    read: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    tokio::spawn(read)
        .await
        .map_err(|e| Error::unavailable_from("a Postgres read task failed", e))?
}

/// P4: patches applied to `ns` from now on; live once this returns.
pub(crate) async fn subscribe(source: &Source, ns: &str) -> Result<PresenceStream> {
    validate::name("namespace", ns)?;
    if source.hub.is_closed() {
        return Err(closed());
    }
    let mut epoch = source.hub.epoch();
    epoch.borrow_and_update();
    let tail = Presence {
        rx: source.hub.attend(ns),
        guard: ChannelGuard::new(source.hub.clone(), ns, |hub, key| {
            forget_unheard(&mut hub.lock().presence, key)
        }),
        epoch,
        source: source.clone(),
    };
    let entries = read_presence(source, ns).await?;
    Ok(presence::subscription(Box::new(tail), entries))
}

/// Waits until the listener is live: what wake-ups and cancels need to
/// hear every notice from their return on. `StoreUnavailable` when it is
/// not within the pool's connect timeout.
async fn live(source: &Source) -> Result<()> {
    if source.hub.is_closed() {
        return Err(closed());
    }
    let mut live = source.hub.liveness();
    let waited = tokio::time::timeout(FALLBACK_POLL * 10, live.wait_for(|live| *live)).await;
    match waited {
        Ok(Ok(_)) => Ok(()),
        _ => Err(Error::unavailable(
            "the Postgres listener is not connected: wake-ups and cancels are not heard yet",
        )),
    }
}

/// PS2: sessions that gain claimable work, in every process, from the
/// listener; the stream ends with `StoreUnavailable` when the listener is
/// lost (a worker lists meanwhile and subscribes again).
pub(crate) async fn wakeups(source: &Source) -> Result<WakeupStream> {
    let rx = source.hub.wakeups();
    live(source).await?;
    Ok(hints(rx))
}

/// CN5: attempts cancelled while leased, in every process; ends like
/// [`wakeups`].
pub(crate) async fn cancels(source: &Source) -> Result<CancelStream> {
    let rx = source.hub.cancels();
    live(source).await?;
    Ok(hints(rx))
}

fn hints<T: Clone + Send + 'static>(
    rx: broadcast::Receiver<Option<T>>,
) -> futures::stream::BoxStream<'static, Result<T>> {
    a2_core::feed::broadcast_stream(rx)
        .scan(false, |ended, hint| {
            if *ended {
                return futures::future::ready(None);
            }
            futures::future::ready(Some(match hint {
                Ok(Some(item)) => Ok(item),
                Ok(None) | Err(_) => {
                    *ended = true;
                    Err(Error::unavailable(
                        "the Postgres listener was lost: list pending work, and subscribe again",
                    ))
                }
            }))
        })
        .boxed()
}
