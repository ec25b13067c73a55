//! Live feeds of the memory store: event streams (§6) and presence
//! subscriptions (P4).
//!
//! # Event feeds
//! The feed loop is [`crate::feed`]'s; this store gives its [`LogTail`].
//! Each session with an open feed has a `watch` channel carrying its
//! frontier; every write that appends sends the new frontier right after
//! releasing the store lock (a feed woken while the writer still held it
//! would only wait for the lock). A feed marks the channel seen and reads
//! the log under that lock, so a write either lands before the read (and
//! is read; its send, which follows, may wake the feed once more to find
//! nothing new) or after it (and its send wakes the feed): no wake-up is
//! lost and nothing is polled. `clear` and `close` of a session send too,
//! so its feeds read and find the log gone (ST6) or final (CL4).
//!
//! `close` of the store drops every sender: waiting feeds wake, find the
//! store closed and end with `StoreUnavailable` (ST5).

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{broadcast, watch};

use super::Inner;
use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::feed::{Change, ChannelGuard, FeedSource, LogPage, LogTail, forget_unheard};
use crate::model::{PresenceEntry, PresencePatch};
use crate::presence::{self, Heard, PresenceTail};
use crate::rules;
use crate::store::PresenceStream;
use crate::validate;

/// How many events a feed reads from the log at a time.
pub(super) const FEED_CHUNK: usize = 256;

/// How many patches a presence subscriber may fall behind before it
/// recovers by re-reading the namespace.
pub(super) const PRESENCE_BUFFER: usize = 256;

fn closed() -> Error {
    Error::closed("the memory store is closed")
}

/// The memory store's side of a live feed (see [`crate::feed::tail`]): its
/// session's frontier channel, marked seen by each read under the store
/// lock.
struct Tail {
    // Declared before the guard: fields drop in order, so the guard sees
    // this receiver gone when it counts the remaining ones.
    rx: watch::Receiver<u64>,
    guard: ChannelGuard<Inner>,
}

#[async_trait]
impl LogTail for Tail {
    async fn read(&mut self, after: u64, check: bool, limit: usize) -> Result<LogPage> {
        let inner = self.guard.owner().clone();
        let state = inner.lock()?;
        self.rx.borrow_and_update();
        let Some(session) = state.sessions.get(self.guard.key()) else {
            return Ok(LogPage {
                checked: check,
                ..LogPage::default()
            });
        };
        // TR3: the next event must not have been trimmed away.
        rules::lifecycle::check_retained(self.guard.key(), session.first_index(), after)?;
        // ST6: the event at `after` is checked while it is retained.
        let checked = check && after >= session.first_index();
        let from = if checked { after - 1 } else { after };
        Ok(LogPage {
            checked,
            events: session.events(from, u64::MAX, limit)?,
            deadline: session.deadline(),
            closed: session.closed.map(|(frontier, _)| frontier),
        })
    }

    async fn change(&mut self) -> Change {
        match self.rx.changed().await {
            Ok(()) => Change::Read,
            // The sender is only dropped by `close`.
            Err(_) => Change::End(closed()),
        }
    }

    fn now(&self) -> Millis {
        self.guard.owner().options.clock.now_ms()
    }

    fn page(&self) -> usize {
        FEED_CHUNK
    }
}

/// The memory store's own feed of a session, which its shared readers
/// open (see [`crate::feed`]).
pub(super) struct Source(pub Arc<Inner>);

impl FeedSource for Source {
    fn tail(&self, session: &str) -> Result<Box<dyn LogTail>> {
        let rx = self
            .0
            .lock()?
            .feeds
            .entry(session.to_owned())
            .or_insert_with(|| Arc::new(watch::channel(0).0))
            .subscribe();
        Ok(Box::new(Tail {
            rx,
            guard: ChannelGuard::new(self.0.clone(), session, |inner, key| {
                if let Ok(mut state) = inner.state.lock() {
                    forget_unheard(&mut state.feeds, key);
                }
            }),
        }))
    }
}

/// The memory store's side of a presence subscription: its namespace's
/// broadcast channel, which every write sends to under the store lock.
struct Presence {
    // Before the guard, for the same reason as in `Tail`.
    rx: broadcast::Receiver<PresencePatch>,
    guard: ChannelGuard<Inner>,
}

#[async_trait]
impl PresenceTail for Presence {
    async fn next(&mut self) -> Heard {
        match self.rx.recv().await {
            Ok(patch) => Heard::Patch(patch),
            Err(broadcast::error::RecvError::Lagged(_)) => Heard::Missed,
            // The sender is only dropped by `close`.
            Err(broadcast::error::RecvError::Closed) => Heard::End(closed()),
        }
    }

    /// Resubscribes and re-reads the namespace in one critical section,
    /// so later patches follow the read exactly.
    async fn reread(&mut self) -> Result<Vec<PresenceEntry>> {
        let inner = self.guard.owner().clone();
        let mut state = inner.lock()?;
        let now = inner.options.clock.now_ms();
        let Some(tx) = state.presence_channels.get(self.guard.key()) else {
            return Err(closed());
        };
        self.rx = tx.subscribe();
        Ok(super::read_namespace(&mut state, self.guard.key(), now))
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
    let tail = Presence {
        rx,
        guard: ChannelGuard::new(inner.clone(), ns, |inner, key| {
            if let Ok(mut state) = inner.state.lock() {
                forget_unheard(&mut state.presence_channels, key);
            }
        }),
    };
    Ok(presence::subscription(Box::new(tail), entries))
}
