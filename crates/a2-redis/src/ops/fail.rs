//! `fail_attempt` (F1, F2, F3, F4, F5, F6): `lua/fail.lua`.

use a2_core::{FailKind, FailOutcome, Millis, Result};
use redis::Value;

use crate::lua::SessionScript;

use super::{Args, next};
use crate::codec::{self, broken};

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("fail");

pub(crate) fn encode(
    index: u64,
    attempt: u32,
    error: &str,
    max_failures: u32,
    retry_at: Option<Millis>,
) -> Args {
    let mut args = Args::default();
    args.n("index", index)
        .n("attempt", attempt)
        .s("error", error)
        .n("max_failures", max_failures)
        .s(
            "retry_at",
            retry_at.map(|t| t.to_string()).unwrap_or_default(),
        );
    args
}

/// What `fail.lua` answers: `None` for an index outside 1…frontier (F1).
pub(crate) fn decode(reply: Value) -> Result<Option<FailOutcome>> {
    let (tag, mut items) = codec::tagged(reply)?;
    let outcome = match tag.as_str() {
        "invalid" => return Ok(None),
        "failed" => FailKind::Failed,
        "dead" => FailKind::DeadLettered,
        "superseded" => FailKind::Superseded,
        other => return Err(broken(format!("fail: {other}"))),
    };
    let failure_count =
        u32::try_from(codec::uint(next(&mut items)?)?).map_err(|_| broken("failure count"))?;
    Ok(Some(FailOutcome {
        outcome,
        failure_count,
    }))
}
