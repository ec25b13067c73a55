//! [`RedisStore`]: the [`Store`] contract on Redis.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use a2_core::validate;
use a2_core::*;
use async_trait::async_trait;
use redis::{Script, Value};
use serde_json::Value as Json;

use crate::codec::{self, broken};
use crate::feed;
use crate::keys::{Keys, SessionKeys, encode};
use crate::scripts;
use crate::subscriber::{RespSubscriber, Subscriber, SubscriberConfig};
use crate::transport::{RespTransport, Transport};

/// How many rows one read command returns at most (R1).
pub(crate) const PAGE: usize = 256;

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
            .field("prefix", &self.inner.keys.prefix())
            .finish_non_exhaustive()
    }
}

/// What the store and its feeds share.
pub(crate) struct Inner {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) subscriber: Arc<dyn Subscriber>,
    pub(crate) keys: Keys,
    pub(crate) options: StoreOptions,
    pub(crate) safety_reread: Duration,
    /// How long a presence subscription may wait for its sync: the
    /// subscriber connection may have to `SUBSCRIBE`, fail, reconnect,
    /// subscribe again and `PING`.
    pub(crate) subscribe_timeout: Duration,
    wake_carry_cap: usize,
    closed: AtomicBool,
}

impl RedisStore {
    /// The key prefix this store works under (RD3).
    pub fn prefix(&self) -> &str {
        self.inner.keys.prefix()
    }

    /// Connects to the server at `url` (`redis://host:port/db`).
    ///
    /// Fails with `InvalidArgument` for a bad URL or prefix and with
    /// `StoreUnavailable` when the server cannot be reached within the
    /// connect timeout. Needs a Tokio runtime.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self> {
        if options.prefix.is_empty() || options.prefix.contains(['{', '}']) {
            return Err(Error::invalid(
                "the key prefix must be non-empty and hold no `{` or `}`",
            ));
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
        Ok(Self::from_parts(
            Arc::new(transport),
            Arc::new(subscriber),
            options,
        ))
    }

    /// A store over any command transport and subscriber: the scripts, key
    /// layout, reply decoding and feed logic do not depend on how commands
    /// travel (a REST transport plugs in here).
    pub(crate) fn from_parts(
        transport: Arc<dyn Transport>,
        subscriber: Arc<dyn Subscriber>,
        options: RedisOptions,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                transport,
                subscriber,
                keys: Keys::new(options.prefix),
                options: options.store,
                safety_reread: options.safety_reread,
                subscribe_timeout: options.connect_timeout + options.command_timeout * 3,
                wake_carry_cap: options.wake_carry_cap,
                closed: AtomicBool::new(false),
            }),
        }
    }
}

/// Script arguments.
#[derive(Default)]
struct Args(Vec<Vec<u8>>);

impl Args {
    fn s(&mut self, value: impl AsRef<[u8]>) -> &mut Self {
        self.0.push(value.as_ref().to_vec());
        self
    }

    fn n(&mut self, value: impl std::fmt::Display) -> &mut Self {
        self.0.push(value.to_string().into_bytes());
        self
    }

    /// The 7 arguments of one new event (`append_events` in helpers.lua).
    fn event(&mut self, id: &str, event: &NewEvent, payload: &str, cause: Option<Cause>) {
        let lane = event.lane.as_deref().unwrap_or("");
        self.s(id)
            .s(&event.event_type)
            .s(payload)
            .s(lane)
            .s(if lane.is_empty() {
                String::new()
            } else {
                encode(lane)
            })
            .s(if event.settled { "1" } else { "0" })
            .s(cause
                .map(|c| format!("{}:{}", c.index, c.attempt))
                .unwrap_or_default());
    }
}

/// A batch ready to write: ids assigned, payloads serialized.
struct Batch {
    ids: Vec<String>,
    events: Vec<NewEvent>,
    payloads: Vec<String>,
}

