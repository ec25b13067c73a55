//! `clear` (I4): `lua/clear.lua`.

use crate::lua::SessionScript;

use super::Args;

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("clear");

pub(crate) fn encode() -> Args {
    Args::default()
}
