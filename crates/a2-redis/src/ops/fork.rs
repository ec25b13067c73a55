//! `fork` (FK1, FK2, FK3, FK6): `lua/fork_read.lua` on the source,
//! `lua/fork_stage.lua` and `lua/fork_publish.lua` on the target.

use a2_core::{ForkOrigin, Result};
use redis::Value;

use crate::lua::SessionScript;

use super::{Args, next};
use crate::codec::{self, broken};

pub(crate) static READ: SessionScript = crate::lua::session_script!("fork_read");

pub(crate) static STAGE: SessionScript = crate::lua::session_script!("fork_stage");

pub(crate) static PUBLISH: SessionScript = crate::lua::session_script!("fork_publish");

/// Which part of the source a read takes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Part {
    /// The whole session as dumps, with what the copy must fix, unless it
    /// has more than `from` events or more than `to` after the index.
    Dump,
    /// The records of a range of indexes.
    Records,
    /// The first event's time and the snapshots.
    Snapshots,
}

pub(crate) fn encode_read(at: u64, part: Part, from: u64, to: u64) -> Args {
    let mut args = Args::default();
    let part = match part {
        Part::Dump => "dump",
        Part::Records => "records",
        Part::Snapshots => "snapshots",
    };
    args.n("at", at).s("part", part).n("from", from).n("to", to);
    args
}

/// Where the source stood when a read ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Standing {
    /// Its frontier.
    pub(crate) frontier: u64,
    /// Its first retained index.
    pub(crate) first: u64,
    /// The id of its event at the fork's index.
    pub(crate) at_id: Option<String>,
}

/// What `fork_read.lua` answers: `None` for a source without events, else
/// where it stands and the items of the part.
pub(crate) fn decode_read(reply: Value) -> Result<Option<(Standing, Vec<Value>)>> {
    let (tag, mut items) = codec::tagged(reply)?;
    match tag.as_str() {
        "none" => Ok(None),
        "ok" => {
            let standing = Standing {
                frontier: codec::uint(next(&mut items)?)?,
                first: codec::uint(next(&mut items)?)?,
                at_id: codec::opt_string(next(&mut items)?)?,
            };
            Ok(Some((standing, items.collect())))
        }
        other => Err(broken(format!("fork_read: {other}"))),
    }
}

/// One call of `fork_stage.lua`: the parts of the fork it writes.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    /// Log entries: index and field texts (name, value, ...).
    pub(crate) entries: Vec<(u64, Vec<Vec<u8>>)>,
    /// Records: index and JSON.
    pub(crate) records: Vec<(u64, Vec<u8>)>,
    /// Indexes ready at once.
    pub(crate) ready: Vec<u64>,
    /// Indexes ready from a time: (time, index).
    pub(crate) timed: Vec<(i64, u64)>,
    /// Members of the lanes set.
    pub(crate) lanes: Vec<String>,
    /// Snapshots: reducer and stored value.
    pub(crate) snapshots: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Stage {
    /// Whether the call would write nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
            && self.records.is_empty()
            && self.ready.is_empty()
            && self.timed.is_empty()
            && self.lanes.is_empty()
            && self.snapshots.is_empty()
    }
}

pub(crate) fn encode_stage(token: &str, stage: &Stage) -> Args {
    let mut args = Args::default();
    let counts = format!(
        "{} {} {} {} {} {}",
        stage.entries.len(),
        stage.records.len(),
        stage.ready.len(),
        stage.timed.len(),
        stage.lanes.len(),
        stage.snapshots.len()
    );
    args.s("token", token).s("counts", counts);
    for (index, fields) in &stage.entries {
        args.n("items", *index).n("items", fields.len());
        for field in fields {
            args.s("items", field);
        }
    }
    for (index, record) in &stage.records {
        args.n("items", *index).s("items", record);
    }
    for index in &stage.ready {
        args.n("items", *index);
    }
    for (at, index) in &stage.timed {
        args.n("items", *at).n("items", *index);
    }
    for member in &stage.lanes {
        args.s("items", member);
    }
    for (reducer, value) in &stage.snapshots {
        args.s("items", reducer).s("items", value);
    }
    args
}

/// What `fork_publish.lua` does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode {
    /// Answers whether the target exists, writing nothing.
    Check,
    /// Publishes the staged fork.
    Publish,
    /// Deletes the staged keys.
    Drop,
}

/// The fork's counters, as `fork_publish.lua` writes them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Totals {
    pub(crate) counters: a2_core::rules::fork::ForkCounters,
    pub(crate) first_event_at: a2_core::Millis,
    /// The fork's claim cursor.
    pub(crate) cursor: u64,
}

