//! The shapes of the subscription API's bodies, for the OpenAPI document
//! (the handlers read the JSON themselves, to answer the protocol's own
//! error codes).

#![allow(dead_code)]

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How a subscription tells of work.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum SubscriptionType {
    Webhook,
    PullWake,
}

/// A webhook target.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct WebhookTarget {
    /// `https` to a public host, or `http` to loopback.
    url: String,
}

/// A subscription to create or confirm.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct SubscriptionRequest {
    #[serde(rename = "type")]
    kind: SubscriptionType,
    /// Streams to link by glob (`*` one segment, `**` any).
    pattern: Option<String>,
    /// Streams to link by name.
    streams: Option<Vec<String>>,
    /// A webhook subscription's target.
    webhook: Option<WebhookTarget>,
    /// A pull-wake subscription's wake stream (a JSON stream).
    wake_stream: Option<String>,
    /// A wake's lease, 1 000 to 600 000 ms (default 30 000).
    lease_ttl_ms: Option<u64>,
    description: Option<String>,
}

/// Streams to link explicitly.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct StreamsRequest {
    streams: Vec<String>,
}

/// A pull-wake worker's claim.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct ClaimRequest {
    worker: String,
}

/// An offset acknowledged.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct Ack {
    stream: String,
    offset: String,
}

/// A consumer's report on its wake.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct WakeReport {
    wake_id: Option<String>,
    generation: Option<u64>,
    acks: Option<Vec<Ack>>,
    /// `true` ends the wake.
    done: Option<bool>,
}

/// The answer to an acknowledgement.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct Acknowledged {
    ok: bool,
    /// Whether a new wake started at once (more work came).
    next_wake: bool,
}
