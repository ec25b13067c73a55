//! The HTTP face of the Durable Streams engine ([`crate::streams`], whose
//! docs give the mapping): the handlers of `/v1/stream/{session}` and of
//! the protocol's reserved subscription API, and the protocol's headers.

mod create_fork;
pub(crate) mod producer_headers;
pub(crate) mod read;
mod sse;
pub(crate) mod subscriptions;
pub(crate) mod write;

use axum::http::header::{AsHeaderName, HeaderName};
use axum::http::{HeaderMap, HeaderValue, header};

use serde::Deserialize;
use utoipa::IntoParams;

use crate::state::AppState;
use producer_headers as producers;

pub(crate) use read::{head, read};
pub(crate) use write::{append, create, delete};

pub(crate) const NEXT_OFFSET: HeaderName = HeaderName::from_static("stream-next-offset");
pub(crate) const UP_TO_DATE: HeaderName = HeaderName::from_static("stream-up-to-date");
pub(crate) const CURSOR: HeaderName = HeaderName::from_static("stream-cursor");
pub(crate) const CLOSED: HeaderName = HeaderName::from_static("stream-closed");
pub(crate) const TTL: HeaderName = HeaderName::from_static("stream-ttl");
pub(crate) const EXPIRES_AT: HeaderName = HeaderName::from_static("stream-expires-at");
pub(crate) const SEQ: HeaderName = HeaderName::from_static("stream-seq");
pub(crate) const FORKED_FROM: HeaderName = HeaderName::from_static("stream-forked-from");
pub(crate) const FORK_OFFSET: HeaderName = HeaderName::from_static("stream-fork-offset");
pub(crate) const FORK_SUB_OFFSET: HeaderName = HeaderName::from_static("stream-fork-sub-offset");
pub(crate) const SSE_ENCODING: HeaderName = HeaderName::from_static("stream-sse-data-encoding");
/// a2's own request header: `A2-Work: true` on a `PUT` makes what is
/// appended to the stream work for a2's handlers.
pub(crate) const WORK: HeaderName = HeaderName::from_static("a2-work");

/// Response headers of the protocol a page of another origin may read.
pub(crate) const EXPOSED: [HeaderName; 12] = [
    producers::PRODUCER_EPOCH,
    producers::PRODUCER_SEQ,
    producers::EXPECTED_SEQ,
    producers::RECEIVED_SEQ,
    NEXT_OFFSET,
    UP_TO_DATE,
    CURSOR,
    CLOSED,
    TTL,
    EXPIRES_AT,
    SSE_ENCODING,
    header::LOCATION,
];

/// Request headers of the protocol a page of another origin may send.
pub(crate) const ALLOWED: [HeaderName; 11] = [
    WORK,
    producers::PRODUCER_ID,
    producers::PRODUCER_EPOCH,
    producers::PRODUCER_SEQ,
    SEQ,
    TTL,
    EXPIRES_AT,
    CLOSED,
    FORKED_FROM,
    FORK_OFFSET,
    FORK_SUB_OFFSET,
];

/// The path of a stream's operations (`/v1/stream/{session}`): what the
/// handlers read and the OpenAPI document describes.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct StreamPath {
    /// The stream (a session id; may hold `/`)
    pub session: String,
}

/// A header's text, if present and readable.
pub(crate) fn text(headers: &HeaderMap, name: impl AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub(crate) fn header_value(text: &str) -> HeaderValue {
    // Offsets, cursors and content types the server checked; a value that
    // cannot be a header is left empty rather than failing the response.
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Sets a flag header of the protocol (`Stream-Closed`,
/// `Stream-Up-To-Date`) to `true` when `on`; an unset flag is left out.
pub(crate) fn set_flag(headers: &mut HeaderMap, name: HeaderName, on: bool) {
    if on {
        headers.insert(name, HeaderValue::from_static("true"));
    }
}

/// The request's content type, if it names one (`type/subtype`).
pub(crate) fn content_type(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?.trim();
    let (kind, sub) = crate::streams::bare_media_type(value).split_once('/')?;
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    (token(kind) && token(sub)).then_some(value)
}

/// Whether the request carries any of the protocol's writer headers
/// (`Producer-*`, `Stream-*`): most appends carry none, and a look at the
/// names spares looking each one up.
pub(crate) fn has_protocol_headers(headers: &HeaderMap) -> bool {
    headers.keys().any(|name| {
        let name = name.as_str();
        name.starts_with("producer-") || name.starts_with("stream-")
    })
}

/// The cursor of a response: the current 20-second interval, moved past
/// the one the client echoed so a CDN never collapses a request into its
/// own response.
pub(crate) fn cursor(state: &AppState, echoed: Option<&str>) -> String {
    const INTERVAL_S: i64 = 20;
    let now = state.store.clock().now_ms() / 1000 / INTERVAL_S;
    match echoed.and_then(|c| c.parse::<i64>().ok()) {
        Some(c) if c >= now => (c + 1).to_string(),
        _ => now.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_are_checked_and_compared_by_media_type() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            "Text/Plain; charset=utf-8".parse().unwrap(),
        );
        assert_eq!(content_type(&h), Some("Text/Plain; charset=utf-8"));
        assert_eq!(
            crate::streams::media_type("Text/Plain; charset=utf-8"),
            "text/plain"
        );
        h.insert(header::CONTENT_TYPE, "nonsense".parse().unwrap());
        assert_eq!(content_type(&h), None);
    }
}