impl Inner {
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::unavailable("the store is closed"));
        }
        Ok(())
    }

    fn now(&self) -> Millis {
        self.options.clock.now_ms()
    }

    /// Runs a session script with the session's keys and the leading
    /// arguments every session script takes (helpers.lua).
    async fn run(&self, script: &Script, session: &str, now: Millis, extra: Args) -> Result<Value> {
        self.check_open()?;
        let keys = self.keys.session(session);
        let mut args = Args::default();
        args.s(session).n(now).s(&keys.events_channel);
        args.0.extend(extra.0);
        self.transport.script(script, &keys.all, &args.0).await
    }

    /// Gives every event its final id (A11); a generated id equal to
    /// another id of the batch is a duplicate like any other (A3).
    fn batch(&self, events: Vec<NewEvent>) -> Result<Batch> {
        let ids: Vec<String> = events
            .iter()
            .map(|e| e.id.clone().unwrap_or_else(|| self.options.ids.next_id()))
            .collect();
        let mut seen = std::collections::HashSet::with_capacity(ids.len());
        if let Some(id) = ids.iter().find(|id| !seen.insert(id.as_str())) {
            return Err(Error::duplicate(format!(
                "id {id:?} appears twice in the batch"
            )));
        }
        let payloads = events.iter().map(|e| e.payload.to_string()).collect();
        Ok(Batch {
            ids,
            events,
            payloads,
        })
    }

    /// The events as a wake-up carries them, `[[id, type, payload], ...]`,
    /// or `""` when that is over the carry cap (ST2).
    fn wake_events(&self, batch: &Batch) -> String {
        let mut out = String::from("[");
        for (k, (id, event)) in batch.ids.iter().zip(&batch.events).enumerate() {
            if k > 0 {
                out.push(',');
            }
            out.push('[');
            out.push_str(&Json::from(id.as_str()).to_string());
            out.push(',');
            out.push_str(&Json::from(event.event_type.as_str()).to_string());
            out.push(',');
            out.push_str(&batch.payloads[k]);
            out.push(']');
            if out.len() > self.wake_carry_cap {
                return String::new();
            }
        }
        out.push(']');
        out
    }

    /// Rows of events the script just appended from `first` on.
    fn new_rows(
        &self,
        session: &str,
        first: u64,
        now: Millis,
        batch: Batch,
        cause: Option<Cause>,
    ) -> Vec<StoredEvent> {
        batch
            .ids
            .into_iter()
            .zip(batch.events)
            .enumerate()
            .map(|(k, (id, e))| StoredEvent::appended(id, e, session, first + k as u64, now, cause))
            .collect()
    }

    /// One ascending page of rows: `(frontier, rows)`.
    async fn read_page(
        &self,
        session: &str,
        after: u64,
        through: Option<u64>,
        count: usize,
    ) -> Result<(u64, Vec<StoredEvent>)> {
        let mut args = Args::default();
        args.s("asc")
            .n(after)
            .s(through.map(|t| t.to_string()).unwrap_or_default())
            .n(count);
        let reply = self.run(&scripts::READ, session, self.now(), args).await?;
        let mut items = codec::array(reply)?.into_iter();
        let frontier = codec::uint(items.next().ok_or_else(|| broken("read"))?)?;
        Ok((frontier, codec::rows(session, items)?))
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
        let mut cursor = after;
        let mut through = through;
        let mut frontier = None;
        loop {
            let want = (limit - rows.len()).min(PAGE);
            let (last, page) = self.read_page(session, cursor, through, want).await?;
            let bound = *frontier.get_or_insert(through.map_or(last, |t| t.min(last)));
            through = Some(bound);
            let got = page.len();
            if let Some(row) = page.last() {
                cursor = row.event.index;
            }
            rows.extend(page);
            if got < want || rows.len() >= limit || cursor >= bound {
                return Ok((bound, rows));
            }
        }
    }

    /// Up to `count` events after `after`: the light catch-up read of live
    /// feeds, one `XRANGE` (ST2).
    pub(crate) async fn read_events_after(
        &self,
        session: &str,
        after: u64,
        count: usize,
    ) -> Result<Vec<Event>> {
        self.check_open()?;
        let keys = self.keys.session(session);
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(&keys.all[0])
            .arg(format!("{}-0", after.saturating_add(1)))
            .arg("+")
            .arg("COUNT")
            .arg(count);
        let reply = self.transport.call(cmd).await?;
        codec::array(reply)?
            .into_iter()
            .map(|entry| codec::entry_reply(session, entry).map(|e| e.event))
            .collect()
    }

    pub(crate) fn session_keys(&self, session: &str) -> SessionKeys {
        self.keys.session(session)
    }

    /// The live presence entries of `ns` (P3).
    pub(crate) async fn presence_entries(&self, ns: &str) -> Result<Vec<PresenceEntry>> {
        let reply = self
            .run(&scripts::PRESENCE_READ, ns, self.now(), Args::default())
            .await?;
        let mut entries = codec::array(reply)?
            .into_iter()
            .map(|v| decode_presence(&codec::string(v)?))
            .collect::<Result<Vec<_>>>()?;
        entries.sort_by(|a, b| (&a.participant, &a.field).cmp(&(&b.participant, &b.field)));
        Ok(entries)
    }
}

