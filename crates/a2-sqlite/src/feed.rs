//! Live feeds (§6) and presence subscriptions (P4) of the SQLite store.
//!
//! # Event feeds
//! The feed loop is `a2_core::feed`'s; this store gives its `LogTail`.
//! Between reads a feed waits for one of: its session's wake-up channel (a
//! local commit, pushed by the writer with the events it appended), the
//! hub's external epoch (another process committed, seen by the poller),
//! or the store closing. It marks both channels seen *before* each read,
//! and writers publish only after their commit, so a write lands either
//! before the read (and is read) or after the mark (and wakes the feed):
//! no wake-up is lost. A local wake-up whose events continue the feed's
//! sequence, with no clear of the session since the feed's last read, is
//! taken as it is, without a read; any other wake-up costs one indexed
//! read. The feeds of one session share one such feed (ST7). A feed of a
//! closed store ends with `StoreUnavailable` (ST5).
//!
//! # Presence subscriptions
//! Local patches arrive exactly through the namespace's broadcast channel.
//! On an external epoch (or after falling behind), the subscription
//! re-reads the namespace and emits the difference from what it showed
//! (P4 recovery), draining its channel under the hub lock in the same step
//! so nothing is reported twice (see `hub`).

use std::sync::Arc;

use a2_core::feed::{Change, ChannelGuard, FeedSource, LogPage, LogTail, forget_unheard};
use a2_core::presence::{self, Heard, PresenceTail};
use a2_core::{Error, Millis, PresenceEntry, PresencePatch, Result, validate};
use async_trait::async_trait;
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

/// The SQLite store's side of a live feed (see `a2_core::feed::tail`): its
/// session's wake-up channel, the hub's external epoch and the store's
/// closed flag, all marked seen before each read.
struct Tail {
    // Declared before the guard: fields drop in order, so the guard sees
    // this receiver gone when it counts the remaining ones.
    rx: watch::Receiver<Wake>,
    guard: ChannelGuard<Hub>,
    external: watch::Receiver<u64>,
    shared: Shared,
    /// The session's clear count when the feed last read (ST6).
    clears: Option<u64>,
}

#[async_trait]
impl LogTail for Tail {
    async fn read(&mut self, after: u64, check: bool, limit: usize) -> Result<LogPage> {
        self.clears = Some(self.rx.borrow_and_update().clears);
        self.external.borrow_and_update();
        let session = self.guard.key().to_owned();
        let now = self.shared.clock.now_ms();
        self.shared
            .readers
            .read(move |conn| reads::feed_read(conn, &session, after, check, limit, now))
            .await
    }

    async fn change(&mut self) -> Change {
        let mut closing = self.shared.closed.clone();
        if *closing.borrow_and_update() {
            return Change::End(closed());
        }
        tokio::select! {
            changed = self.rx.changed() => match changed {
                Ok(()) => self.carried(),
                Err(_) => Change::End(closed()),
            },
            _ = self.external.changed() => Change::Read,
            _ = closing.changed() => Change::End(closed()),
        }
    }

    fn ended(&self) -> Option<Error> {
        (*self.shared.closed.borrow()).then(closed)
    }

    fn now(&self) -> Millis {
        self.shared.clock.now_ms()
    }

    fn page(&self) -> usize {
        FEED_CHUNK
    }
}

impl Tail {
    /// The events a commit of this process carried, when the session was
    /// not cleared or closed since the feed's last read and the commit
    /// carried all it appended; a read otherwise.
    fn carried(&mut self) -> Change {
        let wake = self.rx.borrow_and_update();
        if self.clears != Some(wake.clears) || wake.closed || wake.uncarried {
            return Change::Read;
        }
        Change::Appended(wake.events.to_vec())
    }
}

impl FeedSource for Shared {
    fn tail(&self, session: &str) -> Result<Box<dyn LogTail>> {
        if *self.closed.borrow() {
            return Err(closed());
        }
        let rx = self
            .hub
            .lock()
            .feeds
            .entry(session.to_owned())
            .or_insert_with(|| watch::channel(Wake::default()).0)
            .subscribe();
        Ok(Box::new(Tail {
            rx,
            guard: ChannelGuard::new(self.hub.clone(), session, |hub, key| {
                forget_unheard(&mut hub.lock().feeds, key)
            }),
            external: self.hub.external(),
            shared: self.clone(),
            clears: None,
        }))
    }
}

/// The SQLite store's side of a presence subscription: its namespace's
/// broadcast channel (local commits), the hub's external epoch (other
/// processes' commits) and the store's closed flag.
struct Presence {
    // Before the guard, for the same reason as in `Tail`.
    rx: Option<broadcast::Receiver<PresencePatch>>,
    guard: ChannelGuard<Hub>,
    external: watch::Receiver<u64>,
    shared: Shared,
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

#[async_trait]
impl PresenceTail for Presence {
    async fn next(&mut self) -> Heard {
        if *self.shared.closed.borrow() {
            return Heard::End(closed());
        }
        let mut closing = self.shared.closed.clone();
        let Some(rx) = self.rx.as_mut() else {
            return Heard::End(closed());
        };
        tokio::select! {
            received = rx.recv() => match received {
                Ok(patch) => Heard::Patch(patch),
                Err(broadcast::error::RecvError::Lagged(_)) => Heard::Missed,
                Err(broadcast::error::RecvError::Closed) => Heard::End(closed()),
            },
            // Another process committed: its patches are read, not heard.
            _ = self.external.changed() => Heard::Missed,
            _ = closing.changed() => Heard::End(closed()),
        }
    }

    async fn reread(&mut self) -> Result<Vec<PresenceEntry>> {
        self.external.borrow_and_update();
        let shared = self.shared.clone();
        let ns = self.guard.key().to_owned();
        let rx = self.rx.take();
        let (rx, entries) = tokio::task::spawn_blocking(move || read_locked(&shared, &ns, rx))
            .await
            .map_err(|e| Error::unavailable_from("a SQLite read task failed", e))??;
        self.rx = Some(rx);
        Ok(entries)
    }
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
    let tail = Presence {
        rx: Some(rx),
        guard: ChannelGuard::new(shared.hub.clone(), ns, |hub, key| {
            forget_unheard(&mut hub.lock().presence, key)
        }),
        external,
        shared: shared.clone(),
    };
    Ok(presence::subscription(Box::new(tail), entries))
}
