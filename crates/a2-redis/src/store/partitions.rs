//! Scripts that run once per partition (the listings, PS1 and I1), and
//! the helpers the operations share.

use a2_core::*;

use crate::inner::Inner;
use crate::ops::{self};

/// Runs a partition script once per call (its partition's key and
/// arguments) in one pipeline (see [`Inner::script_pipeline`]).
pub(super) async fn pipelined(
    inner: &Inner,
    script: &redis::Script,
    calls: &[(&str, ops::Args)],
) -> Result<Vec<redis::Value>> {
    let calls: Vec<([&str; 1], &ops::Args)> =
        calls.iter().map(|(key, args)| ([*key], args)).collect();
    // Both partition scripts only read, bar a clean-up that is the same
    // again: a replay is harmless (RD8).
    inner.script_pipeline(script, &calls).await
}

/// Sorted, distinct claims.
pub(super) fn sorted_claims(claims: &[Claim]) -> Vec<Claim> {
    let mut claims = claims.to_vec();
    claims.sort();
    claims.dedup();
    claims
}
