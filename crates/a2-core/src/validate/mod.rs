//! Input checks every store runs before touching state, so that bad input
//! gives the same [`Error::InvalidArgument`] on every backend and never
//! writes anything (A12).

use std::collections::BTreeMap;

use serde_json::Value;

mod batch;

pub(crate) use batch::{Payloads, encode_batch, encode_complete_request};
pub use batch::{batch, complete_request, payload_size};

use crate::error::{Error, Result};
use crate::model::{
    AppendClaim, AppendOptions, AppendRequest, CancelRequest, ClaimRequest, FailRequest, Lease,
    NewEvent, PresenceMeta, ReleaseRequest, RenewRequest, SnapshotWrite,
};

/// Longest session id, in bytes.
pub const MAX_SESSION_ID_BYTES: usize = 1024;
/// Longest event type, in bytes.
pub const MAX_TYPE_BYTES: usize = 256;
/// Longest lane name, in bytes.
pub const MAX_LANE_BYTES: usize = 1024;
/// Longest cancel reason, in bytes (CN4).
pub const MAX_REASON_BYTES: usize = 1024;
/// Longest event id, in bytes.
pub const MAX_EVENT_ID_BYTES: usize = 256;
/// Longest reducer, namespace, participant, field or holder name, in bytes.
pub const MAX_NAME_BYTES: usize = 1024;
/// Deepest nesting of a stored JSON value (a payload, a snapshot state, a
/// presence value), counting one level per array or object: `1` and `"x"`
/// have depth 0, `[1]` depth 1, `{"a": [1]}` depth 2 (J1).
///
/// Every backend must read back what it accepted, and JSON parsers limit
/// recursion (serde_json at 128 levels, Redis's cjson at 1000), so the limit
/// sits well below them and is checked on write, the same on every store.
pub const MAX_JSON_DEPTH: usize = 64;
/// The largest page size or claim limit a call acts on (X1): a larger
/// `limit` (up to `usize::MAX`) is valid and counts as this many, on every
/// store. It bounds the work of one atomic step.
pub const MAX_LIMIT: usize = 10_000;
pub use crate::clock::{MAX_TTL_MS, effective_ttl, expiry};

/// The configurable limits of A12: `Limits::default()`, then the setters.
///
/// ```
/// let limits = a2_core::Limits::default().with_max_batch_len(100);
/// assert_eq!((limits.max_batch_len, limits.max_payload_bytes), (100, 1024 * 1024));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Most events in one append or completion (default 10 000).
    pub max_batch_len: usize,
    /// Largest payload, as compact JSON bytes (default 1 MiB).
    pub max_payload_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_batch_len: 10_000,
            max_payload_bytes: 1024 * 1024,
        }
    }
}

impl Limits {
    /// Sets the most events in one append or completion.
    pub fn with_max_batch_len(mut self, max_batch_len: usize) -> Self {
        self.max_batch_len = max_batch_len;
        self
    }

    /// Sets the largest payload, in compact JSON bytes.
    pub fn with_max_payload_bytes(mut self, max_payload_bytes: usize) -> Self {
        self.max_payload_bytes = max_payload_bytes;
        self
    }
}

/// A session id: non-empty, at most [`MAX_SESSION_ID_BYTES`].
pub fn session_id(session: &str) -> Result<()> {
    if session.is_empty() {
        return Err(Error::invalid("session id must not be empty"));
    }
    if session.len() > MAX_SESSION_ID_BYTES {
        return Err(Error::invalid(format!(
            "session id is {} bytes, the limit is {MAX_SESSION_ID_BYTES}",
            session.len()
        )));
    }
    Ok(())
}

/// A caller-chosen name (`what` says which, for the message): non-empty, at
/// most [`MAX_NAME_BYTES`].
pub fn name(what: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{what} must not be empty")));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(format!(
            "{what} is {} bytes, the limit is {MAX_NAME_BYTES}",
            value.len()
        )));
    }
    Ok(())
}

/// A page size or claim limit: at least 1.
pub fn limit(what: &str, value: usize) -> Result<()> {
    if value == 0 {
        return Err(Error::invalid(format!("{what} must be at least 1")));
    }
    Ok(())
}

