//! `revive` (RV1, RV2, RV3): `lua/revive.lua`.

use a2_core::{Result, ReviveOutcome};
use redis::Value;

use crate::lua::SessionScript;

use super::Args;
use crate::codec::broken;

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("revive");

pub(crate) fn encode(index: u64) -> Args {
    let mut args = Args::default();
    args.n("index", index);
    args
}

/// What `revive.lua` answers about event `index` of `session`.
pub(crate) fn decode(session: &str, index: u64, reply: Value) -> Result<ReviveOutcome> {
    let (tag, row) = super::event_reply(session, index, reply)?;
    match tag.as_str() {
        "revived" => Ok(ReviveOutcome::Revived(row)),
        "not_dead" => Ok(ReviveOutcome::NotDeadLettered(row)),
        other => Err(broken(format!("revive: {other}"))),
    }
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