/// The JSON a presence entry is stored as, after `{at}|{expires_at}|`.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredPresence {
    participant: String,
    field: String,
    value: Json,
    seen: i64,
}

fn decode_presence(stored: &str) -> Result<PresenceEntry> {
    let mut parts = stored.splitn(3, '|');
    let (Some(at), Some(expires), Some(json)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(broken("presence entry"));
    };
    let entry: StoredPresence =
        serde_json::from_str(json).map_err(|e| broken(format!("presence entry: {e}")))?;
    Ok(PresenceEntry {
        participant: entry.participant,
        field: entry.field,
        value: entry.value,
        seen: entry.seen,
        at: at.parse().map_err(|_| broken("presence at"))?,
        expires_at: expires.parse().map_err(|_| broken("presence expiry"))?,
    })
}

fn parse_snapshot(stored: &str) -> Result<(u64, Millis, Json)> {
    let mut parts = stored.splitn(3, '|');
    let (Some(index), Some(at), Some(json)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(broken("snapshot"));
    };
    Ok((
        index.parse().map_err(|_| broken("snapshot index"))?,
        at.parse().map_err(|_| broken("snapshot time"))?,
        serde_json::from_str(json).map_err(|e| broken(format!("snapshot state: {e}")))?,
    ))
}

fn next_value(items: &mut std::vec::IntoIter<Value>) -> Result<Value> {
    items.next().ok_or_else(|| broken("reply too short"))
}

/// Sorted, distinct claims.
fn sorted_claims(claims: &[Claim]) -> Vec<Claim> {
    let mut claims = claims.to_vec();
    claims.sort();
    claims.dedup();
    claims
}

fn indexes(value: Value) -> Result<Vec<u64>> {
    codec::array(value)?.into_iter().map(codec::uint).collect()
}

