//! The HTTP routes of subscriptions and the JWKS.

use std::collections::HashMap;
use std::net::IpAddr;

use a2_core::{AppendOptions, ErrorCode};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::bodies::{
    StreamsRequest, SubscriptionPath, SubscriptionRequest, SubscriptionType, Typed, invalid,
};
use crate::auth::{CanAdmin, CanRead};
use crate::error::{ApiError, ApiResult, ErrorBody, Path};
use crate::routes::streams::text;
use crate::state::AppState;
use crate::streams::RESERVED;
use crate::streams::subscriptions::fold::{Change, Kind, Spec, Sub, acked_offset};
use crate::streams::subscriptions::wake::failing;
use crate::streams::subscriptions::{decide, error, keys, load, not_found, session_of, tail};

/// Shortest, default and longest lease of a wake.
const MIN_LEASE_MS: u64 = 1_000;
const DEFAULT_LEASE_MS: u64 = 30_000;
const MAX_LEASE_MS: u64 = 600_000;

pub(crate) fn conflict(code: &'static str, message: impl Into<String>) -> ApiError {
    error(StatusCode::CONFLICT, code, message)
}

/// A path as subscriptions name streams: without leading or trailing `/`.
pub(crate) fn normalize(path: &str) -> String {
    path.trim_matches('/').to_owned()
}

/// The server's URL as the request reached it.
fn base_of(headers: &HeaderMap) -> String {
    let host = text(headers, header::HOST.as_str()).unwrap_or("localhost");
    format!("http://{host}")
}

/// The subscription a `PUT` asks for, checked beyond its shape.
fn spec_of(request: SubscriptionRequest) -> Result<Spec, ApiError> {
    let kind = match request.kind {
        SubscriptionType::Webhook => Kind::Webhook,
        SubscriptionType::PullWake => Kind::PullWake,
    };
    let non_empty = |text: Option<String>| text.filter(|t| !t.is_empty());
    let pattern = non_empty(request.pattern).map(|p| normalize(&p));
    let mut streams = request
        .streams
        .unwrap_or_default()
        .into_iter()
        .map(|s| non_empty(Some(s)).map(|s| normalize(&s)))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| invalid("streams must hold non-empty strings only"))?;
    streams.sort();
    streams.dedup();
    if pattern.is_none() && streams.is_empty() {
        return Err(invalid("give a pattern, streams, or both"));
    }
    let lease_ttl_ms = match request.lease_ttl_ms {
        None => DEFAULT_LEASE_MS,
        Some(ms) if (MIN_LEASE_MS..=MAX_LEASE_MS).contains(&ms) => ms,
        Some(_) => {
            return Err(invalid(format!(
                "lease_ttl_ms must be an integer from {MIN_LEASE_MS} to {MAX_LEASE_MS}"
            )));
        }
    };
    let webhook = match kind {
        Kind::Webhook => Some(
            non_empty(request.webhook.map(|w| w.url))
                .ok_or_else(|| invalid("a webhook subscription needs webhook.url"))?,
        ),
        Kind::PullWake => None,
    };
    let wake_stream = non_empty(request.wake_stream).map(|s| normalize(&s));
    if kind == Kind::PullWake && wake_stream.is_none() {
        return Err(invalid("a pull-wake subscription needs wake_stream"));
    }
    Ok(Spec {
        kind,
        pattern,
        streams,
        webhook,
        wake_stream,
        lease_ttl_ms,
        description: request.description,
    })
}

/// Refuses a webhook URL that is not `https` to a public host, or `http`
/// to loopback (for development).
pub(crate) fn check_webhook(url: &str) -> Result<(), ApiError> {
    let rejected = |why: &str| {
        error(
            StatusCode::BAD_REQUEST,
            "WEBHOOK_URL_REJECTED",
            format!("webhook URL {url:?}: {why}"),
        )
    };
    let parsed = reqwest::Url::parse(url).map_err(|_| rejected("not a URL"))?;
    let host = parsed.host_str().ok_or_else(|| rejected("no host"))?;
    let ip: Option<IpAddr> = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok();
    let localhost = host.eq_ignore_ascii_case("localhost");
    let loopback = localhost || ip.is_some_and(|ip| ip.is_loopback());
    match parsed.scheme() {
        "http" if loopback => Ok(()),
        "http" => Err(rejected("http is for loopback hosts only; use https")),
        "https" if localhost => Err(rejected("use http for localhost")),
        "https" => match ip {
            Some(IpAddr::V4(ip))
                if ip.is_private()
                    || ip.is_loopback()
                    || ip.is_link_local()
                    || ip.is_unspecified()
                    || ip.octets()[0] == 0 =>
            {
                Err(rejected("a private or link-local host"))
            }
            Some(IpAddr::V6(_)) => Err(rejected("IPv6 hosts are not accepted")),
            _ => Ok(()),
        },
        _ => Err(rejected("the scheme must be https")),
    }
}

