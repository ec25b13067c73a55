//! `renew_claims` (RN1, RN2, RN3): `lua/renew.lua`.

use a2_core::{Claim, Millis, RenewOutcome, Result};
use redis::Value;

use crate::lua::SessionScript;

use super::{Args, next};
use crate::codec;

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("renew");

/// `claims` sorted and distinct.
pub(crate) fn encode(holder: &str, expires: Millis, claims: &[Claim]) -> Args {
    let mut args = Args::default();
    args.s("holder", holder).n("expires", expires);
    for claim in claims {
        args.n("claims", claim.index).n("claims", claim.attempt);
    }
    args
}

pub(crate) fn decode(reply: Value) -> Result<RenewOutcome> {
    let mut items = codec::array(reply)?.into_iter();
    Ok(RenewOutcome {
        renewed: codec::indexes(next(&mut items)?)?,
        superseded: codec::indexes(next(&mut items)?)?,
    })
}
