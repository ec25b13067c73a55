//! Where committed writes are announced: one hub per database file per
//! process, shared by every store instance on that file.
//!
//! # Inside one process: push
//! ST2's "push, not poll" holds within a process; across processes SQLite
//! offers nothing to push with, so the poll below stands in for Redis's
//! wake-ups (ST2 and ST3 describe those; they are Redis's).
//! After each group commit the writer publishes the new frontiers of the
//! sessions it wrote and the presence patches it applied (see `writer`).
//! Feeds wait on a `watch` channel per session, presence subscribers on a
//! `broadcast` channel per namespace. Two store instances on one file in one
//! process share the hub, so they hear each other at once.
//!
//! # Across processes: a poll of `PRAGMA data_version`
//! SQLite has no notification between processes. A poller thread per hub
//! asks its own idle connection for `PRAGMA data_version` every
//! `poll_interval`; the value changes when any other connection committed.
//! It then reads the store-wide commit counter (`commits.seq`, bumped by
//! every group commit of every process) and compares the new numbers with
//! those this process committed itself: only when some were committed
//! elsewhere does it bump the `external` epoch, which makes every feed read
//! after its position and every presence subscription re-read its namespace
//! (P4 recovery). A write of another process thus reaches this process's
//! feeds within one poll interval plus one read. The same poll reads the
//! cancels (CN5) and the sessions announced as gaining work (PS2:
//! `sessions.woke`, the number of the commit that last announced each)
//! that other processes wrote since the last look.
//!
//! # Why the hub is locked across `COMMIT`
//! A presence subscription reads its baseline (and a recovering one
//! re-reads) under the hub lock, and local writers hold that lock from
//! `COMMIT` through publication. So a read sees each local commit either
//! already published (before the subscription joined, or drained by the
//! recovery) or not yet made (it will be published to the subscription):
//! no patch is lost and none is reported twice.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, Weak};
use std::thread;
use std::time::Duration;

use a2_core::{Event, PresencePatch, Result};
use rusqlite::Connection;
use tokio::sync::{broadcast, oneshot, watch};

use crate::effects::{Change, Effects};
use crate::rows::db;

/// How many patches a presence subscriber may fall behind before it
/// recovers by re-reading the namespace.
pub const PRESENCE_BUFFER: usize = 256;

/// The hubs of this process, by canonical database path.
static HUBS: LazyLock<Mutex<HashMap<PathBuf, Weak<Hub>>>> = LazyLock::new(Default::default);

/// The announcements of one database file in this process.
pub struct Hub {
    key: PathBuf,
    state: Mutex<HubState>,
    /// Bumped when another process committed (see the module docs).
    external: watch::Sender<u64>,
    /// Open store instances using this hub; changed under the `HUBS` lock.
    open: Mutex<usize>,
    poller: Arc<PollerControl>,
    /// Hears when the poller thread has closed its connection.
    poller_done: Mutex<Option<oneshot::Receiver<()>>>,
}

/// Lets `release` wake the poller from its sleep and stop it.
#[derive(Default)]
struct PollerControl {
    stop: Mutex<bool>,
    wake: Condvar,
}

/// What a session's feeds hear after a commit of this process: the
/// events it appended to the session (a feed whose position they continue
/// takes them without reading), and how many times the session was
/// cleared (a feed that saw another count reads instead, ST6).
#[derive(Debug, Clone, Default)]
pub struct Wake {
    /// The events the last commit appended to the session, in index order
    /// (empty after a clear).
    pub events: Arc<[Event]>,
    /// Clears of the session since its channel opened.
    pub clears: u64,
    /// Whether the session was closed since its channel opened (CL1): a
    /// feed then reads, to learn where its log ends.
    pub closed: bool,
    /// Whether the last commit appended events it did not carry (it began
    /// before any session had a feed): a feed then reads them.
    pub uncarried: bool,
}

/// The channels of a hub, behind its lock.
pub struct HubState {
    /// Sessions with open feeds → their wake-up channel.
    pub feeds: HashMap<String, watch::Sender<Wake>>,
    /// Namespaces with subscribers → their patch channel.
    pub presence: HashMap<String, broadcast::Sender<PresencePatch>>,
    /// Commit numbers of this process not yet seen by the poller.
    local: BTreeSet<i64>,
    /// The last commit number the poller has accounted for.
    seen: i64,
    /// Attempts cancelled while leased (CN5), by this process's commits and,
    /// through the poller, by other processes'.
    pub cancels: broadcast::Sender<a2_core::Cancellation>,
    /// The last row of `cancels` the poller has read.
    cancels_seen: i64,
    /// Sessions that gained claimable work (PS2), by this process's commits
    /// and, through the poller, by other processes'.
    pub wakeups: broadcast::Sender<String>,
    /// The highest `sessions.woke` the poller has read.
    woke_seen: i64,
}

impl HubState {
    /// Notes a commit of this process, so the poller does not take it for
    /// another process's.
    pub fn record_local_commit(&mut self, seq: i64) {
        if seq > self.seen {
            self.local.insert(seq);
        }
    }

