//! `release_claims` (RL1): the decision is [`rules::release`]'s.

use std::collections::BTreeSet;

use a2_core::rules;
use a2_core::*;
use rusqlite::{Connection, params};

use super::*;
use crate::effects::Effects;
use crate::rows::{db, sql_index};

/// RL1 (validated request). Released events are claimable at once: other
/// processes' workers waiting for the leases' expiry hear of them (PS2).
pub fn release(
    conn: &Connection,
    effects: &mut Effects,
    request: &ReleaseRequest,
    now: Millis,
) -> Result<Vec<u64>> {
    let Some(current) = session(conn, &request.session, now)? else {
        return Ok(Vec::new());
    };
    let mut released = BTreeSet::new();
    for claim in &request.claims {
        let Some(rec) = record(conn, current.sid, claim.index)? else {
            continue;
        };
        if rules::release::releases(&rec.rules(), claim.attempt, &request.holder, now) {
            let index = sql_index(claim.index).unwrap_or(i64::MAX);
            conn.prepare_cached(
                "UPDATE events SET claim_holder = NULL, claim_expires_at = NULL
                 WHERE sid = ?1 AND idx = ?2",
            )
            .map_err(db)?
            .execute(params![current.sid, index])
            .map_err(db)?;
            reslot(conn, current.sid, index)?;
            released.insert(claim.index);
        }
    }
    if !released.is_empty() {
        effects.announce(conn, current.sid, &request.session)?;
    }
    Ok(released.into_iter().collect())
}
