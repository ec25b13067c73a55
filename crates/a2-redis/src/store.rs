//! [`RedisStore`]: the [`Store`] contract on Redis.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use a2_core::rules::read::missing;
use a2_core::validate;
use a2_core::*;
use async_trait::async_trait;
use serde_json::Value as Json;

use crate::feed;
use crate::inner::{Inner, PAGE};
use crate::layout::{DEFAULT_PARTITIONS, LAYOUT_VERSION, Layout, MAX_PARTITIONS, SessionKeys};
use crate::ops::{self, append, claim, complete, read::Page};
use crate::subscriber::{RespSubscriber, Subscriber, SubscriberConfig};
use crate::transport::{RespTransport, Transport};

/// Options of [`RedisStore::connect`].
///
/// ```
/// use std::time::Duration;
/// use a2_redis::RedisOptions;
/// let options = RedisOptions::default()
///     .prefix("myapp")
///     .command_timeout(Duration::from_secs(1));
/// assert_eq!(options.prefix, "myapp");
/// ```
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Every key starts with `{prefix}:` (RD3); default `a2`. Must not be
    /// empty nor hold `{` or `}` (which would break the hash tags).
    pub prefix: String,
    /// Clock, id source and limits.
    pub store: StoreOptions,
    /// Bound on every command; a call to an unreachable server fails with
    /// `StoreUnavailable` after this long (default 5 s).
    pub command_timeout: Duration,
    /// Bound on opening a connection (default 2 s).
    pub connect_timeout: Duration,
    /// A live feed re-reads its session this often even without wake-ups,
    /// so a lost wake-up costs latency, never delivery (ST2; default 2 s).
    pub safety_reread: Duration,
    /// Wake-ups carry the appended events while they serialize to at most
    /// this many bytes; larger batches publish only the new frontier
    /// (ST2; default 64 KiB).
    pub wake_carry_cap: usize,
    /// How many partitions sessions hash into (1 ..= 1024; default 48).
    /// Fixed for the life of a key prefix: the first store to open a
    /// prefix records it, and a store opened with another count fails with
    /// `InvalidArgument` before writing anything. See
    /// `docs/redis-layout.md` for how to pick it.
    pub partitions: u16,
    /// On a cluster (`redis+cluster://`): how many replicas must hold a
    /// write before the call returns (`WAIT` after each script on the
    /// connection that carried it; default 0, the master's reply is
    /// enough). With 1, an acknowledged write survives its master's
    /// failure; a write the replicas do not confirm within the command
    /// timeout fails with `StoreUnavailable` (retry it: every write is
    /// idempotent or fenced). See docs/design.md, "On a cluster".
    pub acknowledged_by: usize,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "a2".to_owned(),
            store: StoreOptions::default(),
            command_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            safety_reread: Duration::from_secs(2),
            wake_carry_cap: 64 * 1024,
            partitions: DEFAULT_PARTITIONS,
            acknowledged_by: 0,
        }
    }
}

impl RedisOptions {
    /// Sets the key prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the clock, id source and limits.
    pub fn store(mut self, store: StoreOptions) -> Self {
        self.store = store;
        self
    }

    /// Sets the command timeout.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the safety re-read interval of live feeds.
    pub fn safety_reread(mut self, interval: Duration) -> Self {
        self.safety_reread = interval;
        self
    }

    /// Sets the wake-up carry cap.
    pub fn wake_carry_cap(mut self, bytes: usize) -> Self {
        self.wake_carry_cap = bytes;
        self
    }

    /// Sets the partition count of a new key prefix.
    pub fn partitions(mut self, partitions: u16) -> Self {
        self.partitions = partitions;
        self
    }

    /// Sets how many replicas must hold a write before it returns (on a
    /// cluster).
    pub fn acknowledged_by(mut self, replicas: usize) -> Self {
        self.acknowledged_by = replicas;
        self
    }
}