    /// Wakes the feeds and subscribers that a commit concerns.
    pub fn publish(&mut self, effects: Effects) {
        // One wake-up per session and commit: what its operations appended
        // since the last clear among them.
        let mut changed: HashMap<String, (Vec<Event>, u64, bool, bool)> = HashMap::new();
        for (session, change) in effects.frontiers {
            if !self.feeds.contains_key(&session) {
                continue;
            }
            let (events, clears, closed, uncarried) = changed.entry(session).or_default();
            match change {
                Change::Appended(appended) => events.extend(appended),
                Change::Grew => *uncarried = true,
                Change::Cleared => {
                    events.clear();
                    *clears += 1;
                    *closed = false;
                }
                Change::Closed => *closed = true,
            }
        }
        for (session, (events, clears, closed, uncarried)) in changed {
            if let Some(tx) = self.feeds.get(&session) {
                tx.send_modify(|wake| {
                    wake.events = events.into();
                    wake.clears += clears;
                    wake.closed = closed;
                    wake.uncarried = uncarried;
                });
            }
        }
        for (ns, patch) in effects.patches {
            if let Some(tx) = self.presence.get(&ns) {
                // An error only means no subscriber is listening right now.
                let _ = tx.send(patch);
            }
        }
        for cancel in effects.cancels {
            let _ = self.cancels.send(cancel);
        }
        for session in effects.wakeups {
            let _ = self.wakeups.send(session);
        }
    }
}

impl Hub {
    /// The hub of `path` in this process, started with `poll_interval` if
    /// there is none yet (an existing hub keeps the interval it has).
    pub fn for_path(path: &Path, poll_interval: Duration, busy: Duration) -> Result<Arc<Hub>> {
        let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let mut hubs = HUBS.lock().unwrap_or_else(|p| p.into_inner());
        hubs.retain(|_, hub| hub.strong_count() > 0);
        if let Some(hub) = hubs.get(&key).and_then(Weak::upgrade) {
            *hub.open.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            return Ok(hub);
        }
        let conn = crate::schema::connect(path, busy)?;
        let seen: i64 = conn
            .query_row("SELECT seq FROM commits WHERE id = 1", [], |row| row.get(0))
            .map_err(db)?;
        let cancels_seen: i64 = conn
            .query_row("SELECT coalesce(max(seq), 0) FROM cancels", [], |row| {
                row.get(0)
            })
            .map_err(db)?;
        let woke_seen: i64 = conn
            .query_row("SELECT coalesce(max(woke), 0) FROM sessions", [], |row| {
                row.get(0)
            })
            .map_err(db)?;
        let control = Arc::new(PollerControl::default());
        let (done, poller_done) = oneshot::channel();
        let hub = Arc::new(Hub {
            key: key.clone(),
            open: Mutex::new(1),
            poller: control.clone(),
            poller_done: Mutex::new(Some(poller_done)),
            state: Mutex::new(HubState {
                feeds: HashMap::new(),
                presence: HashMap::new(),
                local: BTreeSet::new(),
                seen,
                cancels: broadcast::channel(1024).0,
                cancels_seen,
                wakeups: broadcast::channel(1024).0,
                woke_seen,
            }),
            external: watch::channel(0).0,
        });
        let weak = Arc::downgrade(&hub);
        thread::Builder::new()
            .name("a2-sqlite-poller".into())
            .spawn(move || {
                poll(conn, weak, &control, poll_interval);
                let _ = done.send(());
            })
            .map_err(|e| a2_core::Error::unavailable_from("cannot start the poller thread", e))?;
        hubs.insert(key, Arc::downgrade(&hub));
        Ok(hub)
    }

    /// Locks the channels. A panic while they were locked leaves them
    /// usable (they hold no invariant a half-done update could break:
    /// at worst a wake-up is missing, which the next one covers).
    pub fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called by a store instance that closes. The last one stops the
    /// poller and waits until its connection is closed, so that a closed
    /// store leaves the file alone.
    pub async fn release(&self) {
        let done = {
            let mut hubs = HUBS.lock().unwrap_or_else(|p| p.into_inner());
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            *open = open.saturating_sub(1);
            if *open > 0 {
                return;
            }
            if hubs
                .get(&self.key)
                .is_some_and(|hub| std::ptr::eq(hub.as_ptr(), self))
            {
                hubs.remove(&self.key);
            }
            *self.poller.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
            self.poller.wake.notify_all();
            self.poller_done
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
        };
        if let Some(done) = done {
            let _ = done.await;
        }
    }

    /// The cancels of leased attempts (CN5) this hub hears: this process's
    /// at their commit, other processes' when the poller reads them.
    pub fn cancel_stream(&self) -> a2_core::CancelStream {
        a2_core::feed::broadcast_stream(self.lock().cancels.subscribe())
    }

    /// The sessions that gain claimable work (PS2) this hub hears: this
    /// process's at their commit, other processes' when the poller reads
    /// them. Live when it returns: the receiver subscribes within the call.
    pub fn wakeup_stream(&self) -> a2_core::WakeupStream {
        a2_core::feed::broadcast_stream(self.lock().wakeups.subscribe())
    }

