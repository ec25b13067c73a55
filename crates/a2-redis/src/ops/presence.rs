//! Presence (P1, P2, P3): `lua/presence_set.lua`, `lua/presence_read.lua`.

use a2_core::{Error, PresenceEntry, PresenceMeta, Result};
use redis::Value;
use serde_json::Value as Json;
use std::collections::BTreeMap;

use crate::lua::SessionScript;

use super::Args;
use crate::codec::{self, broken};
use crate::layout::encode as enc;

pub(crate) static SET: SessionScript = crate::lua::session_script!("presence_set");
pub(crate) static READ: SessionScript = crate::lua::session_script!("presence_read");

/// The JSON a presence entry is stored as, after `{at}|{expires_at}|`.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredPresence {
    participant: String,
    field: String,
    value: Json,
    seen: i64,
}

pub(crate) fn encode_set(
    channel: &str,
    participant: &str,
    values: &BTreeMap<String, Option<Json>>,
    meta: &PresenceMeta,
) -> Result<Args> {
    let head = format!(
        "{{\"participant\":{},\"seen\":{},\"at\":{},\"values\":{{",
        Json::from(participant),
        meta.seen,
        meta.at
    );
    let mut args = Args::default();
    args.s("channel", channel)
        .n("ttl", a2_core::validate::effective_ttl(meta.ttl_ms))
        .n("at", meta.at)
        .s("head", &head);
    for (field, value) in values {
        let stored = match value {
            Some(value) => serde_json::to_string(&StoredPresence {
                participant: participant.to_owned(),
                field: field.clone(),
                value: value.clone(),
                seen: meta.seen,
            })
            .map_err(|e| Error::invalid(format!("presence value: {e}")))?,
            None => String::new(),
        };
        let fragment = format!(
            "{}:{}",
            Json::from(field.as_str()),
            value.as_ref().map_or("null".to_owned(), Json::to_string)
        );
        args.s("fields", format!("{}:{}", enc(participant), enc(field)))
            .s("fields", stored)
            .s("fields", fragment);
    }
    Ok(args)
}

/// The positions (1-based) of the fields that applied.
pub(crate) fn decode_set(reply: Value) -> Result<Vec<u64>> {
    codec::indexes(reply)
}

pub(crate) fn encode_read() -> Args {
    Args::default()
}

/// The live entries, by participant then field.
pub(crate) fn decode_read(reply: Value) -> Result<Vec<PresenceEntry>> {
    let mut entries = codec::array(reply)?
        .into_iter()
        .map(|v| decode_entry(&codec::string(v)?))
        .collect::<Result<Vec<_>>>()?;
    entries.sort_by(|a, b| (&a.participant, &a.field).cmp(&(&b.participant, &b.field)));
    Ok(entries)
}

fn decode_entry(stored: &str) -> Result<PresenceEntry> {
    let mut parts = stored.splitn(3, '|');
    let (Some(at), Some(expires), Some(json)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(broken("presence entry"));
    };
    let entry: StoredPresence =
        serde_json::from_str(json).map_err(|e| broken(format!("presence entry: {e}")))?;
    Ok(PresenceEntry {
        participant: entry.participant,
        field: entry.field,
        value: entry.value,
        seen: entry.seen,
        at: at.parse().map_err(|_| broken("presence at"))?,
        expires_at: expires.parse().map_err(|_| broken("presence expiry"))?,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn headers_match_encoders() {
        let values = BTreeMap::from([("f".to_owned(), Some(json!(1))), ("g".to_owned(), None)]);
        let meta = PresenceMeta {
            seen: 1,
            at: 2,
            ttl_ms: 3,
        };
        let args = encode_set("c", "p", &values, &meta).unwrap();
        crate::lua::header::check_session(&SET, &args.names);
        let args = encode_read();
        crate::lua::header::check_session(&READ, &args.names);
    }
}
