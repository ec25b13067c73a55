//! What a store instance hears: one listening connection (LISTEN on the
//! schema's channels, `notify`), shared by every feed, presence
//! subscription, wake-up and cancel stream of the instance — never one per
//! feed or per worker.
//!
//! Notices are sent in the writing transaction and delivered at its commit
//! (`notify`), to this process's listener as to every other's. The
//! listener hands each to what waits for it: a session's frontier to its
//! feeds' channel, a session with new work to the wake-up streams, a
//! cancelled attempt to the cancel streams, a presence patch to its
//! namespace's subscriptions.
//!
//! While the listening connection is down nothing is heard: feeds and
//! presence subscriptions read every [`FALLBACK_POLL`] instead, wake-up and
//! cancel streams end with `StoreUnavailable` (their users list and renew
//! meanwhile, and subscribe again), and [`Hub::live`] says so. The
//! listener connects again with a growing pause; once its LISTENs are in
//! place every feed and subscription reads once, for what it missed. A
//! live connection is checked every [`PING_EVERY`] — the one query an idle
//! process makes — so a connection that died silently is found.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use a2_core::{Cancellation, Error, PresencePatch, Result};
use serde::Deserialize;
use tokio::sync::{broadcast, watch};

use crate::Database;
use crate::notify::{Channel, channel};

/// How often feeds and presence subscriptions read while the listening
/// connection is down.
pub(crate) const FALLBACK_POLL: Duration = Duration::from_millis(500);

/// How often the listening connection is checked while idle.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(10);

/// The longest pause between attempts to connect the listener again.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// How many hints a wake-up, cancel or presence channel holds for a
/// receiver that is behind (one that falls further behind reads instead).
const BUFFER: usize = 1024;

/// The last notice about a session's log, as its feeds see it.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Notice {
    /// Counts the notices about the session.
    pub(crate) seq: u64,
    /// The `seq` of the last notice that calls for a read whatever the
    /// feed's position (a clear, a trim, a close, a fork, an expiry).
    pub(crate) read_seq: u64,
    /// The frontier the last notice named.
    pub(crate) frontier: u64,
}

/// What the listener hands out (see the module docs).
pub(crate) struct Hub {
    state: Mutex<State>,
    /// Bumped when every feed and subscription must read: the listener
    /// (re)connected, or a poll while it is down.
    epoch: watch::Sender<u64>,
    live: watch::Sender<bool>,
    closed: watch::Sender<bool>,
}

