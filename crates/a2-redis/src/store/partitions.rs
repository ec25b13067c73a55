//! Scripts that run once per partition (the listings, PS1 and I1), and
//! the helpers the operations share.

use a2_core::*;

use crate::inner::Inner;
use crate::ops::{self};

/// Runs a partition script once per call (its partition's key and
/// arguments) in one pipeline (see [`script_pipeline`]).
pub(super) async fn pipelined(
    inner: &Inner,
    script: &redis::Script,
    calls: &[(&str, ops::Args)],
) -> Result<Vec<redis::Value>> {
    let calls: Vec<([&str; 1], &ops::Args)> =
        calls.iter().map(|(key, args)| ([*key], args)).collect();
    // Both partition scripts only read, bar a clean-up that is the same
    // again: a replay is harmless (RD8).
    script_pipeline(inner, script, &calls).await
}

/// Runs `script` once per call (its keys and arguments) in one pipeline,
/// sent once more after a lost connection (every caller's calls are
/// harmless to replay, RD8): one round trip on RESP, one request over
/// REST; on a cluster, the transport sends each call to its keys' node,
/// concurrently. A server that lacks the script (after a restart, `SCRIPT
/// FLUSH` or a failover) gets it loaded (`Transport::reload`), then the
/// pipeline goes again.
pub(crate) async fn script_pipeline<'k, K: AsRef<[&'k str]>>(
    inner: &Inner,
    script: &redis::Script,
    calls: &[(K, &ops::Args)],
) -> Result<Vec<redis::Value>> {
    let cmds = || -> Vec<redis::Cmd> {
        calls
            .iter()
            .map(|(keys, args)| {
                crate::transport::code_call("EVALSHA", script.get_hash(), keys.as_ref(), args)
            })
            .collect()
    };
    match inner.transport.pipeline_replayable(cmds()).await {
        Err(error) if is_noscript(&error) => {
            let Some((keys, args)) = calls.first() else {
                return Ok(Vec::new());
            };
            inner.transport.reload(script, keys.as_ref(), args).await?;
            inner.transport.pipeline_replayable(cmds()).await
        }
        other => other,
    }
}

/// Whether the server lacked a script: the backend error behind the
/// store's error is the `redis` crate's `NOSCRIPT` error (over RESP or
/// REST), classified by its kind, never by its text.
pub(super) fn is_noscript(error: &Error) -> bool {
    error
        .backend()
        .and_then(|e| e.downcast_ref::<redis::RedisError>())
        .is_some_and(|e| e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
}

/// Sorted, distinct claims.
pub(super) fn sorted_claims(claims: &[Claim]) -> Vec<Claim> {
    let mut claims = claims.to_vec();
    claims.sort();
    claims.dedup();
    claims
}