fn iso(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// A subscription as the API shows it.
fn shown(state: &AppState, sub: &Sub) -> Value {
    let mut out = json!({
        "id": sub.id,
        "subscription_id": sub.id,
        "type": sub.spec.kind,
        "streams": sub.links.iter().map(|(path, link)| json!({
            "path": path,
            "link_type": if link.explicit { "explicit" } else { "glob" },
            "acked_offset": acked_offset(link.acked),
        })).collect::<Vec<_>>(),
        "lease_ttl_ms": sub.spec.lease_ttl_ms,
        "created_at": iso(sub.created_at),
        "status": if failing(&state.streams, &sub.id) { "failed" } else { "active" },
    });
    let fields = [
        ("pattern", sub.spec.pattern.clone().map(Value::from)),
        ("wake_stream", sub.spec.wake_stream.clone().map(Value::from)),
        ("description", sub.spec.description.clone().map(Value::from)),
        (
            "webhook",
            sub.spec.webhook.as_ref().map(|url| {
                json!({
                    "url": url,
                    "signing": {
                        "alg": "ed25519",
                        "kid": state.streams.subscriptions.signer.kid(),
                        "jwks_url": format!("{}/v1/stream/{RESERVED}jwks.json", sub.base),
                    },
                })
            }),
        ),
    ];
    for (name, value) in fields {
        if let Some(value) = value {
            out[name] = value;
        }
    }
    out
}

#[utoipa::path(
    put,
    path = "/v1/stream/__ds/subscriptions/{id}",
    params(SubscriptionPath),
    request_body = super::bodies::SubscriptionRequest,
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "The subscription exists with this configuration", body = serde_json::Value),
        (status = 201, description = "Created", body = serde_json::Value),
        (status = 400, description = "Bad input (INVALID_REQUEST), or a webhook URL refused (WEBHOOK_URL_REJECTED)", body = ErrorBody),
        (status = 409, description = "The subscription exists with another configuration (SUBSCRIPTION_ALREADY_EXISTS)", body = ErrorBody),
    )
)]
/// `PUT /v1/stream/__ds/subscriptions/{id}`: creates the subscription
/// (201), or confirms one with the same configuration (200).
pub(crate) async fn confirm(
    CanAdmin(state): CanAdmin,
    Path(SubscriptionPath { id }): Path<SubscriptionPath>,
    headers: HeaderMap,
    Typed(request): Typed<SubscriptionRequest>,
) -> ApiResult<Response> {
    let spec = spec_of(request)?;
    a2_core::validate::session_id(&session_of(&id))
        .map_err(|e| invalid(format!("subscription id {id:?}: {e}")))?;
    if let Some(url) = &spec.webhook {
        check_webhook(url)?;
        state
            .streams
            .subscriptions
            .signer
            .publish(&state.streams)
            .await?;
    }
    for _ in 0..2 {
        if let Some(sub) = load(&state.streams, &id).await? {
            return if sub.spec == spec {
                Ok((StatusCode::OK, Json(shown(&state, &sub))).into_response())
            } else {
                Err(conflict(
                    "SUBSCRIPTION_ALREADY_EXISTS",
                    format!("subscription {id:?} exists with another configuration"),
                ))
            };
        }
        let mut links = Vec::new();
        for path in &spec.streams {
            links.push((path.clone(), false, Some(tail(&state.streams, path).await?)));
        }
        if let Some(pattern) = &spec.pattern {
            for (path, tail) in
                crate::streams::subscriptions::wake::matching(&state.streams, pattern).await?
            {
                links.push((path, true, Some(tail)));
            }
        }
        let created = Change::Created {
            spec: spec.clone(),
            base: base_of(&headers),
            at: state.store.clock().now_ms(),
            links,
        };
        let mut options = AppendOptions::new();
        options.if_frontier = Some(0);
        match state
            .store
            .append_with(&session_of(&id), vec![created.event()], options)
            .await
        {
            Ok(_) => {
                let sub = load(&state.streams, &id)
                    .await?
                    .ok_or_else(|| not_found(&id))?;
                return Ok((StatusCode::CREATED, Json(shown(&state, &sub))).into_response());
            }
            // Another request created it meanwhile: confirm against it.
            Err(e) if e.code() == ErrorCode::FrontierMoved => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::from(a2_core::Error::unavailable(format!(
        "subscription {id:?} changed while being created; try again"
    ))))
}

#[utoipa::path(
    get,
    path = "/v1/stream/__ds/subscriptions/{id}",
    params(SubscriptionPath),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The subscription, its streams and what each acknowledged", body = serde_json::Value),
        (status = 404, description = "No such subscription (SUBSCRIPTION_NOT_FOUND)", body = ErrorBody),
    )
)]
/// `GET /v1/stream/__ds/subscriptions/{id}`.
pub(crate) async fn show(
    CanRead(state): CanRead,
    Path(SubscriptionPath { id }): Path<SubscriptionPath>,
) -> ApiResult<Json<Value>> {
    let sub = load(&state.streams, &id)
        .await?
        .ok_or_else(|| not_found(&id))?;
    Ok(Json(shown(&state, &sub)))
}

