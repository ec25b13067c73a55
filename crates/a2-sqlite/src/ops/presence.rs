//! `presence_set` (P1, P2) and the pruning of `presence_read` (P3): last
//! writer wins as [`rules::presence`] decides.

use std::collections::BTreeMap;

use a2_core::rules;
use a2_core::*;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use crate::effects::Effects;
use crate::rows::{db, json_text};

/// P1, P2 (validated input).
pub fn presence_set(
    conn: &Connection,
    effects: &mut Effects,
    ns: &str,
    participant: &str,
    values: BTreeMap<String, Option<Value>>,
    meta: PresenceMeta,
    now: Millis,
) -> Result<Option<PresencePatch>> {
    if values.is_empty() {
        return Ok(None);
    }
    let expires_at = validate::expiry(now, meta.ttl_ms);
    let mut stored = conn
        .prepare_cached(
            "SELECT at, expires_at FROM presence WHERE ns = ?1 AND participant = ?2 AND field = ?3",
        )
        .map_err(db)?;
    let mut delete = conn
        .prepare_cached("DELETE FROM presence WHERE ns = ?1 AND participant = ?2 AND field = ?3")
        .map_err(db)?;
    let mut upsert = conn
        .prepare_cached(
            "INSERT OR REPLACE INTO presence (ns, participant, field, value, seen, at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .map_err(db)?;
    let mut applied = BTreeMap::new();
    for (field, value) in values {
        let existing: Option<(Millis, Millis)> = stored
            .query_row(params![ns, participant, field], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()
            .map_err(db)?;
        if !rules::presence::applies(existing, meta.at, now) {
            continue;
        }
        match &value {
            None => {
                delete
                    .execute(params![ns, participant, field])
                    .map_err(db)?;
            }
            Some(value) => {
                upsert
                    .execute(params![
                        ns,
                        participant,
                        field,
                        json_text(value),
                        meta.seen,
                        meta.at,
                        expires_at
                    ])
                    .map_err(db)?;
            }
        }
        applied.insert(field, value);
    }
    if applied.is_empty() {
        return Ok(None);
    }
    let patch = PresencePatch {
        participant: participant.to_owned(),
        values: applied,
        seen: meta.seen,
        at: meta.at,
    };
    effects.patches.push((ns.to_owned(), patch.clone()));
    Ok(Some(patch))
}

/// P3's pruning: deletes the entries of `ns` expired at `now`.
pub fn presence_prune(conn: &Connection, ns: &str, now: Millis) -> Result<()> {
    conn.prepare_cached("DELETE FROM presence WHERE ns = ?1 AND expires_at <= ?2")
        .map_err(db)?
        .execute(params![ns, now])
        .map_err(db)?;
    Ok(())
}
