//! `fork` (FK1, FK2, FK3, FK4, FK6): a copy built under hidden names in
//! the target's partition, published in one step.
//!
//! The source and the target usually live in different partitions, so in
//! different slots of a cluster, where no script may touch both. The fork
//! therefore runs in bounded steps, each one script (or pipeline) on one
//! side:
//!
//! 1. `fork_publish` checks the target (FK3: the same fork again answers at
//!    once, another session refuses).
//! 2. The copy, from dumps (`dump.rs`) when the transport carries bytes and
//!    the source is small enough for one step: one `fork_read` script takes
//!    the whole source at one instant as `DUMP` serializes its keys, with
//!    what the fork must drop or change; the target's partition `RESTORE`s
//!    them under hidden names.
//! 3. Otherwise page by page: the source's records from the fork's index
//!    down to its first retained event, a page per script (read in that
//!    order they agree with one another: an event is processed only after
//!    every earlier event of its lane, and stays processed, so a later page
//!    never shows an earlier lane event pending whose successor an earlier
//!    read showed processed), each page staged at once (FK2: leases
//!    released, ready sets and lanes rebuilt, counters summed); then the
//!    log entries, which never change, with plain `XRANGE`s in one pipeline,
//!    the source's standing checked once more, and staged.
//! 4. `fork_publish` fixes a restored copy up, renames the staged keys into
//!    place and writes the session's counters, origin, listing and expiry:
//!    the target appears whole, or not at all.
//!
//! Every read reports where the source stands; one that finds it cleared,
//! trimmed into the range or gone since the first read starts the fork
//! over (a few times, then `StoreUnavailable`). A client that dies midway
//! leaves only the hidden keys, which expire ten minutes after their last
//! write.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use a2_core::rules::fork::ForkCounters;
use a2_core::rules::{self, Record};
use a2_core::*;
use redis::Value;
use serde_json::{Map, Value as Json};

use super::RedisStore;

mod dump;
use crate::codec::{self, broken};
use crate::ops::fork::{Fixes, Mode, Part, Published, Stage, Standing, Totals};
use crate::ops::{self};

/// Records read (and staged) per script.
const RECORDS_STEP: u64 = 2_000;
/// Log entries read per `XRANGE`.
const ENTRIES_STEP: u64 = 1_000;
/// Log entries staged per script.
const STAGE_STEP: u64 = 2_000;
/// How often a fork starts over when its source changes under it.
const ATTEMPTS: usize = 3;
/// How long staged keys live after their last write (FK6), by the
/// server's clock.
const STAGED_TTL_MS: u64 = 600_000;

/// The prefix of a fork's staged keys, `P:{T}::fork:{token}:`, from the
/// target partition's `sessions` key (`P:{T}:sessions`); `fork_stage` in
/// `helpers.lua` builds the same.
fn stage_prefix(sessions: &str, token: &str) -> String {
    let partition = sessions.strip_suffix("sessions").unwrap_or(sessions);
    format!("{partition}:fork:{token}:")
}

/// A record without its lease, and its retry time.
struct Released {
    text: Vec<u8>,
    retry_at: Option<Millis>,
}

/// FK2: the record `text` without its lease, or `None` when it holds none.
fn released(text: &[u8]) -> std::result::Result<Option<Released>, String> {
    let mut map: Map<String, Json> = serde_json::from_slice(text).map_err(|e| e.to_string())?;
    if map.remove("h").is_none() & map.remove("x").is_none() {
        return Ok(None);
    }
    let retry_at = map
        .get("r")
        .and_then(Json::as_str)
        .and_then(|t| t.parse().ok());
    let text = serde_json::to_vec(&map).map_err(|e| e.to_string())?;
    Ok(Some(Released { text, retry_at }))
}

/// The index of a stored snapshot, `{index}|{updated_at}|{state}`.
fn snapshot_index(value: &[u8]) -> Result<u64> {
    value
        .split(|&b| b == b'|')
        .next()
        .and_then(|i| std::str::from_utf8(i).ok()?.parse::<u64>().ok())
        .ok_or_else(|| broken("snapshot"))
}

/// Why a copy stopped.
enum Stop {
    /// The source changed under the copy: start over.
    Moved,
    /// An answer for the caller.
    Fail(Error),
}

impl From<Error> for Stop {
    fn from(error: Error) -> Self {
        Stop::Fail(error)
    }
}

/// A fresh hidden name: random per process, counted within it.
fn token() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(n);
    hasher.write_u32(std::process::id());
    format!("{:016x}{n:x}", hasher.finish())
}

/// What `fork_publish` writes besides the staged keys.
#[derive(Debug)]
struct Publication {
    /// The fork's first index.
    first: u64,
    /// Its expiry (`''`: none).
    expiry: String,
    totals: Totals,
    fixes: Fixes,
}

