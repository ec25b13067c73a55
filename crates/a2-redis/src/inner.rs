//! [`Inner`]: what the store and its live feeds share — the transport,
//! the push connection, the layout — and the session-script runner.
//! `store/` (the `Store` methods) and `feed.rs` (live feeds) both build
//! on it and not on each other.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2_core::{Error, Event, Millis, PresenceEntry, Result, StoreOptions, StoredEvent};
use foldhash::{HashMap, HashMapExt};
use redis::Value;

use crate::batcher::Batcher;
use crate::codec::{self, Entry};
use crate::layout::{Layout, SessionKeys};
use crate::lua::{Library, Publish, SessionScript};
use crate::marks::Marks;
use crate::ops::{self, Args};
use crate::subscriber::Subscriber;
use crate::transport::{FunctionCall, Transport};

/// How many rows one read command returns at most (R1).
pub(crate) const PAGE: usize = 256;

/// How many log entries a trim's read of ids asks for at a time.
const LOG_IDS_PAGE: usize = 1000;

/// What the store and its feeds share.
pub(crate) struct Inner {
    pub(crate) transport: Arc<dyn Transport>,
    /// Session scripts go through it (group commit).
    pub(crate) batcher: Arc<Batcher>,
    pub(crate) subscriber: Arc<dyn Subscriber>,
    pub(crate) layout: Layout,
    pub(crate) options: StoreOptions,
    /// How often this instance refreshes its entry in the marks of the
    /// sessions its feeds follow (`src/keeper.rs`); an entry lasts three
    /// periods.
    pub(crate) follow_refresh: Duration,
    /// This instance's id in those marks: random, so two instances never
    /// share one.
    pub(crate) instance: String,
    /// How long a presence subscription may wait for its sync: the
    /// subscriber connection may have to `SUBSCRIBE`, fail, reconnect,
    /// subscribe again and `PING`.
    pub(crate) subscribe_timeout: Duration,
    pub(crate) wake_carry_cap: usize,
    pub(crate) closed: AtomicBool,
    /// See [`Inner::session_keys`]. A std mutex: held for one map lookup.
    pub(crate) key_cache: Mutex<HashMap<String, Arc<SessionKeys>>>,
    /// The sessions this instance's live feeds follow (ST2).
    pub(crate) marks: Marks,
}

/// Sessions whose keys [`Inner::session_keys`] keeps.
pub(crate) const KEY_CACHE: usize = 16 * 1024;

