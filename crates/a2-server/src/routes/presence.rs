//! Presence: read a namespace, set a participant's fields.

use a2_core::PresenceMeta;

use crate::auth::{CanAppend, CanRead};
use crate::error::{ApiResult, Json, Path};
use crate::model::*;

/// The live entries of a namespace (P3).
#[utoipa::path(
    get,
    path = "/v1/presence/{ns}",
    params(("ns" = String, Path, description = "The namespace, usually a session id")),
    security(("bearer" = ["read"])),
    responses((status = 200, description = "Live entries", body = PresenceResponse))
)]
pub(crate) async fn read(
    CanRead(state): CanRead,
    Path(ns): Path<String>,
) -> ApiResult<Json<PresenceResponse>> {
    a2_core::validate::name("namespace", &ns)?;
    let entries = state.store.presence_read(&ns).await?;
    Ok(Json(entries.into()))
}

/// Sets a participant's fields: per field, last writer wins by `at`; null
/// deletes (P1); entries expire `ttl_ms` after the store's now (P2).
#[utoipa::path(
    put,
    path = "/v1/presence/{ns}/{participant}",
    params(
        ("ns" = String, Path, description = "The namespace"),
        ("participant" = String, Path, description = "The participant")
    ),
    request_body = PresenceSetBody,
    security(("bearer" = ["append"])),
    responses((status = 200, description = "What applied", body = PresenceSetResponse))
)]
pub(crate) async fn set(
    CanAppend(state): CanAppend,
    Path((ns, participant)): Path<(String, String)>,
    Json(body): Json<PresenceSetBody>,
) -> ApiResult<Json<PresenceSetResponse>> {
    let meta = PresenceMeta {
        seen: body.seen,
        at: body.at.unwrap_or_else(|| state.store.clock().now_ms()),
        ttl_ms: body.ttl_ms,
    };
    let patch = state
        .store
        .presence_set(&ns, &participant, body.values, meta)
        .await?;
    Ok(Json(PresenceSetResponse {
        patch: patch.map(Into::into),
    }))
}