impl Default for Publication {
    fn default() -> Self {
        Self {
            first: 1,
            expiry: String::new(),
            totals: Totals::default(),
            fixes: Fixes::default(),
        }
    }
}

/// What the copy learns of one lane's first pending or dead event.
#[derive(Clone, Copy)]
struct Head {
    index: u64,
    dead: bool,
    retry_at: Option<Millis>,
}

/// One attempt at a fork: the source and the index it branches at, the
/// target, the token naming the attempt's hidden keys (empty while it only
/// looks at the target), and the expiry text the target gets (EX2).
#[derive(Clone, Copy)]
pub(super) struct Attempt<'a> {
    origin: &'a ForkOrigin,
    target: &'a str,
    token: &'a str,
    expiry: &'a str,
}

impl RedisStore {
    pub(super) async fn fork_op(&self, source: &str, at: u64, target: &str) -> Result<ForkOutcome> {
        let inner = self.open()?;
        validate::session_id(source)?;
        validate::session_id(target)?;
        rules::fork::check_request(source, at, target)?;
        let now = inner.now();
        // EX2: a fork is a new session: the store's default expiry.
        let expiry = match inner.options.default_expiry {
            Some(e) => ops::append::expiry_text(validate::session_expiry(e, now)?),
            None => String::new(),
        };
        let origin = ForkOrigin {
            session: source.to_owned(),
            index: at,
        };
        for _ in 0..ATTEMPTS {
            let check = Attempt {
                origin: &origin,
                target,
                token: "",
                expiry: &expiry,
            };
            if let Some(answer) = self.answer_existing(&check).await? {
                return answer;
            }
            let token = token();
            let attempt = Attempt {
                token: &token,
                ..check
            };
            match self.copy(&attempt).await {
                Ok(outcome) => return Ok(outcome),
                Err(stop) => {
                    // Best effort: the hidden keys expire by themselves.
                    let nothing = Publication::default();
                    let _ = self.publish(Mode::Drop, &attempt, &nothing).await;
                    match stop {
                        Stop::Moved => continue,
                        Stop::Fail(error) => return Err(error),
                    }
                }
            }
        }
        Err(Error::unavailable(format!(
            "session {source:?} changed {ATTEMPTS} times while it was being forked; try again"
        )))
    }

    /// FK3: the answer when the target exists, else `None`.
    async fn answer_existing(&self, a: &Attempt<'_>) -> Result<Option<Result<ForkOutcome>>> {
        let published = self
            .publish(Mode::Check, a, &Publication::default())
            .await?;
        Ok(self.answer(a.origin, a.target, published))
    }

    fn answer(
        &self,
        origin: &ForkOrigin,
        target: &str,
        published: Published,
    ) -> Option<Result<ForkOutcome>> {
        let (source, at) = (origin.session.as_str(), origin.index);
        match published {
            Published::Already => Some(Ok(ForkOutcome::AlreadyForked)),
            Published::Exists(existing) => Some(rules::fork::existing_target(
                source,
                at,
                target,
                existing.as_ref(),
            )),
            _ => None,
        }
    }

    async fn publish(
        &self,
        mode: Mode,
        a: &Attempt<'_>,
        publication: &Publication,
    ) -> Result<Published> {
        let p = publication;
        let args = ops::fork::encode_publish(
            mode, a.token, a.origin, p.first, &p.expiry, p.totals, &p.fixes,
        );
        let reply = self
            .inner
            .run(&ops::fork::PUBLISH, a.target, self.inner.now(), args)
            .await?;
        ops::fork::decode_publish(reply)
    }

    /// One read of the source; `Moved` when it no longer stands as it did
    /// (`known`).
    async fn read_part(
        &self,
        origin: &ForkOrigin,
        part: Part,
        from: u64,
        to: u64,
        known: Option<&Standing>,
    ) -> std::result::Result<(Standing, Vec<Value>), Stop> {
        let (source, at) = (origin.session.as_str(), origin.index);
        let args = ops::fork::encode_read(at, part, from, to);
        let reply = self
            .inner
            .run(&ops::fork::READ, source, self.inner.now(), args)
            .await?;
        let Some((standing, items)) = ops::fork::decode_read(reply)? else {
            return Err(match known {
                Some(_) => Stop::Moved,
                None => Stop::Fail(rules::fork::no_source(source)),
            });
        };
        if let Some(known) = known {
            if standing.at_id != known.at_id
                || standing.first != known.first
                || standing.frontier < at
            {
                return Err(Stop::Moved);
            }
        } else {
            rules::fork::check_source(source, standing.frontier, standing.first, at)?;
            if standing.at_id.is_none() {
                return Err(Stop::Fail(rules::read::missing(source, at)));
            }
        }
        Ok((standing, items))
    }