impl Inner {
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            return Err(Error::closed("the store is closed"));
        }
        Ok(())
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub(crate) fn now(&self) -> Millis {
        self.options.clock.now_ms()
    }

    /// A session's keys, built once per session and kept (up to
    /// [`KEY_CACHE`] sessions, then the cache starts over): building them
    /// is a dozen string formats, which showed in the client's profile.
    pub(crate) fn session_keys(&self, session: &str) -> Arc<SessionKeys> {
        let mut cache = self.key_cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(keys) = cache.get(session) {
            return Arc::clone(keys);
        }
        if cache.len() >= KEY_CACHE {
            cache.clear();
        }
        let keys = Arc::new(self.layout.session(session));
        cache.insert(session.to_owned(), Arc::clone(&keys));
        keys
    }

    /// Runs a session script with the session's keys and the prelude's
    /// arguments (`src/lua.rs`) before the script's own.
    pub(crate) async fn run(
        &self,
        script: &'static SessionScript,
        session: &str,
        now: Millis,
        own: Args,
    ) -> Result<Value> {
        self.check_open()?;
        let keys = self.session_keys(session);
        if self.transport.is_cluster() {
            let args = crate::batcher::alone_args(&keys, session, now, &own);
            // A batch carries keys of many sessions, so of many slots: on a
            // cluster every operation is its own call (the cluster
            // connection pipelines concurrent calls per node), a function
            // of the library that publishes on sharded channels.
            let keys = keys.keys();
            let library = crate::ops::SHARDED_LIBRARY
                .get_or_init(|| Library::new(&crate::ops::ALL, Publish::Sharded));
            if let Some(function) = library.function(script)
                && let Some(reply) = self
                    .transport
                    .function(FunctionCall::new(library, function, &keys, &args), false)
                    .await?
            {
                return Ok(reply);
            }
            return self.transport.script(script.sharded(), &keys, &args).await;
        }
        self.batcher.run(script, keys, session, now, own).await
    }

    /// How long an entry in a session's mark lasts once refreshed: three
    /// refresh periods, so a crashed instance stops costing publishes
    /// within three periods and a late refresh or two lose nothing.
    pub(crate) fn follow_ttl(&self) -> Duration {
        self.follow_refresh * 3
    }

    /// Refreshes or releases this instance's entry in `session`'s mark
    /// (`lua/follow.lua`): the session's writes publish wake-ups only while
    /// some entry is in force (ST2).
    ///
    /// Either is sent again when the connection is lost before the reply
    /// (RD8): run twice, it leaves what running it once does.
    pub(crate) async fn follow(&self, session: &str, follow: ops::follow::Follow) -> Result<()> {
        self.check_open()?;
        let keys = self.session_keys(session);
        let args = ops::follow::encode(follow, &self.instance, self.follow_ttl());
        let reply = self
            .transport
            .script_replayable(
                &crate::lua::FOLLOW,
                &[keys.meta.as_str(), keys.followers.as_str()],
                &args,
            )
            .await?;
        match follow {
            ops::follow::Follow::Refresh => ops::follow::decode_refresh(reply).map(drop),
            ops::follow::Follow::Release => ops::follow::decode_release(reply).map(drop),
        }
    }

    /// How many events a feed's catch-up read asks for: a page, or less
    /// when the transport caps stream replies (REST).
    pub(crate) fn feed_page(&self) -> usize {
        PAGE.min(self.transport.stream_page())
    }

    /// One page of `session` as `lua/read.lua` answers it, with the
    /// session's bounds, read in one step.
    pub(crate) async fn read_reply(
        &self,
        session: &str,
        page: &ops::read::Page,
        count: usize,
    ) -> Result<redis::Value> {
        let args = ops::read::encode(page, count);
        self.run(&ops::read::SCRIPT, session, self.now(), args)
            .await
    }

    /// The log entries of `session` after `after`, at most `count` (and at
    /// most what the transport reads in one reply), read with the session's
    /// bounds in one step (`lua/read.lua`): what a live feed and
    /// `read_state`'s later pages read. `Trimmed` when the events after
    /// `after` were trimmed away (TR3).
    pub(crate) async fn read_events_after(
        &self,
        session: &str,
        after: u64,
        count: usize,
    ) -> Result<(ops::read::Bounds, Vec<Event>)> {
        self.check_open()?;
        let count = count.min(self.transport.stream_page());
        let page = ops::read::Page::Events { after };
        let reply = self.read_reply(session, &page, count).await?;
        let (bounds, events) = ops::read::decode_events(session, reply)?;
        a2_core::rules::lifecycle::check_retained(session, bounds.first, after)?;
        Ok((bounds, events))
    }

    /// The rows of claimed events: their log entries, read with one
    /// `XRANGE` per run of indexes (one for all when they lie close
    /// together; all in one round trip), joined with the records the
    /// claim wrote. The claim checked that the log has no hole (E1), so
    /// an entry missing now was removed since: `Corrupted`.
    pub(crate) async fn claimed_rows(
        &self,
        session: &str,
        claimed: Vec<(u64, Vec<u8>)>,
    ) -> Result<Vec<StoredEvent>> {
        let (Some(first), Some(last)) = (claimed.first(), claimed.last()) else {
            return Ok(Vec::new());
        };
        let keys = self.session_keys(session);
        let log = &keys.log;
        let mut runs: Vec<(u64, u64)> = Vec::new();
        if last.0 - first.0 < 2 * claimed.len() as u64 {
            runs.push((first.0, last.0));
        } else {
            for &(index, _) in &claimed {
                match runs.last_mut() {
                    Some(run) if run.1 + 1 == index => run.1 = index,
                    _ => runs.push((index, index)),
                }
            }
        }
        let cmds = runs
            .iter()
            .map(|(from, to)| {
                let mut cmd = redis::cmd("XRANGE");
                cmd.arg(log).arg(format!("{from}-0")).arg(format!("{to}-0"));
                cmd
            })
            .collect();
        let mut entries = HashMap::with_capacity(claimed.len());
        for reply in self.transport.pipeline_replayable(cmds).await? {
            for entry in codec::array(reply)? {
                let entry = codec::entry_reply(session, entry)?;
                entries.insert(entry.event.index, entry);
            }
        }
        claimed
            .into_iter()
            .map(|(index, record)| {
                let Some(Entry { event }) = entries.remove(&index) else {
                    return Err(Error::corrupted(
                        format!("event {index} was claimed but is missing from the log"),
                        Some(session),
                        Some(index),
                    ));
                };
                codec::stored(event, Some(&record))
            })
            .collect()
    }

    /// The id index's field (`#{event id}`) of each event of `session`'s
    /// log from its first retained event through `through`, at most
    /// `most`, in index order, read a page at a time: what `trim.lua`
    /// checks against the id index and deletes (TR1). Only the ids are
    /// kept of each page.
    pub(crate) async fn log_ids(
        &self,
        session: &str,
        through: u64,
        most: usize,
    ) -> Result<Vec<Vec<u8>>> {
        self.check_open()?;
        let keys = self.session_keys(session);
        let page = LOG_IDS_PAGE.min(self.transport.stream_page()).max(1);
        let end = format!("{through}-0");
        let mut start = "-".to_owned();
        let mut ids = Vec::new();
        while ids.len() < most {
            let want = page.min(most - ids.len());
            let mut cmd = redis::cmd("XRANGE");
            cmd.arg(&keys.log)
                .arg(&start)
                .arg(&end)
                .arg("COUNT")
                .arg(want);
            let entries = codec::array(self.transport.call_replayable(cmd).await?)?;
            let got = entries.len();
            let mut last = None;
            for entry in entries {
                let (stream_id, id) = codec::entry_event_id(entry)?;
                ids.push([b"#".as_slice(), &id].concat());
                last = Some(stream_id);
            }
            match last {
                // Exclusive start (Redis ≥ 6.2): the entry after the last.
                Some(last) if got == want => start = format!("({last}"),
                _ => break,
            }
        }
        Ok(ids)
    }

    /// The live presence entries of `ns` (P3).
    pub(crate) async fn presence_entries(&self, ns: &str) -> Result<Vec<PresenceEntry>> {
        let reply = self
            .run(
                &ops::presence::READ,
                ns,
                self.now(),
                ops::presence::encode_read(),
            )
            .await?;
        ops::presence::decode_read(reply)
    }
}