pub(crate) struct State {
    pub(crate) feeds: HashMap<String, watch::Sender<Notice>>,
    /// `None`: a patch too large for a notice was applied; read.
    pub(crate) presence: HashMap<String, broadcast::Sender<Option<PresencePatch>>>,
    /// `None`: the listener was lost.
    wakeups: broadcast::Sender<Option<String>>,
    cancels: broadcast::Sender<Option<Cancellation>>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("live", &*self.live.borrow())
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct EventsNotice {
    s: String,
    f: u64,
    #[serde(default)]
    r: u8,
}

#[derive(Deserialize)]
struct PresenceNotice {
    ns: String,
    #[serde(default)]
    p: Option<PresencePatch>,
}

impl Hub {
    /// A hub whose listener is not started yet.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                feeds: HashMap::new(),
                presence: HashMap::new(),
                wakeups: broadcast::channel(BUFFER).0,
                cancels: broadcast::channel(BUFFER).0,
            }),
            epoch: watch::channel(0).0,
            live: watch::channel(false).0,
            closed: watch::channel(false).0,
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the maps consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the listening connection is live: every notice is heard.
    pub(crate) fn live(&self) -> bool {
        *self.live.borrow()
    }

    /// Changes when the listener connects or is lost.
    pub(crate) fn liveness(&self) -> watch::Receiver<bool> {
        self.live.subscribe()
    }

    /// Changes when every feed and subscription must read.
    pub(crate) fn epoch(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    /// Changes to true when the store instance closes.
    pub(crate) fn closing(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Closes: the listener stops, feeds and subscriptions end.
    pub(crate) fn close(&self) {
        self.closed.send_replace(true);
    }

    /// A receiver of the notices about session `name`'s log.
    pub(crate) fn follow(&self, name: &str) -> watch::Receiver<Notice> {
        let mut state = self.lock();
        let tx = state.feeds.entry(name.to_owned());
        tx.or_insert_with(|| watch::channel(Notice::default()).0)
            .subscribe()
    }

    /// A receiver of the patches applied to namespace `ns`.
    pub(crate) fn attend(&self, ns: &str) -> broadcast::Receiver<Option<PresencePatch>> {
        let mut state = self.lock();
        let tx = state.presence.entry(ns.to_owned());
        tx.or_insert_with(|| broadcast::channel(BUFFER).0)
            .subscribe()
    }

    /// A receiver of the wake-ups (`None`: the listener was lost).
    pub(crate) fn wakeups(&self) -> broadcast::Receiver<Option<String>> {
        self.lock().wakeups.subscribe()
    }

    /// A receiver of the cancels (`None`: the listener was lost).
    pub(crate) fn cancels(&self) -> broadcast::Receiver<Option<Cancellation>> {
        self.lock().cancels.subscribe()
    }

    fn heard(&self, schema: &str, notice: &tokio_postgres::Notification) {
        let (name, payload) = (notice.channel(), notice.payload());
        if name == channel(schema, Channel::Events) {
            match serde_json::from_str::<EventsNotice>(payload) {
                Ok(n) => {
                    if let Some(tx) = self.lock().feeds.get(&n.s) {
                        tx.send_modify(|last| {
                            last.seq += 1;
                            last.frontier = n.f;
                            if n.r != 0 {
                                last.read_seq = last.seq;
                            }
                        });
                    }
                }
                Err(e) => unreadable(name, e),
            }
        } else if name == channel(schema, Channel::Work) {
            match serde_json::from_str::<String>(payload) {
                Ok(session) => drop(self.lock().wakeups.send(Some(session))),
                Err(e) => unreadable(name, e),
            }
        } else if name == channel(schema, Channel::Cancels) {
            match serde_json::from_str::<Cancellation>(payload) {
                Ok(c) => drop(self.lock().cancels.send(Some(c))),
                Err(e) => unreadable(name, e),
            }
        } else if name == channel(schema, Channel::Presence) {
            match serde_json::from_str::<PresenceNotice>(payload) {
                Ok(n) => {
                    if let Some(tx) = self.lock().presence.get(&n.ns) {
                        let _ = tx.send(n.p);
                    }
                }
                Err(e) => unreadable(name, e),
            }
        }
    }

    /// The listener is lost: streams that cannot read end, the rest poll.
    fn lost(&self) {
        self.live.send_replace(false);
        let state = self.lock();
        let _ = state.wakeups.send(None);
        let _ = state.cancels.send(None);
    }

    fn read_all(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }
}

fn unreadable(channel: &str, error: serde_json::Error) {
    tracing::warn!(channel, %error, "a notice a2 cannot read; ignored");
}

/// Starts the listener of `hub` on `db`: it runs until the hub closes.
pub(crate) fn spawn(db: Database, hub: Arc<Hub>) {
    tokio::spawn(async move { listen(db, hub).await });
}

async fn listen(db: Database, hub: Arc<Hub>) {
    let mut closing = hub.closing();
    let mut pause = Duration::from_millis(50);
    let mut down_since: Option<tokio::time::Instant> = None;
    loop {
        if *closing.borrow_and_update() {
            return;
        }
        match session(&db, &hub, &mut closing, &mut down_since).await {
            Ok(()) => return,
            Err(error) => {
                hub.lost();
                if down_since.is_none() {
                    tracing::warn!(%error, "Postgres notices unheard; feeds poll every {FALLBACK_POLL:?} until the listener is back");
                    down_since = Some(tokio::time::Instant::now());
                }
            }
        }
        // Down: every feed reads each poll until the next attempt.
        let until = tokio::time::Instant::now() + pause;
        loop {
            hub.read_all();
            let next = (tokio::time::Instant::now() + FALLBACK_POLL).min(until);
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = closing.changed() => return,
            }
            if tokio::time::Instant::now() >= until {
                break;
            }
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// One connection of the listener: LISTEN, then hand out what it hears
/// until it fails (`Err`) or the hub closes (`Ok`). `down_since`: since
/// when nothing was heard, told and cleared once the listener is back.
async fn session(
    db: &Database,
    hub: &Arc<Hub>,
    closing: &mut watch::Receiver<bool>,
    down_since: &mut Option<tokio::time::Instant>,
) -> Result<()> {
    let heard = Arc::downgrade(hub);
    let schema = db.schema().to_owned();
    let (client, mut task) = db
        .dedicated(move |notice| {
            if let Some(hub) = heard.upgrade() {
                hub.heard(&schema, &notice);
            }
        })
        .await?;
    let result = async {
        let mut statements = String::new();
        for what in Channel::ALL {
            let name = channel(db.schema(), what);
            statements.push_str(&format!("LISTEN \"{}\";", name.replace('"', "\"\"")));
        }
        client
            .batch_execute(&statements)
            .await
            .map_err(|e| db.error("listening", e))?;
        hub.live.send_replace(true);
        // Whatever was written while nothing was heard is read now.
        hub.read_all();
        if let Some(since) = down_since.take() {
            tracing::info!(after = ?since.elapsed(), "Postgres notices heard again");
        }
        loop {
            tokio::select! {
                ended = &mut task => {
                    return Err(match ended {
                        Ok(Err(error)) => error,
                        _ => Error::unavailable("the Postgres listener stopped"),
                    });
                }
                _ = closing.changed() => return Ok(()),
                _ = tokio::time::sleep(PING_EVERY) => {
                    let ping = tokio::time::timeout(PING_EVERY, client.simple_query(""));
                    match ping.await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return Err(db.error("checking the listener", e)),
                        Err(_) => {
                            return Err(Error::unavailable(format!(
                                "the Postgres listener did not answer within {PING_EVERY:?}"
                            )));
                        }
                    }
                }
            }
        }
    }
    .await;
    task.abort();
    result
}

impl Channel {
    const ALL: [Channel; 4] = [
        Channel::Events,
        Channel::Work,
        Channel::Cancels,
        Channel::Presence,
    ];
}
