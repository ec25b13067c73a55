//! `put_snapshots` (S2): `lua/put_snapshots.lua`.

use a2_core::{Millis, Result, SnapshotWrite};
use redis::Value;
use serde_json::Value as Json;

use crate::lua::SessionScript;

use super::{Args, next};
use crate::codec::{self, broken};

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("put_snapshots");

pub(crate) fn encode(snapshots: &[SnapshotWrite]) -> Args {
    let mut args = Args::default();
    for snapshot in snapshots {
        args.s("snapshots", &snapshot.reducer)
            .n("snapshots", snapshot.index)
            .s("snapshots", snapshot.state.to_string());
    }
    args
}

/// `Err(index)` for an index beyond the frontier (nothing written).
pub(crate) fn decode(reply: Value) -> Result<std::result::Result<(), u64>> {
    let (tag, mut items) = codec::tagged(reply)?;
    match tag.as_str() {
        "ok" => Ok(Ok(())),
        "invalid" => Ok(Err(codec::uint_text(next(&mut items)?)?)),
        other => Err(broken(format!("put_snapshots: {other}"))),
    }
}

/// A stored snapshot `{index}|{updated_at}|{state}`.
pub(crate) fn parse(stored: &str) -> Result<(u64, Millis, Json)> {
    let mut parts = stored.splitn(3, '|');
    let (Some(index), Some(at), Some(json)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(broken("snapshot"));
    };
    Ok((
        index.parse().map_err(|_| broken("snapshot index"))?,
        at.parse().map_err(|_| broken("snapshot time"))?,
        serde_json::from_str(json).map_err(|e| broken(format!("snapshot state: {e}")))?,
    ))
}
