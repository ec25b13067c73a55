//! Presence (P1, P2, P3): last writer wins per participant and field, as
//! [`rules::presence`] decides, under a transaction-scoped advisory lock
//! of the participant so that two writers of the same fields take turns.

use std::collections::BTreeMap;

use crate::sql::Conn;
use a2_core::{PresenceEntry, PresenceMeta, PresencePatch, Result, rules, validate};
use serde_json::Value;

use crate::op::On;
use crate::sql::{Text, corrupt, text};

/// A presence write: namespace, participant, values, meta.
pub(crate) type Write = (
    String,
    String,
    BTreeMap<String, Option<Value>>,
    PresenceMeta,
);

/// P1, P2 (a validated write, its values not empty): the fields that
/// apply are written or removed, and the patch of what applied is told to
/// every subscriber (P4) at the commit.
pub(crate) async fn set(
    on: On<'_, impl Conn>,
    (ns, participant, values, meta): Write,
) -> Result<Option<PresencePatch>> {
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let key = format!("a2 presence {}\u{0}{ns}\u{0}{participant}", sql.schema);
    sql.query(
        client,
        "locking a participant",
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&Text(&key)],
    )
    .await?;
    let s = sql.schema;
    let stored = format!(
        "SELECT field, at, expires_at FROM {s}.presence WHERE ns = $1 AND participant = $2"
    );
    let who: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&Text(&ns), &Text(&participant)];
    let found = sql.query(client, "reading presence", &stored, &who).await?;
    let expires_at = validate::expiry(now, meta.ttl_ms);
    let upsert = format!(
        "INSERT INTO {s}.presence (ns, participant, field, value, seen, at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (ns, participant, field) DO UPDATE SET value = excluded.value,
            seen = excluded.seen, at = excluded.at, expires_at = excluded.expires_at"
    );
    let delete =
        format!("DELETE FROM {s}.presence WHERE ns = $1 AND participant = $2 AND field = $3");
    let mut applied = BTreeMap::new();
    for (field, value) in values {
        let existing = found
            .iter()
            .find(|row| text(row, 0) == field)
            .map(|row| (row.get(1), row.get(2)));
        if !rules::presence::applies(existing, meta.at, now) {
            continue;
        }
        match &value {
            None => {
                let key = [Text(&ns), Text(&participant), Text(&field)];
                sql.query(
                    client,
                    "removing presence",
                    &delete,
                    &[&key[0], &key[1], &key[2]],
                )
                .await?;
            }
            Some(value) => {
                let text = value.to_string();
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
                    &Text(&ns),
                    &Text(&participant),
                    &Text(&field),
                    &text,
                    &meta.seen,
                    &meta.at,
                    &expires_at,
                ];
                sql.query(client, "writing presence", &upsert, &params)
                    .await?;
            }
        }
        applied.insert(field, value);
    }
    if applied.is_empty() {
        return Ok(None);
    }
    let patch = PresencePatch {
        participant,
        values: applied,
        seen: meta.seen,
        at: meta.at,
    };
    on.notices.presence(&ns, &patch);
    Ok(Some(patch))
}

/// P3: the live entries of `ns` by participant then field; the expired
/// ones are deleted on the way.
pub(crate) async fn read(on: On<'_, impl Conn>, ns: String) -> Result<Vec<PresenceEntry>> {
    validate::name("namespace", &ns)?;
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let s = sql.schema;
    let prune = format!("DELETE FROM {s}.presence WHERE ns = $1 AND expires_at <= $2");
    sql.query(client, "pruning presence", &prune, &[&Text(&ns), &now])
        .await?;
    let live = format!(
        "SELECT participant, field, value, seen, at, expires_at FROM {s}.presence
         WHERE ns = $1 ORDER BY participant, field"
    );
    let rows = sql
        .query(client, "reading presence", &live, &[&Text(&ns)])
        .await?;
    rows.iter()
        .map(|row| {
            let value: String = row.get(2);
            Ok(PresenceEntry {
                participant: text(row, 0),
                field: text(row, 1),
                value: serde_json::from_str(&value)
                    .map_err(|e| corrupt(format!("a presence value of {ns:?} is not JSON: {e}")))?,
                seen: row.get(3),
                at: row.get(4),
                expires_at: row.get(5),
            })
        })
        .collect()
}