/// The Redis store. Cheap to share behind an `Arc`; one instance holds one
/// command connection (reconnecting by itself) and one push connection for
/// all of its live feeds and presence subscriptions.
///
/// Live feeds need no handshake: they read from their `after_index` and
/// re-read whenever a wake-up may have been missed. `presence_subscribe`
/// does: it returns once the server has confirmed the channel subscription
/// on the push connection and the namespace's baseline is read, so every
/// patch applied after it returns, by any process, is reported (P4). After
/// the push connection comes back, a subscription re-reads the namespace
/// and reports what changed meanwhile. See `docs/redis-layout.md`.
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.layout.prefix())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// The key prefix this store works under (RD3).
    pub fn prefix(&self) -> &str {
        self.inner.layout.prefix()
    }

    /// The keys and channels of a session (or presence namespace), for
    /// looking at it with `redis-cli` (RD4, docs/redis-layout.md).
    ///
    /// ```no_run
    /// # async fn demo() -> a2_core::Result<()> {
    /// use a2_redis::{RedisOptions, RedisStore};
    /// let store = RedisStore::connect("redis://127.0.0.1/", RedisOptions::default()).await?;
    /// let keys = store.session_keys("user:42");
    /// println!("redis-cli XRANGE '{}' - +", keys.log);
    /// # Ok(()) }
    /// ```
    pub fn session_keys(&self, session: &str) -> SessionKeys {
        self.inner.session_keys(session).as_ref().clone()
    }

    /// The partition count of this store's key prefix.
    pub fn partitions(&self) -> usize {
        self.inner.layout.partitions().len()
    }

    /// Connects to the server at `url` (`redis://host:port/db`; `rediss://`
    /// with feature `tls`; `https://:TOKEN@host` with feature `rest`, see
    /// [`RedisStore::connect_rest`]), or to the Redis Cluster of
    /// `redis+cluster://host:port,host:port` (see
    /// [`RedisStore::connect_cluster`]).
    ///
    /// Fails with `InvalidArgument` for a bad URL, prefix or partition
    /// count (also when the prefix already holds data laid out with another
    /// partition count: nothing is written then), and with
    /// `StoreUnavailable` when the server cannot be reached within the
    /// connect timeout. Needs a Tokio runtime.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self> {
        check_options(&options)?;
        if crate::cluster::is_cluster_url(url) {
            let seeds = crate::cluster::seeds(url)?;
            return Self::connect_cluster(&seeds, options).await;
        }
        #[cfg(feature = "rest")]
        if crate::rest::is_rest_url(url) {
            return Self::connect_rest(url, options, crate::rest::RestOptions::default()).await;
        }
        let client =
            redis::Client::open(url).map_err(|e| Error::invalid(format!("bad Redis URL: {e}")))?;
        let info = client.get_connection_info().clone();
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let push_client = redis::Client::open(info.set_redis_settings(resp3))
            .map_err(|e| Error::invalid(format!("bad Redis URL: {e}")))?;
        let transport =
            RespTransport::connect(client, options.command_timeout, options.connect_timeout)
                .await?;
        let subscriber = RespSubscriber::start(SubscriberConfig {
            client: push_client,
            connect_timeout: options.connect_timeout,
            command_timeout: options.command_timeout,
        });
        Self::from_parts(Arc::new(transport), Arc::new(subscriber), options).await
    }

    /// Connects to a Redis Cluster (Redis ≥ 7) through any of `seeds`
    /// (`redis://host:port` URLs of some of its nodes; one reachable node
    /// is enough to find the others).
    ///
    /// Every script touches the keys of one partition, so of one slot; the
    /// partitions spread evenly over the masters (docs/redis-layout.md,
    /// "Redis Cluster"). Live feeds, presence and wake-ups use sharded
    /// channels on one push connection per store (a connection per node
    /// under it). Fails as [`RedisStore::connect`].
    ///
    /// ```no_run
    /// # async fn demo() -> a2_core::Result<()> {
    /// use a2_redis::{RedisOptions, RedisStore};
    /// let seeds = ["redis://10.0.0.1:7000".to_owned(), "redis://10.0.0.2:7000".to_owned()];
    /// let store = RedisStore::connect_cluster(&seeds, RedisOptions::default()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_cluster(seeds: &[String], options: RedisOptions) -> Result<Self> {
        check_options(&options)?;
        if seeds.is_empty() {
            return Err(Error::invalid("a cluster needs at least one seed node"));
        }
        let transport = crate::cluster::ClusterTransport::connect(
            seeds,
            options.command_timeout,
            options.connect_timeout,
            options.acknowledged_by,
        )
        .await?;
        let subscriber = crate::cluster::subscriber::ClusterSubscriber::start(
            crate::cluster::subscriber::ClusterSubscriberConfig {
                seeds: seeds.to_vec(),
                connect_timeout: options.connect_timeout,
                command_timeout: options.command_timeout,
            },
        );
        Self::from_parts(Arc::new(transport), Arc::new(subscriber), options).await
    }

    /// A store over any command transport and subscriber: the scripts, key
    /// layout, reply decoding and feed logic do not depend on how commands
    /// travel (a REST transport plugs in here). Checks the prefix's
    /// recorded layout first.
    pub(crate) async fn from_parts(
        transport: Arc<dyn Transport>,
        subscriber: Arc<dyn Subscriber>,
        options: RedisOptions,
    ) -> Result<Self> {
        check_options(&options)?;
        let layout = Layout::new(options.prefix.clone(), options.partitions);
        let reply = transport
            .script(
                &crate::lua::CONFIG,
                &[layout.config().as_str()],
                &ops::config::encode(LAYOUT_VERSION, options.partitions).values,
            )
            .await?;
        let (version, partitions) = ops::config::decode(reply)?;
        if version != LAYOUT_VERSION {
            return Err(Error::invalid(format!(
                "the prefix {:?} holds data of layout {version}; this version of a2 reads layout {LAYOUT_VERSION}",
                options.prefix
            )));
        }
        if partitions != options.partitions.to_string() {
            return Err(Error::invalid(format!(
                "the prefix {:?} was laid out with {partitions} partitions; open it with RedisOptions::partitions({partitions})",
                options.prefix
            )));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                batcher: Arc::new(crate::batcher::Batcher::new(
                    transport.clone(),
                    &ops::BATCH,
                    &ops::LIBRARY,
                    &ops::ALL,
                    options.wake_carry_cap,
                )),
                transport,
                subscriber,
                layout,
                options: options.store,
                safety_reread: options.safety_reread,
                subscribe_timeout: options.connect_timeout + options.command_timeout * 3,
                wake_carry_cap: options.wake_carry_cap,
                closed: AtomicBool::new(false),
                key_cache: Default::default(),
                follows: Default::default(),
            }),
        })
    }
}