#[async_trait]
impl Store for RedisStore {
    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.options.clock.clone()
    }

    async fn append(&self, session: &str, events: Vec<NewEvent>) -> Result<AppendOutcome> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::session_id(session)?;
        validate::batch(&events, &inner.options.limits, true)?;
        let batch = inner.batch(events)?;
        let now = inner.now();
        let mut args = Args::default();
        args.n(batch.ids.len()).s(inner.wake_events(&batch));
        for k in 0..batch.ids.len() {
            let event = &batch.events[k];
            args.event(&batch.ids[k], event, &batch.payloads[k], event.cause);
        }
        let reply = inner.run(&scripts::APPEND, session, now, args).await?;
        let (tag, mut items) = codec::tagged(reply)?;
        match tag.as_str() {
            "empty" => Ok(AppendOutcome {
                events: Vec::new(),
                has_pending: codec::int(next_value(&mut items)?)? != 0,
            }),
            "ok" => {
                let first = codec::uint(next_value(&mut items)?)?;
                let has_pending = codec::int(next_value(&mut items)?)? != 0;
                Ok(AppendOutcome {
                    events: inner.new_rows(session, first, now, batch, None),
                    has_pending,
                })
            }
            "retry" => {
                let has_pending = codec::int(next_value(&mut items)?)? != 0;
                let rows = codec::rows(session, items)?;
                let wanted: BTreeMap<&str, &NewEvent> = batch
                    .ids
                    .iter()
                    .map(String::as_str)
                    .zip(&batch.events)
                    .collect();
                for row in &rows {
                    let same = wanted.get(row.event.id.as_str()).is_some_and(|e| {
                        e.event_type == row.event.event_type && e.payload == row.event.payload
                    });
                    if !same {
                        return Err(Error::duplicate(format!(
                            "event {:?} exists with another type or payload",
                            row.event.id
                        )));
                    }
                }
                Ok(AppendOutcome {
                    events: rows,
                    has_pending,
                })
            }
            "partial" => Err(Error::duplicate(format!(
                "id {:?} already exists but other ids of the batch do not",
                codec::string(next_value(&mut items)?)?
            ))),
            "no_cause" => Err(Error::invalid(format!(
                "cause index {} does not exist in session {session:?}",
                codec::int(next_value(&mut items)?)?
            ))),
            "superseded" => Err(Error::superseded(format!(
                "the cause attempt of event {} is not its latest, or it is dead-lettered",
                codec::int(next_value(&mut items)?)?
            ))),
            other => Err(broken(format!("append: {other}"))),
        }
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
        let mut before = options.before_index;
        let mut newest_first = Vec::new();
        while newest_first.len() < options.limit {
            let want = (options.limit - newest_first.len()).min(PAGE);
            let mut args = Args::default();
            args.s("desc")
                .s(before.map(|b| b.to_string()).unwrap_or_default())
                .s("")
                .n(want);
            let reply = inner
                .run(&scripts::READ, session, inner.now(), args)
                .await?;
            let mut items = codec::array(reply)?.into_iter();
            let _frontier = next_value(&mut items)?;
            let page = codec::rows(session, items)?;
            let got = page.len();
            if let Some(oldest) = page.last() {
                before = Some(oldest.event.index);
            }
            newest_first.extend(page);
            if got < want || before == Some(1) {
                break;
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
        let mut args = Args::default();
        args.s(&request.holder)
            .n(expires)
            .n(request.limit)
            .n(request.exclude_indexes.len());
        for index in &request.exclude_indexes {
            args.n(index);
        }
        let reply = inner
            .run(&scripts::CLAIM, &request.session, now, args)
            .await?;
        let (tag, mut items) = codec::tagged(reply)?;
        match tag.as_str() {
            "settled" => Ok(ClaimOutcome::Settled),
            "busy" => Ok(ClaimOutcome::Busy {
                retry_at: codec::int(next_value(&mut items)?)?,
            }),
            "claimed" => Ok(ClaimOutcome::Claimed(codec::rows(&request.session, items)?)),
            other => Err(broken(format!("claim: {other}"))),
        }
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
        let mut args = Args::default();
        args.s(&request.holder)
            .n(request.lease.expires_at(now))
            .n(claims.len());
        for claim in &claims {
            args.n(claim.index).n(claim.attempt);
        }
        let reply = inner
            .run(&scripts::RENEW, &request.session, now, args)
            .await?;
        let mut items = codec::array(reply)?.into_iter();
        // Claims ascend, so each list does; an index named with two
        // attempts appears once.
        let mut renewed = indexes(next_value(&mut items)?)?;
        let mut superseded = indexes(next_value(&mut items)?)?;
        renewed.dedup();
        superseded.dedup();
        Ok(RenewOutcome {
            renewed,
            superseded,
        })
    }

    async fn complete_attempt(&self, request: CompleteRequest) -> Result<CompleteOutcome> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::session_id(&request.session)?;
        validate::batch(&request.events, &inner.options.limits, false)?;
        let batch = inner.batch(request.events)?;
        let cause = Cause {
            index: request.index,
            attempt: request.attempt,
        };
        let returned = serde_json::to_string(&batch.ids)
            .map_err(|e| Error::invalid(format!("returned ids: {e}")))?;
        let now = inner.now();
        let mut args = Args::default();
        args.n(request.index)
            .n(request.attempt)
            .s(&returned)
            .n(batch.ids.len())
            .s(inner.wake_events(&batch));
        for k in 0..batch.ids.len() {
            args.event(
                &batch.ids[k],
                &batch.events[k],
                &batch.payloads[k],
                Some(cause),
            );
        }
        let reply = inner
            .run(&scripts::COMPLETE, &request.session, now, args)
            .await?;
        let (tag, mut items) = codec::tagged(reply)?;
        match tag.as_str() {
            "invalid" => Err(Error::invalid(format!(
                "index {} does not exist in session {:?}",
                request.index, request.session
            ))),
            "superseded" => Ok(CompleteOutcome::Superseded),
            "mismatch" => Err(Error::duplicate(format!(
                "event {} was completed by attempt {} with other returned ids",
                request.index, request.attempt
            ))),
            "exists" => Err(Error::duplicate(format!(
                "returned id {:?} already exists",
                codec::string(next_value(&mut items)?)?
            ))),
            "done" => Ok(CompleteOutcome::Completed {
                events: codec::rows(&request.session, items)?,
            }),
            "ok" => {
                let first = codec::uint(next_value(&mut items)?)?;
                Ok(CompleteOutcome::Completed {
                    events: inner.new_rows(&request.session, first, now, batch, Some(cause)),
                })
            }
            other => Err(broken(format!("complete: {other}"))),
        }
    }

    async fn fail_attempt(&self, request: FailRequest) -> Result<FailOutcome> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::fail_request(&request)?;
        let mut args = Args::default();
        args.n(request.index)
            .n(request.attempt)
            .s(&request.error)
            .n(request.max_failures)
            .s(request.retry_at.map(|t| t.to_string()).unwrap_or_default());
        let reply = inner
            .run(&scripts::FAIL, &request.session, inner.now(), args)
            .await?;
        let (tag, mut items) = codec::tagged(reply)?;
        let outcome = match tag.as_str() {
            "invalid" => {
                return Err(Error::invalid(format!(
                    "index {} does not exist in session {:?}",
                    request.index, request.session
                )));
            }
            "failed" => FailKind::Failed,
            "dead" => FailKind::DeadLettered,
            "superseded" => FailKind::Superseded,
            other => return Err(broken(format!("fail: {other}"))),
        };
        let failure_count = u32::try_from(codec::uint(next_value(&mut items)?)?)
            .map_err(|_| broken("failure count"))?;
        Ok(FailOutcome {
            outcome,
            failure_count,
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
        let mut args = Args::default();
        args.s(&request.holder).n(claims.len());
        for claim in &claims {
            args.n(claim.index).n(claim.attempt);
        }
        let reply = inner
            .run(&scripts::RELEASE, &request.session, inner.now(), args)
            .await?;
        let mut released = indexes(reply)?;
        released.dedup();
        Ok(released)
    }

    async fn pending_sessions(&self, page: PageRequest) -> Result<SessionPage> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::limit("limit", page.limit)?;
        let mut cmd = redis::cmd("ZRANGEBYLEX");
        cmd.arg(inner.keys.pending_sessions())
            .arg(match &page.cursor {
                Some(cursor) => format!("({cursor}").into_bytes(),
                None => b"-".to_vec(),
            })
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(page.limit.saturating_add(1));
        let reply = inner.transport.call(cmd).await?;
        let mut sessions = codec::array(reply)?
            .into_iter()
            .map(codec::string)
            .collect::<Result<Vec<_>>>()?;
        let cursor = if sessions.len() > page.limit {
            sessions.truncate(page.limit);
            sessions.last().cloned()
        } else {
            None
        };
        Ok(SessionPage { sessions, cursor })
    }

    async fn read_state(&self, session: &str, reducer: &str) -> Result<StateRead> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::session_id(session)?;
        validate::name("reducer", reducer)?;
        let mut args = Args::default();
        args.s(reducer).n(PAGE);
        let reply = inner
            .run(&scripts::READ_STATE, session, inner.now(), args)
            .await?;
        let mut items = codec::array(reply)?.into_iter();
        let frontier = codec::uint(next_value(&mut items)?)?;
        let snapshot = match codec::opt_string(next_value(&mut items)?)? {
            Some(stored) => {
                let (index, _, state) = parse_snapshot(&stored)?;
                Some(Snapshot { index, state })
            }
            None => None,
        };
        let mut events = items
            .map(|entry| codec::entry_reply(session, entry).map(|e| e.event))
            .collect::<Result<Vec<_>>>()?;
        // Events are immutable: later pages up to the frontier read in the
        // script complete the same atomic view (S1).
        let mut last = events
            .last()
            .map_or(snapshot.as_ref().map_or(0, |s| s.index), |e| e.index);
        while last < frontier {
            let page = inner
                .read_events_after(session, last, PAGE.min((frontier - last) as usize))
                .await?;
            let Some(newest) = page.last() else {
                return Err(broken("the log ends before its frontier"));
            };
            last = newest.index;
            events.extend(page.into_iter().filter(|e| e.index <= frontier));
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
        let mut args = Args::default();
        args.n(snapshots.len());
        for snapshot in &snapshots {
            args.s(&snapshot.reducer)
                .n(snapshot.index)
                .s(snapshot.state.to_string());
        }
        let reply = inner
            .run(&scripts::PUT_SNAPSHOTS, session, inner.now(), args)
            .await?;
        let (tag, mut items) = codec::tagged(reply)?;
        match tag.as_str() {
            "ok" => Ok(()),
            "invalid" => Err(Error::invalid(format!(
                "snapshot index {} is beyond the frontier of session {session:?}",
                codec::int(next_value(&mut items)?)?
            ))),
            other => Err(broken(format!("put_snapshots: {other}"))),
        }
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
        let patch_head = format!(
            "{{\"participant\":{},\"seen\":{},\"at\":{},\"values\":{{",
            Json::from(participant),
            meta.seen,
            meta.at
        );
        let mut args = Args::default();
        args.s(&keys.presence_channel)
            .n(meta.ttl_ms)
            .n(meta.at)
            .s(&patch_head)
            .n(values.len());
        for (field, value) in &values {
            let stored = match value {
                Some(value) => serde_json::to_string(&StoredPresence {
                    participant: participant.to_owned(),
                    field: field.clone(),
                    value: value.clone(),
                    seen: meta.seen,
                })
                .map_err(|e| Error::invalid(format!("presence value: {e}")))?,
                None => String::new(),
            };
            let fragment = format!(
                "{}:{}",
                Json::from(field.as_str()),
                value.as_ref().map_or("null".to_owned(), Json::to_string)
            );
            args.s(format!("{}:{}", encode(participant), encode(field)))
                .s(stored)
                .s(fragment);
        }
        let reply = inner
            .run(&scripts::PRESENCE_SET, ns, inner.now(), args)
            .await?;
        let applied = indexes(reply)?;
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
        let mut cmd_args = Args::default();
        cmd_args
            .s(inner.keys.prefix())
            .s(min)
            .s(max)
            .n(options.limit);
        let reply = inner
            .transport
            .script(
                &scripts::LIST_SESSIONS,
                &[inner.keys.sessions()],
                &cmd_args.0,
            )
            .await?;
        let mut sessions = Vec::new();
        for item in codec::array(reply)? {
            let mut parts = codec::array(item)?.into_iter();
            let session_id = codec::string(next_value(&mut parts)?)?;
            let mut counts = codec::array(next_value(&mut parts)?)?.into_iter();
            let mut next = || -> Result<i64> {
                Ok(codec::opt_int(counts.next().unwrap_or(Value::Nil))?.unwrap_or(0))
            };
            let to_u64 = |n: i64| u64::try_from(n).map_err(|_| broken("negative counter"));
            sessions.push(SessionSummary {
                session_id,
                event_count: to_u64(next()?)?,
                pending_count: to_u64(next()?)?,
                failed_count: to_u64(next()?)?,
                attempt_count: to_u64(next()?)?,
                failure_count: to_u64(next()?)?,
                first_event_at: next()?,
                updated_at: next()?,
            });
        }
        let cursor = if sessions.len() > options.limit {
            sessions.truncate(options.limit);
            sessions.last().map(|s| s.session_id.clone())
        } else {
            None
        };
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
                options.limit,
            )
            .await?;
        Ok(EventsPage {
            events,
            through_index,
        })
    }

    async fn list_snapshots(&self, session: &str) -> Result<Vec<SnapshotInfo>> {
        let inner = &self.inner;
        inner.check_open()?;
        validate::session_id(session)?;
        let keys = inner.session_keys(session);
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(&keys.all[9]);
        let reply = inner.transport.call(cmd).await?;
        let mut items = match reply {
            Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            other => codec::array(other)?,
        }
        .into_iter();
        let mut snapshots = Vec::new();
        while let (Some(reducer), Some(stored)) = (items.next(), items.next()) {
            let (index, updated_at, _) = parse_snapshot(&codec::string(stored)?)?;
            snapshots.push(SnapshotInfo {
                reducer: codec::string(reducer)?,
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
            .run(&scripts::CLEAR, session, inner.now(), Args::default())
            .await?;
        Ok(())
    }

    async fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner
            .subscriber
            .close(Error::unavailable("the store is closed"));
    }
}

impl Inner {
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}
