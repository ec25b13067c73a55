//! `cancel` (CN1, CN2, CN3, CN4, CN5): `lua/cancel.lua`.

use a2_core::{Result, StoredEvent};
use redis::Value;

use crate::lua::SessionScript;

use super::{Args, next};
use crate::codec::{self, broken};

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("cancel");

/// An empty reason travels as none.
pub(crate) fn encode(index: u64, reason: Option<&str>) -> Args {
    let mut args = Args::default();
    args.n("index", index).s("reason", reason.unwrap_or(""));
    args
}

/// What `cancel.lua` answers.
#[derive(Debug)]
pub(crate) enum Reply {
    /// An index outside 1…frontier (CN4).
    Invalid,
    /// The event was pending or dead-lettered and is cancelled now (CN1).
    Cancelled(StoredEvent),
    /// The event was settled already; nothing was written (CN3).
    NotPending(StoredEvent),
    /// The event's log entry is missing (E1); nothing was written.
    Corrupted,
    /// The event was trimmed; the session keeps `first` on (CN4).
    Trimmed { first: u64 },
}

pub(crate) fn decode(session: &str, reply: Value) -> Result<Reply> {
    let (tag, mut items) = codec::tagged(reply)?;
    Ok(match tag.as_str() {
        "invalid" => Reply::Invalid,
        "cancelled" => Reply::Cancelled(codec::row(session, next(&mut items)?)?),
        "not_pending" => Reply::NotPending(codec::row(session, next(&mut items)?)?),
        "corrupted" => Reply::Corrupted,
        "trimmed" => Reply::Trimmed {
            first: codec::uint(next(&mut items)?)?,
        },
        other => return Err(broken(format!("cancel: {other}"))),
    })
}

/// A cancel's announcement on its partition's channel (CN5):
/// `{index}:{attempt}:{session}`.
pub(crate) fn announcement(payload: &[u8]) -> Option<a2_core::Cancellation> {
    let text = std::str::from_utf8(payload).ok()?;
    let (index, rest) = text.split_once(':')?;
    let (attempt, session) = rest.split_once(':')?;
    Some(a2_core::Cancellation {
        session: session.to_owned(),
        index: index.parse().ok()?,
        attempt: attempt.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_encoder() {
        let args = encode(3, Some("stop"));
        crate::lua::header::check(
            "cancel.lua",
            include_str!("../../lua/cancel.lua"),
            5,
            &args.names,
        );
    }

    #[test]
    fn cn5_announcements_name_session_index_and_attempt() {
        let cancel = announcement(b"7:2:chat:1").unwrap();
        assert_eq!(
            (cancel.session.as_str(), cancel.index, cancel.attempt),
            ("chat:1", 7, 2)
        );
        assert!(announcement(b"x:2:s").is_none());
    }
}