    async fn stage(&self, a: &Attempt<'_>, stage: &Stage) -> Result<()> {
        if stage.is_empty() {
            return Ok(());
        }
        let args = ops::fork::encode_stage(a.token, stage);
        self.inner
            .run(&ops::fork::STAGE, a.target, self.inner.now(), args)
            .await?;
        Ok(())
    }

    /// Copies the source into hidden keys of the target's partition and
    /// publishes them: from the source's dumps when the transport can send
    /// them back and the source is not too large for one step, else page by
    /// page.
    async fn copy(&self, a: &Attempt<'_>) -> std::result::Result<ForkOutcome, Stop> {
        if self.inner.transport.binary_args()
            && let Some(outcome) = self.dump_copy(a).await?
        {
            return Ok(outcome);
        }
        self.paged_copy(a).await
    }

    async fn paged_copy(&self, a: &Attempt<'_>) -> std::result::Result<ForkOutcome, Stop> {
        let (source, at) = (a.origin.session.as_str(), a.origin.index);
        let now = self.inner.now();
        // The snapshots first: the read that fixes where the source stands.
        let (known, items) = self
            .read_part(a.origin, Part::Snapshots, 0, 0, None)
            .await?;
        let first = known.first;
        let mut stage = Stage::default();
        let mut items = items.into_iter();
        let first_event_at: Millis = match items.next() {
            Some(at) => codec::string(at)?.parse().unwrap_or(now),
            None => now,
        };
        while let (Some(reducer), Some(value)) = (items.next(), items.next()) {
            let value = bytes(value)?;
            // Only the snapshots the prefix folded.
            if snapshot_index(&value)? <= at {
                stage.snapshots.push((bytes(reducer)?, value));
            }
        }
        self.stage(a, &stage).await?;
        // The records, from the fork's index down (see the module docs).
        let mut counters = ForkCounters::default();
        let mut heads: HashMap<String, Head> = HashMap::new();
        let mut hi = at;
        while hi >= first {
            let lo = hi.saturating_sub(RECORDS_STEP - 1).max(first);
            let (_, records) = self
                .read_part(a.origin, Part::Records, lo, hi, Some(&known))
                .await?;
            let mut stage = Stage::default();
            for (index, record) in (lo..=hi).zip(records) {
                let record = codec::opt_bytes(record)?;
                fork_record(index, record, now, &mut stage, &mut counters, &mut heads)
                    .map_err(|what| corrupt(source, index, &what))?;
            }
            self.stage(a, &stage).await?;
            if lo == first {
                break;
            }
            hi = lo - 1;
        }
        // The lanes' heads are ready (unless dead-lettered, RV2).
        let mut stage = Stage::default();
        for head in heads.values().filter(|h| !h.dead) {
            match head.retry_at {
                Some(t) if t > now => stage.timed.push((t, head.index)),
                _ => stage.ready.push(head.index),
            }
        }
        self.stage(a, &stage).await?;
        // The log entries, forward. They never change, so they are read with
        // plain `XRANGE`s in one pipeline (through Lua they would cost more
        // than the rest of the fork), and where the source stands is checked
        // once more after them.
        let log = self.inner.session_keys(source).log.clone();
        let mut reads = Vec::new();
        let mut lo = first;
        while lo <= at {
            let hi = lo.saturating_add(ENTRIES_STEP - 1).min(at);
            let mut cmd = redis::cmd("XRANGE");
            cmd.arg(&log).arg(format!("{lo}-0")).arg(format!("{hi}-0"));
            reads.push(cmd);
            lo = hi + 1;
        }
        let pages = self.inner.transport.pipeline_replayable(reads).await?;
        self.read_part(a.origin, Part::Records, 1, 0, Some(&known))
            .await?;
        let mut expected = first;
        let mut stage = Stage::default();
        for page in pages {
            for entry in codec::array(page)? {
                let mut parts = codec::array(entry)?.into_iter();
                let (Some(id), Some(fields)) = (parts.next(), parts.next()) else {
                    return Err(broken("stream entry").into());
                };
                if expected > at || codec::entry_index(&codec::string(id)?)? != expected {
                    return Err(rules::read::missing(source, expected).into());
                }
                let fields: Vec<Vec<u8>> = codec::array(fields)?
                    .into_iter()
                    .map(bytes)
                    .collect::<Result<_>>()?;
                stage.entries.push((expected, fields));
                expected += 1;
                if stage.entries.len() as u64 == STAGE_STEP {
                    self.stage(a, &std::mem::take(&mut stage)).await?;
                }
            }
        }
        if expected != at + 1 {
            return Err(rules::read::missing(source, expected).into());
        }
        self.stage(a, &stage).await?;
        let publication = Publication {
            first,
            expiry: a.expiry.to_owned(),
            totals: Totals {
                counters,
                first_event_at,
                // Every pending event of the copy is in ready or timed.
                cursor: at,
            },
            fixes: Fixes::default(),
        };
        self.finish(a, &publication).await
    }

