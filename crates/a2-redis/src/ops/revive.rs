//! `revive` (RV1, RV2, RV3): `lua/revive.lua`.

use a2_core::{Result, StoredEvent};
use redis::Value;

use crate::lua::SessionScript;

use super::{Args, next};
use crate::codec::{self, broken};

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("revive");

pub(crate) fn encode(index: u64) -> Args {
    let mut args = Args::default();
    args.n("index", index);
    args
}

/// What `revive.lua` answers.
#[derive(Debug)]
pub(crate) enum Reply {
    /// An index outside 1…frontier (RV1).
    Invalid,
    /// The event was dead-lettered and is pending again (RV2).
    Revived(StoredEvent),
    /// The event is not dead-lettered; nothing was written (RV3).
    NotDead(StoredEvent),
    /// The event's log entry is missing (E1); nothing was written.
    Corrupted,
    /// The event was trimmed; the session keeps `first` on (TR3).
    Trimmed { first: u64 },
}

pub(crate) fn decode(session: &str, reply: Value) -> Result<Reply> {
    let (tag, mut items) = codec::tagged(reply)?;
    Ok(match tag.as_str() {
        "invalid" => Reply::Invalid,
        "revived" => Reply::Revived(codec::row(session, next(&mut items)?)?),
        "not_dead" => Reply::NotDead(codec::row(session, next(&mut items)?)?),
        "corrupted" => Reply::Corrupted,
        "trimmed" => Reply::Trimmed {
            first: codec::uint(next(&mut items)?)?,
        },
        other => return Err(broken(format!("revive: {other}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_encoder() {
        let args = encode(3);
        crate::lua::header::check(
            "revive.lua",
            include_str!("../../lua/revive.lua"),
            5,
            &args.names,
        );
    }
}
