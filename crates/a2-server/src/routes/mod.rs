//! The API's routes, one module per part.
//!
//! Every handler takes its scope guard first (`CanRead`, `CanAppend`, …),
//! which hands it the router's state, so a request without the right token
//! is refused before its body is read, and its body last, so that nothing
//! is written unless the whole request is valid.

use axum::Router;
use axum::routing::{delete, get, post, put};

use crate::error::ApiError;
use crate::state::AppState;

pub(crate) mod live;
pub(crate) mod presence;
pub(crate) mod sessions;
pub(crate) mod streams;
pub(crate) mod work;

/// Response headers a browser page of another origin may read (CORS).
pub(crate) fn exposed_headers() -> impl Iterator<Item = axum::http::HeaderName> {
    std::iter::once(axum::http::header::ETAG).chain(streams::EXPOSED)
}

/// Largest page an HTTP caller may ask for.
pub(crate) const MAX_PAGE: usize = 1_000;

/// Lets the tasks an append woke on this worker thread (its session's
/// followers) run before the appending request goes on: the request wakes
/// itself and waits once, which puts it behind them in the worker's queue.
/// Their deliveries are what a live stream is measured by; the writer's
/// answer waits a few microseconds per follower instead. Unlike
/// `tokio::task::yield_now`, it does not make the worker poll for I/O
/// first (an `epoll_wait` per append).
pub(crate) async fn let_woken_run() {
    let mut waited = false;
    std::future::poll_fn(|cx| {
        if waited {
            return std::task::Poll::Ready(());
        }
        waited = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

/// A page size: `default` when absent, else 1 to [`MAX_PAGE`].
pub(crate) fn page_limit(limit: Option<usize>, default: usize) -> Result<usize, ApiError> {
    match limit {
        None => Ok(default),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::invalid(format!(
            "limit must be from 1 to {MAX_PAGE}, not {n}"
        ))),
    }
}

/// Every API route.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions", get(sessions::list))
        .route(
            "/v1/sessions/{session}",
            axum::routing::delete(sessions::clear),
        )
        .route(
            "/v1/sessions/{session}/events",
            get(sessions::read_events).post(sessions::append),
        )
        .route(
            "/v1/sessions/{session}/events/{index}/revive",
            post(sessions::revive),
        )
        .route(
            "/v1/sessions/{session}/events/{index}/cancel",
            post(sessions::cancel),
        )
        .route("/v1/sessions/{session}/close", post(sessions::close))
        .route("/v1/sessions/{session}/expiry", put(sessions::set_expiry))
        .route("/v1/sessions/{session}/trim", post(sessions::trim))
        .route("/v1/sessions/{session}/fork", post(sessions::fork))
        .route("/v1/sessions/{session}/history", get(sessions::history))
        .route("/v1/sessions/{session}/snapshots", get(sessions::snapshots))
        .route(
            "/v1/sessions/{session}/state/{reducer}",
            get(sessions::state).put(sessions::put_snapshot),
        )
        .route("/v1/sessions/{session}/live", get(live::session))
        .route("/v1/presence/{ns}", get(presence::read))
        .route("/v1/presence/{ns}/live", get(live::presence))
        .route("/v1/presence/{ns}/{participant}", put(presence::set))
        .route("/v1/work/pending", get(work::pending))
        .route("/v1/work/claim", post(work::claim))
        .route("/v1/work/renew", post(work::renew))
        .route("/v1/work/complete", post(work::complete))
        .route("/v1/work/fail", post(work::fail))
        .route("/v1/work/release", post(work::release))
        .route("/v1/work/cancellations", get(live::cancellations))
        .route(
            "/v1/stream/__ds/jwks.json",
            get(streams::subscriptions::jwks),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}",
            put(streams::subscriptions::confirm)
                .get(streams::subscriptions::show)
                .delete(streams::subscriptions::remove),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}/streams",
            post(streams::subscriptions::add_streams),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}/streams/{*path}",
            delete(streams::subscriptions::remove_stream),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}/callback",
            post(streams::subscriptions::callback),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}/claim",
            post(streams::subscriptions::claim),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}/ack",
            post(streams::subscriptions::ack),
        )
        .route(
            "/v1/stream/__ds/subscriptions/{id}/release",
            post(streams::subscriptions::release),
        )
        .route(
            "/v1/stream/{*session}",
            get(streams::read)
                .head(streams::head)
                .put(streams::create)
                .post(streams::append)
                .delete(streams::delete),
        )
        .route("/metrics", get(metrics))
}

/// Prometheus text.
#[utoipa::path(
    get,
    path = "/metrics",
    security(("bearer" = ["read"])),
    responses((status = 200, description = "Prometheus text exposition", content_type = "text/plain", body = String))
)]
pub(crate) async fn metrics(
    crate::auth::CanRead(state): crate::auth::CanRead,
) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        {
            state.metrics.feeds(state.store.feed_stats());
            state.metrics.render()
        },
    )
}