/// What `fork_publish.lua` changes in a copy restored from dumps before it
/// publishes it (nothing for a copy staged page by page).
#[derive(Debug, Default)]
pub(crate) struct Fixes {
    /// Events after the fork's index in the restored log.
    pub(crate) tail: u64,
    /// Meta fields to delete (the tail's records and ids).
    pub(crate) hdel: Vec<Vec<u8>>,
    /// Members to take out of timed.
    pub(crate) unlease: Vec<u64>,
    /// Members to add to ready.
    pub(crate) ready: Vec<u64>,
    /// Timed entries to add: (time, index).
    pub(crate) timed: Vec<(i64, u64)>,
    /// Lane members to delete.
    pub(crate) lanes: Vec<String>,
    /// Records to write: (index, JSON).
    pub(crate) records: Vec<(u64, Vec<u8>)>,
    /// Reducers whose snapshots go.
    pub(crate) snapshots: Vec<Vec<u8>>,
}

pub(crate) fn encode_publish(
    mode: Mode,
    token: &str,
    origin: &ForkOrigin,
    first: u64,
    expiry: &str,
    totals: Totals,
    fixes: &Fixes,
) -> Args {
    let mut args = Args::default();
    let mode = match mode {
        Mode::Check => "check",
        Mode::Publish => "publish",
        Mode::Drop => "drop",
    };
    let c = totals.counters;
    let counters = format!(
        "{} {} {} {} {}",
        c.pending_count, c.failed_count, c.attempt_count, c.failure_count, totals.first_event_at
    );
    args.s("mode", mode)
        .s("token", token)
        .s("source", &origin.session)
        .n("at", origin.index)
        .n("first", first)
        .s("expiry", expiry)
        .s("counters", counters)
        .n("cursor", totals.cursor);
    let f = fixes;
    let counts = format!(
        "{} {} {} {} {} {} {} {}",
        f.tail,
        f.hdel.len(),
        f.unlease.len(),
        f.ready.len(),
        f.timed.len() * 2,
        f.lanes.len(),
        f.records.len() * 2,
        f.snapshots.len()
    );
    args.s("fixes", counts);
    for field in &f.hdel {
        args.s("items", field);
    }
    for index in f.unlease.iter().chain(&f.ready) {
        args.n("items", *index);
    }
    for (at, index) in &f.timed {
        args.n("items", *at).n("items", *index);
    }
    for member in &f.lanes {
        args.s("items", member);
    }
    for (index, record) in &f.records {
        args.n("items", *index).s("items", record);
    }
    for reducer in &f.snapshots {
        args.s("items", reducer);
    }
    args
}

/// What `fork_publish.lua` answers.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Published {
    /// No target (a check).
    Free,
    /// The target is this fork (FK3).
    Already,
    /// The target exists with this origin (none: a session of its own).
    Exists(Option<ForkOrigin>),
    /// Published.
    Forked,
    /// The staged log was not whole.
    Lost,
    /// The staged keys were deleted.
    Dropped,
}

pub(crate) fn decode_publish(reply: Value) -> Result<Published> {
    let (tag, mut items) = codec::tagged(reply)?;
    Ok(match tag.as_str() {
        "free" => Published::Free,
        "already" => Published::Already,
        "exists" => {
            let session = codec::opt_string(next(&mut items)?)?;
            let index = codec::opt_string(next(&mut items)?)?;
            Published::Exists(match (session, index) {
                (Some(session), Some(index)) => Some(ForkOrigin {
                    session,
                    index: index
                        .parse()
                        .map_err(|_| broken(format!("fork index {index:?}")))?,
                }),
                _ => None,
            })
        }
        "forked" => Published::Forked,
        "lost" => Published::Lost,
        "dropped" => Published::Dropped,
        other => return Err(broken(format!("fork_publish: {other}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_match_encoders() {
        crate::lua::header::check_session(&READ, &encode_read(3, Part::Dump, 1, 3).names);
        let stage = Stage {
            records: vec![(1, b"{}".to_vec())],
            ..Stage::default()
        };
        crate::lua::header::check_session(&STAGE, &encode_stage("t", &stage).names);
        let origin = ForkOrigin {
            session: "s".into(),
            index: 3,
        };
        crate::lua::header::check_session(
            &PUBLISH,
            &encode_publish(
                Mode::Check,
                "t",
                &origin,
                1,
                "",
                Totals::default(),
                &Fixes {
                    hdel: vec![b"1".to_vec()],
                    ..Fixes::default()
                },
            )
            .names,
        );
    }
}