impl Inner {
    /// Runs `script` once per call (its keys and arguments) in one pipeline,
    /// sent once more after a lost connection (every caller's calls are
    /// harmless to replay, RD8): one round trip on RESP, one request over
    /// REST; on a cluster, the transport sends each call to its keys' node,
    /// concurrently. A server that lacks the script (after a restart, `SCRIPT
    /// FLUSH` or a failover) gets it loaded (`Transport::reload`), then the
    /// pipeline goes again.
    pub(crate) async fn script_pipeline<'k, K: AsRef<[&'k str]>>(
        &self,
        script: &redis::Script,
        calls: &[(K, &ops::Args)],
    ) -> Result<Vec<redis::Value>> {
        let cmds = || -> Vec<redis::Cmd> {
            calls
                .iter()
                .map(|(keys, args)| {
                    crate::transport::code_call("EVALSHA", script.get_hash(), keys.as_ref(), args)
                })
                .collect()
        };
        match self.transport.pipeline_replayable(cmds()).await {
            Err(error) if is_noscript(&error) => {
                let Some((keys, args)) = calls.first() else {
                    return Ok(Vec::new());
                };
                self.transport.reload(script, keys.as_ref(), args).await?;
                self.transport.pipeline_replayable(cmds()).await
            }
            other => other,
        }
    }
}

/// Whether the server lacked a script: the backend error behind the
/// store's error is the `redis` crate's `NOSCRIPT` error (over RESP or
/// REST), classified by its kind, never by its text.
fn is_noscript(error: &Error) -> bool {
    error
        .backend()
        .and_then(|e| e.downcast_ref::<redis::RedisError>())
        .is_some_and(|e| e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
}