#[utoipa::path(
    delete,
    path = "/v1/stream/__ds/subscriptions/{id}",
    params(SubscriptionPath),
    security(("bearer" = ["admin"])),
    responses(
        (status = 204, description = "Deleted (or there was none)"),
    )
)]
/// `DELETE /v1/stream/__ds/subscriptions/{id}`: 204, whether it existed
/// or not.
pub(crate) async fn remove(
    CanAdmin(state): CanAdmin,
    Path(SubscriptionPath { id }): Path<SubscriptionPath>,
) -> ApiResult<StatusCode> {
    a2_core::validate::session_id(&session_of(&id))
        .map_err(|e| invalid(format!("subscription id {id:?}: {e}")))?;
    state.store.clear(&session_of(&id)).await?;
    state.streams.subscriptions.forget(&id);
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    post,
    path = "/v1/stream/__ds/subscriptions/{id}/streams",
    params(SubscriptionPath),
    request_body = super::bodies::StreamsRequest,
    security(("bearer" = ["admin"])),
    responses(
        (status = 204, description = "Linked"),
        (status = 404, description = "No such subscription (SUBSCRIPTION_NOT_FOUND)", body = ErrorBody),
    )
)]
/// `POST …/{id}/streams` with `{"streams": [...]}`: links them
/// explicitly; what they hold now is not work.
pub(crate) async fn add_streams(
    CanAdmin(state): CanAdmin,
    Path(SubscriptionPath { id }): Path<SubscriptionPath>,
    Typed(request): Typed<StreamsRequest>,
) -> ApiResult<StatusCode> {
    let streams = Some(request.streams)
        .filter(|s| !s.is_empty())
        .and_then(|items| {
            items
                .iter()
                .map(|s| (!s.is_empty()).then(|| normalize(s)))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| invalid("streams must be a non-empty array of strings"))?;
    let mut known = HashMap::new();
    for path in &streams {
        known.insert(path.clone(), tail(&state.streams, path).await?);
    }
    decide(&state.streams, &id, &known, |seen| {
        let changes = streams
            .iter()
            .filter(|path| !seen.sub.links.get(*path).is_some_and(|l| l.explicit))
            .map(|path| Change::Linked {
                path: path.clone(),
                glob: false,
                acked: match seen.sub.links.get(path) {
                    Some(link) => link.acked,
                    None => seen.tails.get(path).copied(),
                },
            })
            .collect();
        Ok((changes, ()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    delete,
    path = "/v1/stream/__ds/subscriptions/{id}/streams/{path}",
    params(
        SubscriptionPath,
        ("path" = String, Path, description = "The stream"),
    ),
    security(("bearer" = ["admin"])),
    responses(
        (status = 204, description = "Unlinked (or it was not linked)"),
        (status = 404, description = "No such subscription (SUBSCRIPTION_NOT_FOUND)", body = ErrorBody),
    )
)]
/// `DELETE …/{id}/streams/{path}`: unlinks an explicit stream.
pub(crate) async fn remove_stream(
    CanAdmin(state): CanAdmin,
    Path((id, path)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let path = normalize(&path);
    decide(&state.streams, &id, &HashMap::new(), |seen| {
        let linked = seen.sub.links.get(&path).is_some_and(|l| l.explicit);
        let changes = if linked {
            vec![Change::Unlinked { path: path.clone() }]
        } else {
            Vec::new()
        };
        Ok((changes, ()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    get,
    path = "/v1/stream/__ds/jwks.json",
    responses(
        (status = 200, description = "The public keys of webhook signatures (a JWK set)", content_type = "application/jwk-set+json", body = serde_json::Value),
    )
)]
/// `GET /v1/stream/__ds/jwks.json`: the public keys webhook notifications
/// are signed with.
pub(crate) async fn jwks(State(state): State<AppState>) -> ApiResult<Response> {
    let keys = keys::jwks(&state.streams).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/jwk-set+json"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        keys.to_string(),
    )
        .into_response())
}
