//! `revive` (RV1, RV2, RV3): `lua/revive.lua`.

use a2_core::{Result, ReviveOutcome};
use redis::Value;

use crate::lua::SessionScript;

use super::Args;

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("revive");

pub(crate) fn encode(index: u64) -> Args {
    let mut args = Args::default();
    args.n("index", index);
    args
}

/// What `revive.lua` answers about event `index` of `session`.
pub(crate) fn decode(session: &str, index: u64, reply: Value) -> Result<ReviveOutcome> {
    let outcomes = [
        ("revived", ReviveOutcome::Revived as fn(_) -> _),
        ("not_dead", ReviveOutcome::NotDeadLettered),
    ];
    super::event_reply("revive", session, index, reply, outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_encoder() {
        let args = encode(3);
        crate::lua::header::check_session(&SCRIPT, &args.names);
    }
}
