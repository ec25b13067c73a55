//! `release_claims` (RL1): `lua/release.lua`.

use a2_core::{Claim, Result};
use redis::Value;

use crate::lua::SessionScript;

use super::Args;
use crate::codec;

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("release");

/// `claims` sorted and distinct.
pub(crate) fn encode(holder: &str, claims: &[Claim]) -> Args {
    let mut args = Args::default();
    args.s("holder", holder);
    for claim in claims {
        args.n("claims", claim.index).n("claims", claim.attempt);
    }
    args
}

/// The released indexes, ascending.
pub(crate) fn decode(reply: Value) -> Result<Vec<u64>> {
    let mut released = codec::indexes(reply)?;
    released.dedup();
    Ok(released)
}