/// The limit a call acts on (X1): `value` capped at [`MAX_LIMIT`].
///
/// ```
/// use a2_core::validate::{MAX_LIMIT, effective_limit};
/// assert_eq!(effective_limit(5), 5);
/// assert_eq!(effective_limit(usize::MAX), MAX_LIMIT);
/// ```
pub fn effective_limit(value: usize) -> usize {
    value.min(MAX_LIMIT)
}

/// A page's `limit`: at least 1 ([`limit`]), and what a store reads of it
/// ([`effective_limit`]).
pub fn page_limit(value: usize) -> Result<usize> {
    limit("limit", value)?;
    Ok(effective_limit(value))
}

/// A JSON value nested at most [`MAX_JSON_DEPTH`] levels (J1). `what` names
/// the value for the message. The walk uses its own stack, so a value of
/// any depth is checked without deep recursion.
///
/// ```
/// use a2_core::validate::{MAX_JSON_DEPTH, json_depth};
/// let mut deep = serde_json::json!(1);
/// for _ in 0..MAX_JSON_DEPTH {
///     deep = serde_json::json!([deep]);
/// }
/// assert!(json_depth("payload", &deep).is_ok());
/// assert!(json_depth("payload", &serde_json::json!({ "a": deep })).is_err());
/// ```
pub fn json_depth(what: &str, value: &Value) -> Result<()> {
    if nested_too_deep(value) {
        return Err(Error::invalid(format!(
            "{what} is nested more than {MAX_JSON_DEPTH} levels deep"
        )));
    }
    Ok(())
}

/// Whether `value` nests more than [`MAX_JSON_DEPTH`] levels. Only arrays
/// and objects are walked, with a stack of their own, so a value of any
/// depth is checked without deep recursion; scalars cost nothing.
fn nested_too_deep(value: &Value) -> bool {
    let container = |v: &Value| v.is_array() || v.is_object();
    if !container(value) {
        return false;
    }
    let mut stack: Vec<(&Value, usize)> = vec![(value, 1)];
    while let Some((value, depth)) = stack.pop() {
        if depth > MAX_JSON_DEPTH {
            return true;
        }
        match value {
            Value::Array(items) => stack.extend(
                items
                    .iter()
                    .filter(|c| container(c))
                    .map(|c| (c, depth + 1)),
            ),
            Value::Object(map) => stack.extend(
                map.values()
                    .filter(|c| container(c))
                    .map(|c| (c, depth + 1)),
            ),
            _ => {}
        }
    }
    false
}

/// A lease: a ttl of at least 1 ms (an absolute expiry is checked against
/// the clock by the operation that uses it).
pub fn lease(lease: Lease) -> Result<()> {
    if lease == Lease::Ttl(0) {
        return Err(Error::invalid("lease ttl must be at least 1 ms"));
    }
    Ok(())
}

/// The expiry `lease` gives a claim at `now` (C2, AC2): after `now`, else
/// `InvalidArgument`.
pub fn claim_expiry(lease: Lease, now: crate::Millis) -> Result<crate::Millis> {
    let expires_at = lease.expires_at(now);
    if expires_at <= now {
        return Err(Error::invalid(format!(
            "lease expires at {expires_at}, not after the store's now {now}"
        )));
    }
    Ok(expires_at)
}

/// A session's expiry (EX1), checked at store time `now` (X2): a ttl of at
/// least 1 ms, and an `expires_at` after `now` and at most 100 years
/// ahead. Returns it with its ttl capped at 100 years.
///
/// ```
/// use a2_core::Expiry;
/// use a2_core::validate::{MAX_TTL_MS, session_expiry};
///
/// assert_eq!(session_expiry(Expiry::ttl(u64::MAX), 0)?.ttl_ms, Some(MAX_TTL_MS));
/// assert!(session_expiry(Expiry::ttl(0), 0).is_err());
/// assert!(session_expiry(Expiry::at(1_000), 1_000).is_err());
/// assert!(session_expiry(Expiry::at(1_001), 1_000).is_ok());
/// # Ok::<(), a2_core::Error>(())
/// ```
pub fn session_expiry(expiry: crate::Expiry, now: crate::Millis) -> Result<crate::Expiry> {
    if expiry.ttl_ms == Some(0) {
        return Err(Error::invalid("a session's ttl must be at least 1 ms"));
    }
    if let Some(at) = expiry.expires_at {
        let latest = self::expiry(now, MAX_TTL_MS);
        if at <= now {
            return Err(Error::invalid(format!(
                "a session's expires_at {at} is not after the store's now {now}"
            )));
        }
        if at > latest {
            return Err(Error::invalid(format!(
                "a session's expires_at {at} is more than 100 years ({MAX_TTL_MS} ms) after the store's now {now}"
            )));
        }
    }
    Ok(crate::Expiry {
        ttl_ms: expiry.ttl_ms.map(effective_ttl),
        expires_at: expiry.expires_at,
    })
}