    /// A receiver of the external epoch.
    pub fn external(&self) -> watch::Receiver<u64> {
        self.external.subscribe()
    }

    /// One poll (see the module docs): true when another process committed.
    fn check(&self, conn: &Connection) -> rusqlite::Result<bool> {
        let mut state = self.lock();
        let seq: i64 =
            conn.query_row("SELECT seq FROM commits WHERE id = 1", [], |row| row.get(0))?;
        let foreign = ((state.seen + 1)..=seq).any(|n| !state.local.contains(&n));
        let local: BTreeSet<i64> = state.local.range(..=seq).copied().collect();
        state.local.retain(|&n| n > seq);
        state.seen = state.seen.max(seq);
        if foreign {
            // CN5: cancels of other processes. Rows this process wrote in
            // the same span are announced again, which a hint allows.
            let mut stmt = conn.prepare_cached(
                "SELECT seq, session, idx, attempt FROM cancels WHERE seq > ?1 ORDER BY seq",
            )?;
            let rows = stmt
                .query_map([state.cancels_seen], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, i64>(2)?,
                        row.get::<_, i64>(3)?,
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            for (n, session, index, attempt) in rows {
                state.cancels_seen = state.cancels_seen.max(n);
                if let (Ok(index), Ok(attempt)) = (u64::try_from(index), u32::try_from(attempt)) {
                    let _ = state.cancels.send(a2_core::Cancellation {
                        session,
                        index,
                        attempt,
                    });
                }
            }
            // PS2: sessions other processes announced up to `seq` (this
            // process heard its own at their commit). A session announced
            // again since by this process is not announced twice.
            let mut stmt = conn.prepare_cached(
                "SELECT woke, name FROM sessions WHERE woke > ?1 AND woke <= ?2 ORDER BY woke",
            )?;
            let rows = stmt
                .query_map([state.woke_seen, seq], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            for (n, session) in rows {
                if !local.contains(&n) {
                    let _ = state.wakeups.send(session);
                }
            }
        }
        state.woke_seen = state.woke_seen.max(seq);
        Ok(foreign)
    }
}

fn poll(conn: Connection, hub: Weak<Hub>, control: &PollerControl, interval: Duration) {
    let version = |conn: &Connection| -> Option<i64> {
        conn.query_row("PRAGMA data_version", [], |row| row.get(0))
            .ok()
    };
    let mut last = version(&conn);
    loop {
        {
            let stop = control.stop.lock().unwrap_or_else(|p| p.into_inner());
            let (stop, _) = control
                .wake
                .wait_timeout(stop, interval)
                .unwrap_or_else(|p| p.into_inner());
            if *stop {
                return;
            }
        }
        let Some(hub) = hub.upgrade() else {
            return;
        };
        let now = version(&conn);
        if now == last {
            continue;
        }
        last = now;
        match hub.check(&conn) {
            Ok(true) => {
                hub.external
                    .send_modify(|epoch| *epoch = epoch.wrapping_add(1));
            }
            Ok(false) => {}
            Err(error) => {
                // Wake everyone: they read, and a read that fails ends
                // their feed with the error.
                tracing::warn!(%error, "polling the SQLite database failed");
                hub.external
                    .send_modify(|epoch| *epoch = epoch.wrapping_add(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(index: u64) -> Event {
        Event {
            id: format!("e{index}"),
            event_type: "t".into(),
            payload: serde_json::json!(index),
            index,
            session_id: "s".into(),
            created_at: 0,
            cause: None,
            lane: None,
        }
    }

    fn effects(change: Change) -> Effects {
        let mut effects = Effects::default();
        effects.frontiers.push(("s".into(), change));
        effects
    }

    /// An append of a group that began before the session had a feed
    /// carries no events; the feed that opened meanwhile must read them
    /// rather than take the empty wake-up as "nothing new".
    #[tokio::test]
    async fn a_wake_up_without_the_events_tells_the_feed_to_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.db");
        let store = crate::SqliteStore::open(&path, crate::SqliteOptions::default()).unwrap();
        let hub = Hub::for_path(&path, Duration::from_secs(60), Duration::from_secs(1)).unwrap();
        let (tx, mut rx) = watch::channel(Wake::default());
        hub.lock().feeds.insert("s".into(), tx);

        hub.lock().publish(effects(Change::Grew));
        assert!(rx.has_changed().unwrap(), "the feed is woken");
        let wake = rx.borrow_and_update().clone();
        assert!(wake.uncarried && wake.events.is_empty(), "{wake:?}");

        hub.lock()
            .publish(effects(Change::Appended(vec![event(2)])));
        let wake = rx.borrow_and_update().clone();
        assert!(!wake.uncarried, "a carrying wake-up is taken as it is");
        assert_eq!(wake.events.iter().map(|e| e.index).collect::<Vec<_>>(), [2]);

        let mut both = effects(Change::Appended(vec![event(3)]));
        both.frontiers.push(("s".into(), Change::Grew));
        hub.lock().publish(both);
        assert!(
            rx.borrow_and_update().uncarried,
            "one uncarried append taints the commit"
        );
        drop((hub, store));
    }
}
