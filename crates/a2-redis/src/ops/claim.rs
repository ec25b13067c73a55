//! `claim_available` (C1, C2, C3, C4, C5, C6, C7): `lua/claim.lua`.

use a2_core::{Millis, Result};
use redis::Value;

use crate::lua::SessionScript;

use super::{Args, lua_count, next};
use crate::codec::{self, broken};

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("claim");

/// `entries`: whether the reply carries the claimed log entries
/// ([`Reply::Rows`]) rather than leaving their read to the caller.
pub(crate) fn encode(
    holder: &str,
    expires: Millis,
    limit: usize,
    entries: bool,
    excluded: &[u64],
) -> Args {
    let mut args = Args::default();
    args.s("holder", holder)
        .n("expires", expires)
        .n("limit", lua_count(limit))
        .s("entries", if entries { "1" } else { "" });
    for index in excluded {
        args.n("excluded", *index);
    }
    args
}

/// What `claim.lua` answers.
#[derive(Debug)]
pub(crate) enum Reply {
    /// Nothing pending, or nothing claimable soon (C1, C4).
    Settled,
    /// Nothing claimable now; the earliest time something may be (C3).
    Busy { retry_at: Millis },
    /// The claimed events, in index order (C2): each index with its new
    /// record; the caller reads their log entries (`Inner::claimed_rows`);
    /// and when another event comes due (C7).
    Claimed(Vec<(u64, Vec<u8>)>, Option<Millis>),
    /// As `Claimed`, with each event's log entry (`XRANGE` form, `Nil`
    /// when missing), when asked for.
    Rows(Vec<(u64, Vec<u8>, Value)>, Option<Millis>),
    /// A claimable event's log entry is missing (E1); nothing was written.
    Corrupted { index: u64 },
}

pub(crate) fn decode(reply: Value) -> Result<Reply> {
    let (tag, mut items) = codec::tagged(reply)?;
    Ok(match tag.as_str() {
        "settled" => Reply::Settled,
        "busy" => Reply::Busy {
            retry_at: codec::int(next(&mut items)?)?,
        },
        "claimed" | "rows" => {
            // C7, then each event: its index, its record, and with "rows"
            // its log entry.
            let next_at = codec::opt_int(next(&mut items)?)?;
            let with_entries = tag == "rows";
            let mut rows = Vec::new();
            while let Some(index) = items.next() {
                let record = codec::opt_bytes(next(&mut items)?)?
                    .ok_or_else(|| broken("claim: a claimed event without its record"))?;
                let entry = if with_entries {
                    Some(next(&mut items)?)
                } else {
                    None
                };
                rows.push((codec::uint(index)?, record, entry));
            }
            if with_entries {
                let rows = rows
                    .into_iter()
                    .map(|(i, r, e)| (i, r, e.unwrap_or(Value::Nil)))
                    .collect();
                Reply::Rows(rows, next_at)
            } else {
                Reply::Claimed(rows.into_iter().map(|(i, r, _)| (i, r)).collect(), next_at)
            }
        }
        "corrupted" => Reply::Corrupted {
            index: codec::uint(next(&mut items)?)?,
        },
        other => return Err(broken(format!("claim: {other}"))),
    })
}
