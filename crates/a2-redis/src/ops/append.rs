//! `append` (A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11): `lua/append.lua`.

use a2_core::{Expiry, Millis, Result, StoredEvent};
use redis::Value;
use serde_json::Value as Json;

use crate::lua::SessionScript;

use super::batch::Batch;
use super::{Args, next};
use crate::codec::{self, broken};

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("append");

/// Who claims the appended events (AC2): the holder, the expiry, the
/// effective limit (at least 1).
pub(crate) struct Claiming<'a> {
    pub(crate) holder: &'a str,
    pub(crate) expires: Millis,
    pub(crate) limit: usize,
}

/// What an append does to the session's expiry (EX2).
#[derive(Debug, Clone, Copy)]
pub(crate) enum SetExpiry {
    /// Leaves it.
    Keep,
    /// Sets it.
    Set(Expiry),
    /// Sets it on a session the append creates (the store's default).
    Default(Expiry),
}

/// `{ttl}|{expires_at}`, as the `exp` field keeps an expiry.
pub(crate) fn expiry_text(expiry: Expiry) -> String {
    let part = |n: Option<String>| n.unwrap_or_default();
    format!(
        "{}|{}",
        part(expiry.ttl_ms.map(|t| t.to_string())),
        part(expiry.expires_at.map(|t| t.to_string()))
    )
}

/// The script's own arguments: count, wake-up, the claim (`''`, `''`, 0
/// for a plain append), the expiry, the expected frontier (A13, `''` for
/// none), the close (CL6), then the events.
pub(crate) fn encode(
    batch: &Batch,
    wake: &str,
    claim: Option<&Claiming<'_>>,
    expiry: SetExpiry,
    if_frontier: Option<u64>,
    close: bool,
) -> Args {
    // Room for every argument up front (the events travel twice: in the
    // wake-up and as themselves).
    let mut args = Args::with_capacity(
        8 + crate::lua::EVENT_STRIDE * batch.len(),
        2 * wake.len() + batch.bytes() + 128,
    );
    args.n("count", batch.len()).s("wake", wake);
    match claim {
        Some(claim) => {
            // The holder travels as JSON text, ready for the record.
            args.s("holder", Json::from(claim.holder).to_string())
                .n("expires", claim.expires)
                .n("limit", claim.limit)
        }
        None => args.s("holder", "").s("expires", "").n("limit", 0),
    };
    match expiry {
        SetExpiry::Keep => args.s("expiry", ""),
        SetExpiry::Set(e) => args.s("expiry", format!("s:{}", expiry_text(e))),
        SetExpiry::Default(e) => args.s("expiry", format!("d:{}", expiry_text(e))),
    };
    match if_frontier {
        Some(f) => args.n("frontier", f),
        None => args.s("frontier", ""),
    };
    args.s("close", if close { "1" } else { "" });
    batch.encode(&mut args, None);
    args
}

/// What `append.lua` answers.
#[derive(Debug)]
pub(crate) enum Reply {
    /// An empty batch (A2).
    Empty { has_pending: bool },
    /// Written from index `first` on; `claimed` leased at append (AC2).
    Written {
        first: u64,
        has_pending: bool,
        claimed: Vec<u64>,
    },
    /// Every id exists in the session: the stored rows (A5).
    Retry {
        has_pending: bool,
        rows: Vec<StoredEvent>,
    },
    /// Some ids exist, some do not (A6); one that exists.
    Partial { id: String },
    /// A cause names an index beyond the frontier (A7), which may be any
    /// `u64` the caller sent.
    NoCause { index: u64 },
    /// A cause's attempt is not the latest, or its event is dead (A7).
    Superseded { index: u64 },
    /// A cause names a trimmed event; the session keeps `first` on (TR3).
    Trimmed { first: u64 },
    /// The session is closed (CL2).
    Closed,
    /// The session's frontier is not the one the append expected (A13).
    Moved { frontier: u64 },
}

pub(crate) fn decode(session: &str, reply: Value) -> Result<Reply> {
    // In a batch the common reply comes joined: `ok,first,pending[,claimed]`.
    let mut numbers = [0u64; 3];
    if let Some(count) = codec::joined_ok(&reply, &mut numbers) {
        return match count? {
            n @ (2 | 3) => Ok(Reply::Written {
                first: numbers[0],
                has_pending: numbers[1] != 0,
                claimed: numbers[2..n].to_vec(),
            }),
            _ => Err(broken("append: a joined reply too short")),
        };
    }
    let (tag, mut items) = codec::tagged(reply)?;
    let flag = |v: Value| codec::int(v).map(|n| n != 0);
    Ok(match tag.as_str() {
        "empty" => Reply::Empty {
            has_pending: flag(next(&mut items)?)?,
        },
        "ok" => Reply::Written {
            first: codec::uint(next(&mut items)?)?,
            has_pending: flag(next(&mut items)?)?,
            claimed: items.map(codec::uint).collect::<Result<_>>()?,
        },
        "retry" => Reply::Retry {
            has_pending: flag(next(&mut items)?)?,
            rows: codec::rows(session, items)?,
        },
        "partial" => Reply::Partial {
            id: codec::string(next(&mut items)?)?,
        },
        "no_cause" => Reply::NoCause {
            index: codec::uint_text(next(&mut items)?)?,
        },
        "superseded" => Reply::Superseded {
            index: codec::uint_text(next(&mut items)?)?,
        },
        "trimmed" => Reply::Trimmed {
            first: codec::uint(next(&mut items)?)?,
        },
        "closed" => Reply::Closed,
        "moved" => Reply::Moved {
            frontier: codec::uint(next(&mut items)?)?,
        },
        other => return Err(broken(format!("append: {other}"))),
    })
}

#[cfg(test)]
mod tests {
    use a2_core::{NewEvent, SequentialIds};
    use serde_json::json;

    use super::*;

    #[test]
    fn header_matches_encoder() {
        let batch = Batch::new(
            vec![
                NewEvent::new("a", json!(1)),
                NewEvent::new("b", json!(2)).lane("l"),
            ],
            &SequentialIds::new("e"),
        )
        .unwrap();
        let claim = Claiming {
            holder: "w",
            expires: 5,
            limit: 1,
        };
        for (claim, close) in [(None, false), (Some(&claim), true)] {
            let args = encode(&batch, "", claim, SetExpiry::Keep, Some(7), close);
            crate::lua::header::check_session(&SCRIPT, &args.names);
            assert_eq!(args.len(), 8 + 2 * crate::lua::EVENT_STRIDE);
        }
    }
}
