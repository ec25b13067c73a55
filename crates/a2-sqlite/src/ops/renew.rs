//! `renew_claims` (RN1, RN2, RN3): the decisions are [`rules::renew`]'s.

use std::collections::BTreeSet;

use a2_core::rules;
use a2_core::rules::renew::Renewal;
use a2_core::*;
use rusqlite::{Connection, params};

use super::*;
use crate::rows::{db, sql_index};

/// RN1, RN2, RN3 (validated request).
pub fn renew(conn: &Connection, request: &RenewRequest, now: Millis) -> Result<RenewOutcome> {
    let expires_at = request.lease.expires_at(now);
    let Some(current) = session(conn, &request.session, now)? else {
        return Ok(RenewOutcome::default());
    };
    let mut renewed = BTreeSet::new();
    let mut superseded = BTreeSet::new();
    for claim in &request.claims {
        let Some(rec) = record(conn, current.sid, claim.index)? else {
            continue;
        };
        let renewal = rules::renew::decide(
            &rec.rules(),
            claim.attempt,
            &request.holder,
            now,
            expires_at,
        );
        if renewal == Renewal::Superseded {
            superseded.insert(claim.index);
        } else if renewal == Renewal::Renew {
            let index = sql_index(claim.index).unwrap_or(i64::MAX);
            conn.prepare_cached(
                "UPDATE events SET claim_expires_at = ?3 WHERE sid = ?1 AND idx = ?2",
            )
            .map_err(db)?
            .execute(params![current.sid, index, expires_at])
            .map_err(db)?;
            reslot(conn, current.sid, index)?;
            renewed.insert(claim.index);
        }
    }
    Ok(RenewOutcome {
        renewed: renewed.into_iter().collect(),
        superseded: superseded.into_iter().collect(),
    })
}