pub(crate) fn check_options(options: &RedisOptions) -> Result<()> {
    if options.prefix.is_empty() || options.prefix.contains(['{', '}']) {
        return Err(Error::invalid(
            "the key prefix must be non-empty and hold no `{` or `}`",
        ));
    }
    if !(1..=MAX_PARTITIONS).contains(&options.partitions) {
        return Err(Error::invalid(format!(
            "the partition count must be 1 ..= {MAX_PARTITIONS}, not {}",
            options.partitions
        )));
    }
    Ok(())
}

/// Runs a partition script once per partition (`calls`: its key and
/// arguments) in one pipeline: one round trip on RESP, one request over
/// REST; on a cluster, the transport sends each call to its partition's
/// node, concurrently. A server that lacks the script (after a restart,
/// `SCRIPT FLUSH` or a failover) gets it loaded (`Transport::reload`),
/// then the pipeline goes again.
async fn per_partition<'a, T>(
    inner: &'a Inner,
    script: &redis::Script,
    encode: impl Fn(&'a crate::layout::PartitionKeys) -> (&'a str, ops::Args),
    decode: impl Fn(redis::Value) -> Result<T>,
) -> Result<Vec<T>> {
    let calls: Vec<(&str, ops::Args)> = inner.layout.partitions().iter().map(encode).collect();
    pipelined(inner, script, &calls)
        .await?
        .into_iter()
        .map(decode)
        .collect()
}

