//! The partition scripts: `lua/list_sessions.lua` (I1) and
//! `lua/pending_sessions.lua` (PS1). Each reads one partition; the store
//! merges the partitions' pages in byte order.

use std::sync::LazyLock;

use a2_core::{Expiry, Millis, Result, SessionSummary};
use redis::{Script, Value};

use super::{Args, lua_count, next};
use crate::codec::{self, broken};

pub(crate) static LIST: LazyLock<Script> =
    LazyLock::new(|| crate::lua::partition(include_str!("../../lua/list_sessions.lua")));
pub(crate) static PENDING: LazyLock<Script> =
    LazyLock::new(|| crate::lua::partition(include_str!("../../lua/pending_sessions.lua")));

pub(crate) fn encode_list(base: &str, min: &[u8], max: &[u8], count: usize) -> Args {
    let mut args = Args::default();
    args.s("base", base)
        .s("min", min)
        .s("max", max)
        .n("count", lua_count(count));
    args
}

/// EX1: a session's expiry as its `exp` field keeps it, `{ttl}|{expires_at}`.
pub(crate) fn parse_expiry(text: &str) -> Result<Expiry> {
    let (ttl, at) = text
        .split_once('|')
        .ok_or_else(|| broken(format!("expiry {text:?}")))?;
    let number = |s: &str| -> Result<Option<i64>> {
        if s.is_empty() {
            return Ok(None);
        }
        s.parse()
            .map(Some)
            .map_err(|_| broken(format!("expiry {text:?}")))
    };
    Ok(Expiry {
        ttl_ms: number(ttl)?.map(|t| t.max(0) as u64),
        expires_at: number(at)?,
    })
}

/// The sessions of a listing page that have not expired at `now` (EX3);
/// how many ids the page went through, and the last of them.
pub(crate) fn decode_list(
    reply: Value,
    now: Millis,
) -> Result<(Vec<SessionSummary>, usize, Option<String>)> {
    let mut sessions = Vec::new();
    let (mut seen, mut last) = (0, None);
    for item in codec::array(reply)? {
        let mut parts = codec::array(item)?.into_iter();
        let session_id = codec::string(next(&mut parts)?)?;
        seen += 1;
        last = Some(session_id.clone());
        let mut counts = codec::array(next(&mut parts)?)?.into_iter();
        let mut next_count =
            || -> Result<Option<i64>> { codec::opt_int(counts.next().unwrap_or(Value::Nil)) };
        let to_u64 =
            |n: Option<i64>| u64::try_from(n.unwrap_or(0)).map_err(|_| broken("negative counter"));
        let Some(event_count) = next_count()? else {
            // Cleared between the two reads of the script: no longer listed.
            continue;
        };
        sessions.push(SessionSummary {
            session_id,
            event_count: to_u64(Some(event_count))?,
            pending_count: to_u64(next_count()?)?,
            failed_count: to_u64(next_count()?)?,
            attempt_count: to_u64(next_count()?)?,
            failure_count: to_u64(next_count()?)?,
            first_event_at: next_count()?.unwrap_or(0),
            updated_at: next_count()?.unwrap_or(0),
            first_index: to_u64(Some(next_count()?.unwrap_or(1)))?,
            closed_at: next_count()?,
            deadline: None,
            forked_from: None,
        });
        let summary = sessions.last_mut().ok_or_else(|| broken("listing"))?;
        let expiry = match counts.next() {
            Some(Value::Nil) | None => None,
            Some(text) => Some(parse_expiry(&codec::string(text)?)?),
        };
        summary.deadline = expiry.and_then(|e| e.deadline(summary.updated_at));
        // FK5: the source's id as given, and the index.
        let fork_of = codec::opt_string(counts.next().unwrap_or(Value::Nil))?;
        let fork_at = codec::opt_int(counts.next().unwrap_or(Value::Nil))?;
        if let (Some(session), Some(index)) = (fork_of, fork_at) {
            summary.forked_from = Some(a2_core::ForkOrigin {
                session,
                index: to_u64(Some(index))?,
            });
        }
        if a2_core::rules::lifecycle::expired(summary.deadline, now) {
            sessions.pop();
        }
    }
    Ok((sessions, seen, last))
}

pub(crate) fn encode_pending(base: &str, min: &[u8], count: usize, now: Millis) -> Args {
    let mut args = Args::default();
    args.s("base", base)
        .s("min", min)
        .n("count", lua_count(count))
        .n("now", now);
    args
}

pub(crate) fn decode_pending(reply: Value) -> Result<Vec<String>> {
    codec::array(reply)?
        .into_iter()
        .map(codec::string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_match_encoders() {
        let args = encode_list("a2:{p0.1}:", b"-", b"+", 10);
        crate::lua::header::check(
            "list_sessions.lua",
            include_str!("../../lua/list_sessions.lua"),
            1,
            &args.names,
        );
        let args = encode_pending("a2:{p0.1}:", b"-", 10, 0);
        crate::lua::header::check(
            "pending_sessions.lua",
            include_str!("../../lua/pending_sessions.lua"),
            1,
            &args.names,
        );
    }
}
