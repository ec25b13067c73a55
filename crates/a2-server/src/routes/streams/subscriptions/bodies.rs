//! The bodies of the subscription API: the handlers take their requests
//! typed ([`Typed`]), and the OpenAPI document is generated from these same
//! types, so the two cannot drift.

use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use axum::http::StatusCode;

use crate::error::{ApiError, Body};
use crate::streams::subscriptions::error;

/// The protocol's 400 for a request the subscription API refuses.
pub(crate) fn invalid(message: impl Into<String>) -> ApiError {
    error(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
}

/// A JSON request body read as a `T`; an empty body reads as `{}`. A body
/// that is not JSON, or not a `T`, is the protocol's 400
/// `INVALID_REQUEST`, with what is wrong in its message.
pub(crate) struct Typed<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Typed<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let body = Body::from_request(req, state).await?;
        let json: &[u8] = if body.is_empty() { b"{}" } else { &body };
        serde_json::from_slice(json)
            .map(Typed)
            .map_err(|e| invalid(format!("the body is not a valid request: {e}")))
    }
}

/// The path of a subscription's operations
/// (`/v1/stream/__ds/subscriptions/{id}…`).
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct SubscriptionPath {
    /// The subscription
    pub id: String,
}

/// How a subscription tells of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum SubscriptionType {
    Webhook,
    PullWake,
}

/// A webhook target.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct WebhookTarget {
    /// `https` to a public host, or `http` to loopback.
    pub url: String,
}

/// A subscription to create or confirm.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct SubscriptionRequest {
    #[serde(rename = "type")]
    pub kind: SubscriptionType,
    /// Streams to link by glob (`*` one segment, `**` any).
    pub pattern: Option<String>,
    /// Streams to link by name.
    pub streams: Option<Vec<String>>,
    /// A webhook subscription's target.
    pub webhook: Option<WebhookTarget>,
    /// A pull-wake subscription's wake stream (a JSON stream).
    pub wake_stream: Option<String>,
    /// A wake's lease, 1 000 to 600 000 ms (default 30 000).
    pub lease_ttl_ms: Option<u64>,
    pub description: Option<String>,
}

/// Streams to link explicitly.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct StreamsRequest {
    pub streams: Vec<String>,
}

/// A pull-wake worker's claim.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct ClaimRequest {
    pub worker: String,
}

/// An offset acknowledged.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct Ack {
    /// The stream (`path` is read as the same).
    #[serde(alias = "path")]
    pub stream: String,
    pub offset: String,
}

/// A consumer's report on its wake.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct WakeReport {
    pub wake_id: Option<String>,
    pub generation: Option<u64>,
    pub acks: Option<Vec<Ack>>,
    /// `true` ends the wake.
    pub done: Option<bool>,
}

/// The answer to an acknowledgement.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct Acknowledged {
    pub ok: bool,
    /// Whether a new wake started at once (more work came).
    pub next_wake: bool,
}