/// A claim (§3): session id, holder, lease and limit, in that order.
pub fn claim_request(request: &ClaimRequest) -> Result<()> {
    session_id(&request.session)?;
    name("holder", &request.holder)?;
    lease(request.lease)?;
    limit("limit", request.limit)
}

/// The claim of an `append_and_claim` (AC1): the holder's name and the
/// lease (a limit may be 0, AC4).
/// What an append must be before it reaches a store: a session id, a valid
/// claim if any (AC1), and events when it closes its session (CL6).
/// Returns what a store applies; the batch's limits (A12), the expiry
/// (EX1) and the due times (DL1) are the store's to check.
pub fn append_request(
    session: &str,
    events: Vec<NewEvent>,
    options: AppendOptions,
) -> Result<AppendRequest<'_>> {
    session_id(session)?;
    if let Some(claim) = &options.claim {
        append_claim(claim)?;
    }
    append_close(events.len(), options.close)?;
    Ok(AppendRequest {
        session,
        events,
        options,
    })
}

/// An append's claim (AC1): a holder and a lease.
pub fn append_claim(claim: &AppendClaim) -> Result<()> {
    name("holder", &claim.holder)?;
    lease(claim.lease)
}

/// CL6: an append that also closes its session brings events (a close
/// alone is `close_session`'s, CL1).
pub fn append_close(events: usize, close: bool) -> Result<()> {
    if close && events == 0 {
        return Err(Error::invalid(
            "an append that closes its session needs events; close_session closes without",
        ));
    }
    Ok(())
}

/// A renewal (RN2): session id, holder and lease, in that order.
pub fn renew_request(request: &RenewRequest) -> Result<()> {
    session_id(&request.session)?;
    name("holder", &request.holder)?;
    lease(request.lease)
}

/// A failure (F6): session id, then `max_failures` of at least 1.
pub fn fail_request(request: &FailRequest) -> Result<()> {
    session_id(&request.session)?;
    limit(
        "max_failures",
        usize::try_from(request.max_failures).unwrap_or(usize::MAX),
    )
}

/// A cancel (CN4): session id, then the reason's length. Returns what a
/// store applies, an empty reason made none (CN1).
pub fn cancel_request(
    session: &str,
    index: u64,
    reason: Option<String>,
) -> Result<CancelRequest<'_>> {
    session_id(session)?;
    if let Some(reason) = &reason
        && reason.len() > MAX_REASON_BYTES
    {
        return Err(Error::invalid(format!(
            "cancel reason is {} bytes, the limit is {MAX_REASON_BYTES}",
            reason.len()
        )));
    }
    let reason = reason.filter(|r| !r.is_empty());
    Ok(CancelRequest {
        session,
        index,
        reason,
    })
}

/// A release (RL1): session id, then holder.
pub fn release_request(request: &ReleaseRequest) -> Result<()> {
    session_id(&request.session)?;
    name("holder", &request.holder)
}

/// Snapshots to write (S2, J1): session id, then each reducer name and
/// state's nesting. Whether an
/// index lies beyond the frontier is for the store to check.
pub fn snapshots(session: &str, snapshots: &[SnapshotWrite]) -> Result<()> {
    session_id(session)?;
    for snapshot in snapshots {
        name("reducer", &snapshot.reducer)?;
        json_depth("snapshot state", &snapshot.state)?;
    }
    Ok(())
}