    /// Publishes a staged copy and answers the fork.
    async fn finish(
        &self,
        a: &Attempt<'_>,
        publication: &Publication,
    ) -> std::result::Result<ForkOutcome, Stop> {
        let first = publication.first;
        match self.publish(Mode::Publish, a, publication).await? {
            Published::Forked => Ok(ForkOutcome::Forked { first_index: first }),
            // The staged keys expired under a very slow copy.
            Published::Lost => Err(Stop::Moved),
            other => match self.answer(a.origin, a.target, other) {
                Some(answer) => Ok(answer?),
                None => Err(broken("fork_publish: an unexpected answer").into()),
            },
        }
    }
}

fn bytes(value: Value) -> Result<Vec<u8>> {
    codec::opt_bytes(value)?.ok_or_else(|| broken("a missing text"))
}

fn corrupt(session: &str, index: u64, what: &str) -> Error {
    Error::corrupted(
        format!("record of event {index} of session {session:?}: {what}"),
        Some(session),
        Some(index),
    )
}

/// FK2 for one record (`None`: a fresh lane-less event): stages it without
/// its lease, counts it, and puts its event where the fork's claims find
/// it: ready (or timed) when pending and lane-less, in its lane's set when
/// pending or dead-lettered with a lane (the lane's head is made ready
/// once every record was read).
fn fork_record(
    index: u64,
    record: Option<Vec<u8>>,
    now: Millis,
    stage: &mut Stage,
    counters: &mut ForkCounters,
    heads: &mut HashMap<String, Head>,
) -> std::result::Result<(), String> {
    let view = View::parse(record.as_deref())?;
    counters.add(&view.record());
    let Some(text) = record else {
        stage.ready.push(index);
        return Ok(());
    };
    let (dead, pending) = (view.has("d"), view.unsettled() && !view.has("d"));
    let retry_at = view.time("r");
    match view.lane.clone() {
        Some(lane) if pending || dead => {
            stage.lanes.push(format!("{lane}:{index:020}"));
            // The lowest index of the lane read so far is its head.
            let head = Head {
                index,
                dead,
                retry_at,
            };
            heads
                .entry(lane)
                .and_modify(|h| {
                    if index < h.index {
                        *h = head;
                    }
                })
                .or_insert(head);
        }
        Some(_) => {}
        None if pending => match retry_at {
            Some(t) if t > now => stage.timed.push((t, index)),
            _ => stage.ready.push(index),
        },
        None => {}
    }
    let text = match released(&text)? {
        Some(released) => released.text,
        None => text,
    };
    stage.records.push((index, text));
    Ok(())
}

/// What a copy needs of a record (`None`: a fresh lane-less event).
pub(super) struct View {
    record: Option<Json>,
    /// The encoded lane.
    pub(super) lane: Option<String>,
}

impl View {
    pub(super) fn parse(text: Option<&[u8]>) -> std::result::Result<Self, String> {
        let record = text
            .map(serde_json::from_slice::<Json>)
            .transpose()
            .map_err(|e| e.to_string())?;
        let lane = record
            .as_ref()
            .and_then(|r| r.get("l"))
            .and_then(Json::as_str)
            .map(str::to_owned);
        Ok(Self { record, lane })
    }

    fn has(&self, key: &str) -> bool {
        self.record.as_ref().is_some_and(|r| r.get(key).is_some())
    }

    fn time(&self, key: &str) -> Option<Millis> {
        self.record
            .as_ref()
            .and_then(|r| r.get(key))
            .and_then(Json::as_str)
            .and_then(|t| t.parse().ok())
    }

    fn count(&self, key: &str) -> u32 {
        self.record
            .as_ref()
            .and_then(|r| r.get(key))
            .and_then(Json::as_u64)
            .unwrap_or(0) as u32
    }

    /// Pending or dead-lettered: a lane event in its lane's set.
    pub(super) fn unsettled(&self) -> bool {
        !self.has("p")
    }

    pub(super) fn record(&self) -> Record<'static> {
        Record {
            attempt_count: self.count("a"),
            failure_count: self.count("n"),
            processed_at: self.has("p").then_some(0),
            failed_at: self.has("d").then_some(0),
            ..Record::default()
        }
    }
}