/// The pipeline of [`per_partition`]'s calls.
async fn pipelined(
    inner: &Inner,
    script: &redis::Script,
    calls: &[(&str, ops::Args)],
) -> Result<Vec<redis::Value>> {
    let cmds = || -> Vec<redis::Cmd> {
        calls
            .iter()
            .map(|(key, args)| {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(script.get_hash()).arg(1).arg(*key);
                for arg in &args.values {
                    cmd.arg(arg.as_slice());
                }
                cmd
            })
            .collect()
    };
    // Both partition scripts only read, bar a clean-up that is the same
    // again: a replay is harmless (RD8).
    match inner.transport.pipeline_replayable(cmds()).await {
        Err(error) if is_noscript(&error) => {
            let Some((key, args)) = calls.first() else {
                return Ok(Vec::new());
            };
            inner.transport.reload(script, &[key], &args.values).await?;
            inner.transport.pipeline_replayable(cmds()).await
        }
        other => other,
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

/// Sorted, distinct claims.
fn sorted_claims(claims: &[Claim]) -> Vec<Claim> {
    let mut claims = claims.to_vec();
    claims.sort();
    claims.dedup();
    claims
}

/// Merges sorted pages of the partitions into one page of `limit` in byte
/// order, and the cursor of the next page (the last id, when more follow).
fn merge_pages<T>(
    pages: Vec<Vec<T>>,
    limit: usize,
    id: impl Fn(&T) -> &str,
) -> (Vec<T>, Option<String>) {
    let mut all: Vec<T> = pages.into_iter().flatten().collect();
    all.sort_by(|a, b| id(a).as_bytes().cmp(id(b).as_bytes()));
    let cursor = if all.len() > limit {
        all.truncate(limit);
        all.last().map(|x| id(x).to_owned())
    } else {
        None
    };
    (all, cursor)
}

impl Inner {
    /// One ascending page of rows: `(frontier, rows)`.
    async fn read_page(
        &self,
        session: &str,
        after: u64,
        through: Option<u64>,
        count: usize,
    ) -> Result<(u64, Vec<StoredEvent>)> {
        let page = Page::Asc { after, through };
        let reply = self
            .run(
                &ops::read::SCRIPT,
                session,
                self.now(),
                ops::read::encode(&page, count),
            )
            .await?;
        ops::read::decode(session, reply)
    }

    /// Every row in `after < index ≤ min(through, frontier)`, a page at a
    /// time, up to one frontier (R1).
    async fn read_rows(
        &self,
        session: &str,
        after: u64,
        through: Option<u64>,
        limit: usize,
    ) -> Result<(u64, Vec<StoredEvent>)> {
        let mut rows = Vec::new();
        let mut gapless = rules::read::Gapless::after(session, after);
        let mut through = through;
        let mut frontier = None;
        loop {
            let want = (limit - rows.len()).min(PAGE);
            let (last, page) = self
                .read_page(session, gapless.last(), through, want)
                .await?;
            let bound = *frontier.get_or_insert(through.map_or(last, |t| t.min(last)));
            through = Some(bound);
            let got = page.len();
            // Every index up to the bound exists (E1): a hole is an error,
            // never silently skipped.
            for row in &page {
                gapless.next(row.event.index)?;
            }
            rows.extend(page);
            if rows.len() >= limit || gapless.last() >= bound {
                return Ok((bound, rows));
            }
            if got < want {
                gapless.reached(bound)?;
            }
        }
    }
}

impl RedisStore {
    /// `append` (A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12), claiming
    /// the appended ready events when `claim` is given (AC1, AC2, AC3, AC4,
    /// AC5): one script call either way.
    async fn append_claiming(
        &self,
        session: &str,
        events: Vec<NewEvent>,
        claim: Option<AppendClaim>,
    ) -> Result<AppendOutcome> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::session_id(session)?;
        if let Some(claim) = &claim {
            validate::append_claim(claim)?;
        }
        validate::batch(&events, &inner.options.limits, true)?;
        let batch = ops::batch::Batch::new(events, inner.options.ids.as_ref())?;
        let now = inner.now();
        let claiming = match &claim {
            Some(claim) => Some(append::Claiming {
                holder: &claim.holder,
                expires: validate::claim_expiry(claim.lease, now)?,
                limit: validate::effective_limit(claim.limit),
            })
            .filter(|c| c.limit > 0),
            None => None,
        };
        let args = append::encode(&batch, &batch.wake(inner.wake_carry_cap), claiming.as_ref());
        let reply = inner.run(&append::SCRIPT, session, now, args).await?;
        match append::decode(session, reply)? {
            append::Reply::Empty { has_pending } => Ok(AppendOutcome {
                events: Vec::new(),
                has_pending,
                claimed: Vec::new(),
            }),
            append::Reply::Written {
                first,
                has_pending,
                claimed,
            } => {
                let mut events = batch.rows(session, first, now, None);
                if let Some(claiming) = &claiming {
                    for &index in &claimed {
                        let Some(row) = index
                            .checked_sub(first)
                            .and_then(|k| events.get_mut(k as usize))
                        else {
                            return Err(crate::codec::broken(format!(
                                "append claimed index {index}, not one it wrote"
                            )));
                        };
                        row.attempt_count = 1;
                        row.first_claimed_at = Some(now);
                        row.last_claimed_at = Some(now);
                        row.claim_holder = Some(claiming.holder.to_owned());
                        row.claim_expires_at = Some(claiming.expires);
                    }
                }
                Ok(AppendOutcome {
                    events,
                    has_pending,
                    claimed,
                })
            }
            append::Reply::Retry { has_pending, rows } => {
                let wanted: BTreeMap<&str, &NewEvent> = batch
                    .ids
                    .iter()
                    .map(String::as_str)
                    .zip(&batch.events)
                    .collect();
                // A5, decided as every store decides it.
                for row in &rows {
                    let Some(event) = wanted.get(row.event.id.as_str()) else {
                        return Err(Error::corrupted(
                            format!(
                                "a retry's reply holds id {:?}, not in the batch",
                                row.event.id
                            ),
                            Some(session),
                            Some(row.event.index),
                        ));
                    };
                    rules::append::check_retry(event, &row.event)?;
                }
                Ok(AppendOutcome {
                    events: rows,
                    has_pending,
                    claimed: Vec::new(),
                })
            }
            append::Reply::Partial { id } => Err(Error::duplicate(format!(
                "id {id:?} already exists but other ids of the batch do not"
            ))),
            append::Reply::NoCause { index } => Err(Error::invalid(format!(
                "cause index {index} does not exist in session {session:?}"
            ))),
            append::Reply::Superseded { index } => Err(Error::superseded(format!(
                "the cause attempt of event {index} is not its latest, or it is dead-lettered"
            ))),
        }
    }
}

#[async_trait]
impl Store for RedisStore {
    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.options.clock.clone()
    }

    async fn append(&self, session: &str, events: Vec<NewEvent>) -> Result<AppendOutcome> {
        self.append_claiming(session, events, None).await
    }

    async fn append_and_claim(
        &self,
        session: &str,
        events: Vec<NewEvent>,
        claim: AppendClaim,
    ) -> Result<AppendOutcome> {
        self.append_claiming(session, events, Some(claim)).await
    }

    async fn read(&self, session: &str, range: ReadRange) -> Result<Vec<StoredEvent>> {
        self.inner.check_open()?;
        validate::session_id(session)?;
        if range.through_index.is_some_and(|t| t <= range.after_index) {
            return Ok(Vec::new());
        }
        let (_, rows) = self
            .inner
            .read_rows(session, range.after_index, range.through_index, usize::MAX)
            .await?;
        Ok(rows)
    }

    async fn read_history(&self, session: &str, options: HistoryOptions) -> Result<HistoryPage> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::session_id(session)?;
        validate::limit("limit", options.limit)?;
        let limit = validate::effective_limit(options.limit);
        let mut before = options.before_index;
        let mut newest_first = Vec::new();
        while newest_first.len() < limit {
            let want = (limit - newest_first.len()).min(PAGE);
            let args = ops::read::encode(&Page::Desc { before }, want);
            let reply = inner
                .run(&ops::read::SCRIPT, session, inner.now(), args)
                .await?;
            let (frontier, page) = ops::read::decode(session, reply)?;
            let got = page.len();
            // Contiguous down from the first page's start (E1).
            let mut expect = before.map_or(frontier, |b| b.min(frontier + 1).saturating_sub(1));
            for row in &page {
                if row.event.index != expect {
                    return Err(missing(session, expect));
                }
                expect -= 1;
            }
            if let Some(oldest) = page.last() {
                before = Some(oldest.event.index);
            }
            newest_first.extend(page);
            if before == Some(1) || (got == 0 && expect == 0) {
                break;
            }
            if got < want {
                return Err(missing(session, expect));
            }
        }
        newest_first.reverse();
        let has_more = newest_first.first().is_some_and(|e| e.event.index > 1);
        Ok(HistoryPage {
            events: newest_first,
            has_more,
        })
    }

    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimOutcome> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::claim_request(&request)?;
        let now = inner.now();
        let expires = request.lease.expires_at(now);
        if expires <= now {
            return Err(Error::invalid(format!(
                "lease expires at {expires}, not after the store's now {now}"
            )));
        }
        let args = claim::encode(
            &request.holder,
            expires,
            validate::effective_limit(request.limit),
            &request.exclude_indexes,
        );
        let reply = inner
            .run(&claim::SCRIPT, &request.session, now, args)
            .await?;
        Ok(match claim::decode(reply)? {
            claim::Reply::Settled => ClaimOutcome::Settled,
            claim::Reply::Busy { retry_at } => ClaimOutcome::Busy { retry_at },
            claim::Reply::Claimed(claimed) => {
                ClaimOutcome::Claimed(inner.claimed_rows(&request.session, claimed).await?)
            }
            claim::Reply::Corrupted { index } => {
                return Err(Error::corrupted(
                    format!("event {index} is claimable but missing from the log"),
                    Some(&request.session),
                    Some(index),
                ));
            }
        })
    }

    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewOutcome> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::renew_request(&request)?;
        let claims = sorted_claims(&request.claims);
        if claims.is_empty() {
            return Ok(RenewOutcome::default());
        }
        let now = inner.now();
        let args = ops::renew::encode(&request.holder, request.lease.expires_at(now), &claims);
        let reply = inner
            .run(&ops::renew::SCRIPT, &request.session, now, args)
            .await?;
        // Claims ascend, so each list does; an index named with two
        // attempts appears once.
        let mut outcome = ops::renew::decode(reply)?;
        outcome.renewed.dedup();
        outcome.superseded.dedup();
        Ok(outcome)
    }

    async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteOutcome> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::complete_request(&request, &inner.options.limits)?;
        let batch = ops::batch::Batch::new(request.events, inner.options.ids.as_ref())?;
        let cause = Cause {
            index: request.index,
            attempt: request.attempt,
            batch_size: request.batch_size,
        };
        let returned = serde_json::to_string(&batch.ids)
            .map_err(|e| Error::invalid(format!("returned ids: {e}")))?;
        let now = inner.now();
        let args = complete::encode(cause, &returned, &batch, &batch.wake(inner.wake_carry_cap));
        let reply = inner
            .run(&complete::SCRIPT, &request.session, now, args)
            .await?;
        match complete::decode(&request.session, reply)? {
            complete::Reply::Invalid => Err(Error::invalid(format!(
                "index {} does not exist in session {:?}",
                request.index, request.session
            ))),
            complete::Reply::Superseded => Ok(CompleteOutcome::Superseded),
            complete::Reply::Mismatch => Err(Error::duplicate(format!(
                "event {} was completed by attempt {} with other returned ids",
                request.index, request.attempt
            ))),
            complete::Reply::Exists { id } => Err(Error::duplicate(format!(
                "returned id {id:?} already exists"
            ))),
            complete::Reply::Done(events) => Ok(CompleteOutcome::Completed { events }),
            complete::Reply::Written { first } => Ok(CompleteOutcome::Completed {
                events: batch.rows(&request.session, first, now, Some(cause)),
            }),
        }
    }

    async fn fail_attempt(&self, request: FailRequest) -> Result<FailOutcome> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::fail_request(&request)?;
        let args = ops::fail::encode(
            request.index,
            request.attempt,
            &request.error,
            request.max_failures,
            request.retry_at,
        );
        let reply = inner
            .run(&ops::fail::SCRIPT, &request.session, inner.now(), args)
            .await?;
        ops::fail::decode(reply)?.ok_or_else(|| {
            Error::invalid(format!(
                "index {} does not exist in session {:?}",
                request.index, request.session
            ))
        })
    }

    async fn release_claims(&self, request: ReleaseRequest) -> Result<Vec<u64>> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::release_request(&request)?;
        let claims = sorted_claims(&request.claims);
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let args = ops::release::encode(&request.holder, &claims);
        let reply = inner
            .run(&ops::release::SCRIPT, &request.session, inner.now(), args)
            .await?;
        ops::release::decode(reply)
    }

    async fn revive(&self, session: &str, index: u64) -> Result<ReviveOutcome> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::session_id(session)?;
        let reply = inner
            .run(
                &ops::revive::SCRIPT,
                session,
                inner.now(),
                ops::revive::encode(index),
            )
            .await?;
        match ops::revive::decode(session, reply)? {
            ops::revive::Reply::Invalid => Err(Error::invalid(format!(
                "index {index} does not exist in session {session:?}"
            ))),
            ops::revive::Reply::Revived(row) => Ok(ReviveOutcome::Revived(row)),
            ops::revive::Reply::NotDead(row) => Ok(ReviveOutcome::NotDeadLettered(row)),
            ops::revive::Reply::Corrupted => Err(missing(session, index)),
        }
    }

    async fn pending_sessions(&self, page: PageRequest) -> Result<SessionPage> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::limit("limit", page.limit)?;
        let min = match &page.cursor {
            Some(cursor) => [b"(", cursor.as_bytes()].concat(),
            None => b"-".to_vec(),
        };
        let limit = validate::effective_limit(page.limit);
        let want = limit + 1;
        let pages = per_partition(
            inner,
            &ops::sessions::PENDING,
            |part| {
                let args = ops::sessions::encode_pending(&part.base, &min, want);
                (part.pending.as_str(), args)
            },
            ops::sessions::decode_pending,
        )
        .await?;
        let (sessions, cursor) = merge_pages(pages, limit, |s| s.as_str());
        Ok(SessionPage { sessions, cursor })
    }

    async fn read_state(&self, session: &str, reducer: &str) -> Result<StateRead> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::session_id(session)?;
        validate::name("reducer", reducer)?;
        let reply = inner
            .run(
                &ops::read_state::SCRIPT,
                session,
                inner.now(),
                ops::read_state::encode(reducer, PAGE),
            )
            .await?;
        let (frontier, stored, mut events) = ops::read_state::decode(session, reply)?;
        let snapshot = match stored {
            Some(stored) => {
                let (index, _, state) = ops::snapshots::parse(&stored)?;
                Some(Snapshot { index, state })
            }
            None => None,
        };
        // Events are immutable: later pages up to the frontier read in the
        // script complete the same atomic view (S1).
        let mut last = events
            .last()
            .map_or(snapshot.as_ref().map_or(0, |s| s.index), |e| e.index);
        while last < frontier {
            let page = inner
                .read_events_after(session, last, PAGE.min((frontier - last) as usize))
                .await?;
            if page.is_empty() {
                return Err(missing(session, last + 1));
            }
            events.extend(page.into_iter().filter(|e| e.index <= frontier));
            last = events.last().map_or(last, |e| e.index);
        }
        // Every event after the snapshot, none missing (E1).
        let mut gapless =
            rules::read::Gapless::after(session, snapshot.as_ref().map_or(0, |s| s.index));
        for event in &events {
            gapless.next(event.index)?;
        }
        Ok(StateRead { snapshot, events })
    }

    async fn put_snapshots(&self, session: &str, snapshots: Vec<SnapshotWrite>) -> Result<()> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::snapshots(session, &snapshots)?;
        if snapshots.is_empty() {
            return Ok(());
        }
        let reply = inner
            .run(
                &ops::snapshots::SCRIPT,
                session,
                inner.now(),
                ops::snapshots::encode(&snapshots),
            )
            .await?;
        ops::snapshots::decode(reply)?.map_err(|index| {
            Error::invalid(format!(
                "snapshot index {index} is beyond the frontier of session {session:?}"
            ))
        })
    }

    async fn presence_set(
        &self,
        ns: &str,
        participant: &str,
        values: BTreeMap<String, Option<Json>>,
        meta: PresenceMeta,
    ) -> Result<Option<PresencePatch>> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::presence_set(ns, participant, &values, &meta)?;
        if values.is_empty() {
            return Ok(None);
        }
        let keys = inner.session_keys(ns);
        let args = ops::presence::encode_set(&keys.presence_channel, participant, &values, &meta)?;
        let reply = inner
            .run(&ops::presence::SET, ns, inner.now(), args)
            .await?;
        let applied = ops::presence::decode_set(reply)?;
        if applied.is_empty() {
            return Ok(None);
        }
        let all: Vec<(String, Option<Json>)> = values.into_iter().collect();
        let values = applied
            .into_iter()
            .filter_map(|k| all.get((k as usize).wrapping_sub(1)).cloned())
            .collect();
        Ok(Some(PresencePatch {
            participant: participant.to_owned(),
            values,
            seen: meta.seen,
            at: meta.at,
        }))
    }

    async fn presence_read(&self, ns: &str) -> Result<Vec<PresenceEntry>> {
        self.inner.check_open()?;
        validate::name("namespace", ns)?;
        self.inner.presence_entries(ns).await
    }

    async fn presence_subscribe(&self, ns: &str) -> Result<PresenceStream> {
        feed::presence_stream(self.inner.clone(), ns).await
    }

    fn stream(&self, session: &str, after_index: u64) -> EventStream {
        feed::event_stream(self.inner.clone(), session, after_index)
    }

    fn pending_wakeups(&self) -> WakeupStream {
        feed::wakeup_stream(self.inner.clone())
    }

    async fn list_sessions(&self, options: ListSessionsOptions) -> Result<SessionList> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::limit("limit", options.limit)?;
        let prefix = options.prefix.as_deref().filter(|p| !p.is_empty());
        let from_prefix = prefix.map(|p| [b"[", p.as_bytes()].concat());
        let min = match (&options.cursor, prefix) {
            (Some(cursor), Some(p)) if cursor.as_str() < p => from_prefix.clone(),
            (Some(cursor), _) => Some([b"(", cursor.as_bytes()].concat()),
            (None, _) => from_prefix,
        }
        .unwrap_or_else(|| b"-".to_vec());
        // UTF-8 never holds the byte 0xFF, so every id starting with the
        // prefix sorts before `prefix + 0xFF`.
        let max = prefix
            .map(|p| [b"(", p.as_bytes(), b"\xff"].concat())
            .unwrap_or_else(|| b"+".to_vec());
        let limit = validate::effective_limit(options.limit);
        let want = limit + 1;
        let pages = per_partition(
            inner,
            &ops::sessions::LIST,
            |part| {
                let args = ops::sessions::encode_list(&part.base, &min, &max, want);
                (part.sessions.as_str(), args)
            },
            ops::sessions::decode_list,
        )
        .await?;
        let (sessions, cursor) = merge_pages(pages, limit, |s| s.session_id.as_str());
        Ok(SessionList { sessions, cursor })
    }

    async fn read_events(&self, session: &str, options: ReadEventsOptions) -> Result<EventsPage> {
        self.inner.check_open()?;
        validate::session_id(session)?;
        validate::limit("limit", options.limit)?;
        let (through_index, events) = self
            .inner
            .read_rows(
                session,
                options.after_index,
                options.through_index,
                validate::effective_limit(options.limit),
            )
            .await?;
        Ok(EventsPage {
            events,
            through_index,
        })
    }

    /// I3: the session's snapshots, by reducer name, from its snapshot hash.
    async fn list_snapshots(&self, session: &str) -> Result<Vec<SnapshotInfo>> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::session_id(session)?;
        let keys = inner.session_keys(session);
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(&keys.snapshots);
        let reply = inner.transport.call_replayable(cmd).await?;
        let mut items = match reply {
            redis::Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            other => crate::codec::array(other)?,
        }
        .into_iter();
        let mut snapshots = Vec::new();
        while let (Some(reducer), Some(stored)) = (items.next(), items.next()) {
            let (index, updated_at, _) = ops::snapshots::parse(&crate::codec::string(stored)?)?;
            snapshots.push(SnapshotInfo {
                reducer: crate::codec::string(reducer)?,
                index,
                updated_at,
            });
        }
        snapshots.sort_by(|a, b| a.reducer.cmp(&b.reducer));
        Ok(snapshots)
    }

    async fn clear(&self, session: &str) -> Result<()> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::session_id(session)?;
        inner
            .run(
                &ops::clear::SCRIPT,
                session,
                inner.now(),
                ops::clear::encode(),
            )
            .await?;
        Ok(())
    }

    async fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner
            .subscriber
            .close(Error::closed("the store is closed"));
    }
}
