//! `close_session` (CL1) and `trim` (TR1, TR2): `lua/close.lua` and
//! `lua/trim.lua`.

use a2_core::{CloseOutcome, Result, TrimOutcome};
use redis::Value;

use crate::lua::SessionScript;

use super::{Args, next};
use crate::codec::{self, broken};

pub(crate) static CLOSE: SessionScript = crate::lua::session_script!("close");

pub(crate) static TRIM: SessionScript = crate::lua::session_script!("trim");

pub(crate) static SET_EXPIRY: SessionScript = crate::lua::session_script!("set_expiry");

pub(crate) fn encode_set_expiry(expiry: a2_core::Expiry) -> Args {
    let mut args = Args::default();
    args.s("expiry", super::append::expiry_text(expiry));
    args
}

/// What `set_expiry.lua` answers: the new deadline, or `None` for a
/// session without events.
pub(crate) fn decode_set_expiry(reply: Value) -> Result<Option<Option<a2_core::Millis>>> {
    let (tag, mut items) = codec::tagged(reply)?;
    Ok(match tag.as_str() {
        "ok" => {
            let text = codec::string(next(&mut items)?)?;
            Some(if text.is_empty() {
                None
            } else {
                Some(
                    text.parse()
                        .map_err(|_| broken(format!("deadline {text:?}")))?,
                )
            })
        }
        "none" => None,
        other => return Err(broken(format!("set_expiry: {other}"))),
    })
}

pub(crate) fn encode_close() -> Args {
    Args::default()
}

/// What `close.lua` answers: the outcome, or `None` for a session without
/// events.
pub(crate) fn decode_close(reply: Value) -> Result<Option<CloseOutcome>> {
    let (tag, mut items) = codec::tagged(reply)?;
    let mut pair = || -> Result<(u64, i64)> {
        let frontier = codec::uint_text(next(&mut items)?)?;
        let closed_at = codec::string(next(&mut items)?)?;
        let closed_at = closed_at
            .parse()
            .map_err(|_| broken(format!("close time {closed_at:?}")))?;
        Ok((frontier, closed_at))
    };
    Ok(match tag.as_str() {
        "closed" => {
            let (frontier, closed_at) = pair()?;
            Some(CloseOutcome::Closed {
                frontier,
                closed_at,
            })
        }
        "already" => {
            let (frontier, closed_at) = pair()?;
            Some(CloseOutcome::AlreadyClosed {
                frontier,
                closed_at,
            })
        }
        "empty" => None,
        other => return Err(broken(format!("close: {other}"))),
    })
}

/// `trim.lua`'s arguments: the last index to trim and the id index's
/// fields (`#{event id}`) of the log's events from the first retained one,
/// as read ([`crate::inner::Inner::log_ids`]).
pub(crate) fn encode_trim(through: u64, ids: &[Vec<u8>]) -> Args {
    let bytes = ids.iter().map(Vec::len).sum::<usize>() + 20;
    let mut args = Args::with_capacity(1 + ids.len(), bytes);
    args.n("through", through);
    for id in ids {
        args.s("ids", id);
    }
    args
}

/// What `trim.lua` answers.
#[derive(Debug)]
pub(crate) enum TrimReply {
    /// Trimmed (or nothing to trim): the first retained index.
    Trimmed(TrimOutcome),
    /// The index is beyond this frontier (TR2).
    Beyond { frontier: u64 },
    /// This event of the range is not settled (TR2).
    Unsettled { index: u64, dead: bool },
    /// The log misses this entry of the range (E1).
    Corrupted { index: u64 },
    /// The ids sent are not the log's now (another trim, or a clear and
    /// new appends, came between the read and the script): nothing was
    /// written; read them again.
    Stale,
}

pub(crate) fn decode_trim(reply: Value) -> Result<TrimReply> {
    let (tag, mut items) = codec::tagged(reply)?;
    Ok(match tag.as_str() {
        "ok" => TrimReply::Trimmed(TrimOutcome {
            first_index: codec::uint(next(&mut items)?)?,
        }),
        "beyond" => TrimReply::Beyond {
            frontier: codec::uint(next(&mut items)?)?,
        },
        "unsettled" => TrimReply::Unsettled {
            index: codec::uint_text(next(&mut items)?)?,
            dead: codec::string(next(&mut items)?)? == "dead-lettered",
        },
        "corrupted" => TrimReply::Corrupted {
            index: codec::uint(next(&mut items)?)?,
        },
        "stale" => TrimReply::Stale,
        other => return Err(broken(format!("trim: {other}"))),
    })
}
