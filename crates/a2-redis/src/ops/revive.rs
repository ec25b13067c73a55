//! `revive` (RV1, RV2, RV3): `lua/revive.lua`.

use a2_core::ReviveOutcome;

use crate::lua::SessionScript;

use super::{Args, EventOutcome};

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("revive");

pub(crate) fn encode(index: u64) -> Args {
    let mut args = Args::default();
    args.n("index", index);
    args
}

/// What `revive.lua` answers about an event (see [`super::event_reply`]).
pub(crate) const OUTCOMES: [EventOutcome<ReviveOutcome>; 2] = [
    ("revived", ReviveOutcome::Revived),
    ("not_dead", ReviveOutcome::NotDeadLettered),
];
