//! A fork copied from the source's dumps (FK6): one script on the source
//! reads the whole session atomically — each key as the server serializes
//! it (`DUMP`), with what the copy must drop or change — and the target's
//! partition restores the keys under hidden names; `fork_publish` then
//! fixes them up and renames them into place. The bulk of the session
//! never passes through this process's decoding, and the copy is one
//! instant's state of the source, so lanes agree with themselves.

use a2_core::rules::fork::ForkCounters;
use a2_core::*;
use redis::Value;

use super::*;

/// The most events of a session copied from dumps: a larger one is
/// copied page by page, so that no step handles an unbounded session.
const DUMP_LIMIT: u64 = 100_000;
/// The most events after the fork's index a dumped copy drops again.
const TAIL_LIMIT: u64 = 10_000;
/// The session's keys as `fork_read` dumps them and `fork_publish`
/// renames them.
const NAMES: [&str; 6] = ["log", "meta", "ready", "timed", "lanes", "snapshots"];

impl RedisStore {
    /// Forks from dumps; `None` when the source is too large for it.
    pub(super) async fn dump_copy(
        &self,
        a: &Attempt<'_>,
    ) -> std::result::Result<Option<ForkOutcome>, Stop> {
        let (source, at) = (a.origin.session.as_str(), a.origin.index);
        let now = self.inner.now();
        let (known, items) = self
            .read_part(a.origin, Part::Dump, DUMP_LIMIT, TAIL_LIMIT, None)
            .await?;
        let mut items = items.into_iter();
        let mut next = || {
            items
                .next()
                .ok_or_else(|| broken("fork_read: a short dump"))
        };
        if codec::string(next()?)? == "far" {
            return Ok(None);
        }
        let mut dumps = Vec::with_capacity(NAMES.len());
        for _ in NAMES {
            dumps.push(codec::opt_bytes(next()?)?);
        }
        let numbers: Vec<i64> = codec::array(next()?)?
            .into_iter()
            .map(|v| codec::string(v)?.parse().map_err(|_| broken("a counter")))
            .collect::<Result<_>>()?;
        let [pending, failed, attempts, failures, first_event_at, cursor] = numbers[..] else {
            return Err(broken("fork_read: the counters").into());
        };
        let tail_ids: Vec<String> = strings(next()?)?;
        let tail_records = codec::array(next()?)?;
        let in_timed = codec::uint(next()?)? as usize;
        let held: Vec<String> = strings(next()?)?;
        let held_records = codec::array(next()?)?;
        let snapshots = codec::array(next()?)?;

        let mut fixes = Fixes {
            tail: known.frontier - at,
            ..Fixes::default()
        };
        if tail_ids.len() as u64 != fixes.tail {
            return Err(rules::read::missing(source, at + 1 + tail_ids.len() as u64).into());
        }
        // FK2: the prefix's counters are the source's less its tail's.
        let mut tail = ForkCounters::default();
        for (k, (id, record)) in tail_ids.iter().zip(tail_records).enumerate() {
            let index = at + 1 + k as u64;
            let record = codec::opt_bytes(record)?;
            let view = View::parse(record.as_deref()).map_err(|w| corrupt(source, index, &w))?;
            tail.add(&view.record());
            if record.is_some() {
                fixes.hdel.push(index.to_string().into_bytes());
            }
            fixes.hdel.push(format!("#{id}").into_bytes());
            if let Some(lane) = view.lane.as_deref().filter(|_| view.unsettled()) {
                fixes.lanes.push(format!("{lane}:{index:020}"));
            }
        }
        let less = |all: i64, part: u64| (all.max(0) as u64).saturating_sub(part);
        let counters = ForkCounters {
            pending_count: less(pending, tail.pending_count),
            failed_count: less(failed, tail.failed_count),
            attempt_count: less(attempts, tail.attempt_count),
            failure_count: less(failures, tail.failure_count),
        };
        // FK2: leases are released. A leased event is in timed (or in ready,
        // expired); in the fork it is ready at once, or at its retry time.
        for (k, (member, record)) in held.iter().zip(held_records).enumerate() {
            let timed = k < in_timed;
            let index: u64 = member.parse().map_err(|_| broken("a ready member"))?;
            if index > at {
                if timed {
                    fixes.unlease.push(index);
                }
                continue;
            }
            let Some(text) = codec::opt_bytes(record)? else {
                continue;
            };
            let Some(released) = released(&text).map_err(|w| corrupt(source, index, &w))? else {
                continue;
            };
            fixes.records.push((index, released.text));
            if timed {
                fixes.unlease.push(index);
                match released.retry_at {
                    Some(t) if t > now => fixes.timed.push((t, index)),
                    _ => fixes.ready.push(index),
                }
            }
        }
        // Snapshots of events past the index stay with the source.
        let mut pairs = snapshots.into_iter();
        while let (Some(reducer), Some(value)) = (pairs.next(), pairs.next()) {
            let value = bytes(value)?;
            if snapshot_index(&value)? > at {
                fixes.snapshots.push(bytes(reducer)?);
            }
        }
        let stage = stage_prefix(&self.inner.session_keys(a.target).sessions, a.token);
        let restores: Vec<redis::Cmd> = NAMES
            .iter()
            .zip(dumps)
            .filter_map(|(name, dump)| {
                let dump = dump?;
                let mut cmd = redis::cmd("RESTORE");
                cmd.arg(format!("{stage}{name}"))
                    .arg(STAGED_TTL_MS)
                    .arg(dump)
                    .arg("REPLACE");
                Some(cmd)
            })
            .collect();
        self.inner.transport.pipeline_replayable(restores).await?;
        let publication = Publication {
            first: known.first,
            expiry: a.expiry.to_owned(),
            totals: Totals {
                counters,
                first_event_at,
                cursor: (cursor.max(0) as u64).min(at),
            },
            fixes,
        };
        self.finish(a, &publication).await.map(Some)
    }
}

fn strings(value: Value) -> Result<Vec<String>> {
    codec::array(value)?
        .into_iter()
        .map(codec::string)
        .collect()
}