/// A presence write (P1, P2, J1): namespace, participant, each field name
/// and value's nesting, then a ttl of at least 1 ms. Empty `values` are valid (they apply nothing).
pub fn presence_set(
    namespace: &str,
    participant: &str,
    values: &BTreeMap<String, Option<Value>>,
    meta: &PresenceMeta,
) -> Result<()> {
    name("namespace", namespace)?;
    name("participant", participant)?;
    for (field, value) in values {
        name("field", field)?;
        if let Some(value) = value {
            json_depth("presence value", value)?;
        }
    }
    if meta.ttl_ms == 0 {
        return Err(Error::invalid("presence ttl must be at least 1 ms"));
    }
    exact_integer("presence at", meta.at)?;
    exact_integer("presence seen", meta.seen)?;
    Ok(())
}

/// The largest integer a double holds exactly, and every smaller one too
/// (X3): 2^53 − 1.
pub const MAX_EXACT_INTEGER: i64 = (1 << 53) - 1;

/// X3: `value` within ±[`MAX_EXACT_INTEGER`], so that a store keeping it in
/// a double (Lua, JSON numbers) compares and returns it exactly.
///
/// ```
/// use a2_core::validate::{MAX_EXACT_INTEGER, exact_integer};
/// assert!(exact_integer("at", MAX_EXACT_INTEGER).is_ok());
/// assert!(exact_integer("at", -MAX_EXACT_INTEGER).is_ok());
/// assert!(exact_integer("at", MAX_EXACT_INTEGER + 1).is_err());
/// assert!(exact_integer("at", i64::MIN).is_err());
/// ```
pub fn exact_integer(what: &str, value: i64) -> Result<()> {
    if value.unsigned_abs() > MAX_EXACT_INTEGER as u64 {
        return Err(Error::invalid(format!(
            "{what} is {value}, outside ±{MAX_EXACT_INTEGER} (X3: what a double holds exactly)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    #[test]
    fn payload_size_is_compact_json_length() {
        let v = json!({"a": [1, 2, "x"]});
        assert_eq!(payload_size(&v), serde_json::to_string(&v).unwrap().len());
    }

    #[test]
    fn presence_set_checks_names_then_ttl() {
        let meta = |ttl_ms| PresenceMeta {
            seen: 0,
            at: 0,
            ttl_ms,
        };
        let values = BTreeMap::from([(String::new(), None)]);
        let err = presence_set("ns", "ann", &values, &meta(0)).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::InvalidArgument);
        assert!(err.to_string().contains("field"), "{err}");
        let err = presence_set("ns", "ann", &BTreeMap::new(), &meta(0)).unwrap_err();
        assert!(err.to_string().contains("ttl"), "{err}");
        assert!(presence_set("ns", "ann", &BTreeMap::new(), &meta(1)).is_ok());
        assert!(presence_set("", "ann", &BTreeMap::new(), &meta(1)).is_err());
    }

    #[test]
    fn encode_batch_checks_like_batch_and_keeps_compact_json() {
        let limits = Limits::default().with_max_payload_bytes(64);
        let mut deep = json!(1);
        for _ in 0..MAX_JSON_DEPTH {
            deep = json!([deep]);
        }
        let ok = vec![
            NewEvent::new("t", json!({"b": [1, 2.5, "x\n"], "a": null})),
            NewEvent::new("t", deep.clone()),
        ];
        let texts = encode_batch(&ok, &Limits::default(), true).unwrap();
        for (position, event) in ok.iter().enumerate() {
            let text = serde_json::to_string(&event.payload).unwrap();
            assert_eq!(texts.get(position), text);
        }
        let too_deep = json!({ "a": deep });
        let too_big = json!("x".repeat(100));
        // Too deep and too big: the size is reported, as `batch` does.
        let mut too_both = json!("x".repeat(100));
        for _ in 0..=MAX_JSON_DEPTH {
            too_both = json!([too_both]);
        }
        for payload in [too_deep, too_big, too_both] {
            let events = [NewEvent::new("t", json!(1)), NewEvent::new("t", payload)];
            let plain = batch(&events, &limits, true).unwrap_err();
            let encoded = encode_batch(&events, &limits, true).unwrap_err();
            assert_eq!(plain.to_string(), encoded.to_string());
            assert_eq!(encoded.code(), crate::ErrorCode::InvalidArgument);
        }
    }

    #[test]
    fn batch_rejects_repeated_id_as_duplicate() {
        let e = NewEvent::new("t", json!(null)).id("x");
        let err = batch(&[e.clone(), e], &Limits::default(), true).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::PartialDuplicateBatch);
    }
}
