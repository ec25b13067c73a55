//! The a2 HTTP server: any [`a2_core::Store`] behind a JSON API, live feeds
//! over Server-Sent Events, a remote worker API, a web inspector and
//! Prometheus metrics. `a2 serve` runs it; an application can mount
//! [`router`] in its own axum server instead.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use a2_core::{MemoryStore, StoreOptions};
//! use a2_server::Config;
//!
//! let store = Arc::new(MemoryStore::new(StoreOptions::default()));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7373").await?;
//! let config = Config::default();
//! config.check_listen(listener.local_addr()?).expect("loopback without tokens");
//! a2_server::serve(listener, store, config, async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await
//! # }
//! ```
//!
//! The API is documented in `docs/http.md` and published by the server as
//! an OpenAPI document at `/openapi.json`.
//!
//! # Layout
//! - `error`: the JSON error answer and the extractors that produce it.
//! - `auth`: bearer tokens with scopes, compared in constant time.
//! - `model`: the JSON shapes of requests and answers, with their schemas.
//! - `routes`: one module per part of the API: `sessions`, `presence`,
//!   `work` (remote workers), `live` (Server-Sent Events).
//! - `metrics`: the Prometheus recorder of one router.
//! - `openapi`: the generated OpenAPI document.
//! - `inspector`: the web page at `/`.
//! - `conn`: one connection of [`serve`]: a first request for Server-Sent
//!   Events answered without hyper's buffers, everything else by hyper.
#![deny(missing_docs)]

pub mod auth;
mod conn;
pub mod error;
mod inspector;
pub mod metrics;
pub mod model;
mod openapi;
mod routes;
mod state;
mod streams;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::Store;
use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;
use tower_http::cors::{AllowOrigin, CorsLayer};

pub use auth::{Scope, Tokens};
pub use error::ApiError;
pub use openapi::openapi_json;
pub use state::AppState;

/// The server's configuration: `Config::default()`, then the fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Bearer tokens with scopes; `None` lets every request through, which
    /// [`Config::check_listen`] allows on loopback addresses only.
    pub tokens: Option<Tokens>,
    /// Origins allowed to call the API from a browser page of another
    /// origin (CORS); `*` allows any. Empty: same-origin only.
    pub cors_origins: Vec<String>,
    /// Largest request body, in bytes (default 4 MiB): a larger one is
    /// refused with 413 before it is read whole.
    pub max_body_bytes: usize,
    /// Most events in one append or completion over HTTP (default 1 000).
    pub max_batch_len: usize,
    /// How long a Durable Streams long-poll waits for data before it
    /// answers 204 (default 10 s).
    pub long_poll: Duration,
    /// Cancelled when the server shuts down: every open stream ends at once,
    /// so a graceful shutdown does not wait for clients to hang up.
    pub shutdown: CancellationToken,
    /// How often the Durable Streams subscription sweep runs (default 1 s;
    /// ten times as long while the process knows of no subscription): it
    /// links new streams that match a subscription's pattern, sees appends
    /// made by other processes, and wakes again when a lease ran out.
    /// Appends, completions and forks made through this server reach the
    /// subscriptions at once, without it.
    pub subscription_sweep: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            tokens: None,
            cors_origins: Vec::new(),
            max_body_bytes: 4 * 1024 * 1024,
            max_batch_len: 1_000,
            long_poll: Duration::from_secs(10),
            shutdown: CancellationToken::new(),
            subscription_sweep: Duration::from_secs(1),
        }
    }
}

impl Config {
    /// Sets how often the subscription sweep runs (at least 1 ms).
    pub fn with_subscription_sweep(mut self, every: Duration) -> Self {
        self.subscription_sweep = every.max(Duration::from_millis(1));
        self
    }

    /// Sets the token list.
    pub fn with_tokens(mut self, tokens: Option<Tokens>) -> Self {
        self.tokens = tokens;
        self
    }

    /// Sets the CORS origins.
    pub fn with_cors_origins(mut self, origins: Vec<String>) -> Self {
        self.cors_origins = origins;
        self
    }

    /// Sets the largest request body.
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets the most events in one append or completion.
    pub fn with_max_batch_len(mut self, len: usize) -> Self {
        self.max_batch_len = len;
        self
    }

    /// Sets how long a Durable Streams long-poll waits (at least 1 ms).
    pub fn with_long_poll(mut self, wait: Duration) -> Self {
        self.long_poll = wait.max(Duration::from_millis(1));
        self
    }

    /// Whether the server may listen on `addr`: without tokens anyone who
    /// can reach the port can read and write everything, so only a
    /// loopback address is allowed.
    pub fn check_listen(&self, addr: SocketAddr) -> Result<(), String> {
        if self.tokens.is_none() && !addr.ip().is_loopback() {
            return Err(format!(
                "refusing to listen on {addr} without tokens: anyone who reaches it could read and write every session. \
                 Give tokens (--tokens FILE or A2_TOKENS) or listen on a loopback address such as 127.0.0.1"
            ));
        }
        Ok(())
    }

    fn cors(&self) -> Result<Option<CorsLayer>, String> {
        if self.cors_origins.is_empty() {
            return Ok(None);
        }
        let origin = if self.cors_origins.iter().any(|o| o == "*") {
            AllowOrigin::any()
        } else {
            let origins = self
                .cors_origins
                .iter()
                .map(|o| HeaderValue::from_str(o).map_err(|_| format!("bad CORS origin {o:?}")))
                .collect::<Result<Vec<_>, _>>()?;
            AllowOrigin::list(origins)
        };
        Ok(Some(
            CorsLayer::new()
                .allow_origin(origin)
                .allow_methods([
                    Method::GET,
                    Method::POST,
                    Method::PUT,
                    Method::DELETE,
                    Method::HEAD,
                ])
                .allow_headers(
                    [
                        header::AUTHORIZATION,
                        header::CONTENT_TYPE,
                        header::IF_NONE_MATCH,
                        header::HeaderName::from_static("last-event-id"),
                    ]
                    .into_iter()
                    .chain(routes::streams::ALLOWED)
                    .collect::<Vec<_>>(),
                )
                .expose_headers(routes::exposed_headers().collect::<Vec<_>>())
                .max_age(Duration::from_secs(600)),
        ))
    }
}

/// The whole server as an axum router: the API under `/v1`, Durable
/// Streams reads under `/streams`, the inspector at `/`, metrics at
/// `/metrics`, the OpenAPI document at `/openapi.json`.
///
/// # Errors
/// A CORS origin that is not a valid header value.
pub fn router(store: Arc<dyn Store>, config: Config) -> Result<Router, String> {
    let cors = config.cors()?;
    let body_limit = config.max_body_bytes;
    let streams = Arc::new(streams::Engine::new(
        store.clone(),
        config.shutdown.clone(),
        config.subscription_sweep,
    ));
    let state = AppState {
        store,
        config: Arc::new(config),
        metrics: Arc::new(metrics::Metrics::new()),
        streams,
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        spawn_upkeep(state.metrics.clone(), state.config.shutdown.clone());
        state.streams.start();
    }
    let mut app = routes::routes()
        .merge(inspector::routes())
        .merge(openapi::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        // One layer for all that each request passes through: every layer
        // is cloned and boxed again for each request.
        .layer(middleware::from_fn_with_state(state.clone(), edge))
        .with_state(state);
    if let Some(cors) = cors {
        app = app.layer(cors);
    }
    Ok(app)
}

/// Serves `store` on `listener` until `signal` completes, then shuts down
/// gracefully: every open stream ends (its client sees the response end
/// cleanly), requests in flight finish, and the call returns.
///
/// # Errors
/// A CORS origin that is not a valid header value, or an I/O error of the
/// listener.
pub async fn serve(
    listener: tokio::net::TcpListener,
    store: Arc<dyn Store>,
    config: Config,
    signal: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let shutdown = config.shutdown.clone();
    let app = router(store, config).map_err(std::io::Error::other)?;
    let stop = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = signal => stop.cancel(),
            () = stop.cancelled() => {}
        }
    });
    // Each connection is a task of `connections` (see `conn` for how it is
    // served); at shutdown no connection is accepted any more, every open
    // one is told to finish its request in flight and close, and the call
    // returns once all have.
    let connections = tokio_util::task::TaskTracker::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    accept_failed(&error).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        connections.spawn(conn::serve(stream, app.clone(), shutdown.clone()));
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

/// A failed `accept`: one connection that went away before it was taken
/// (reset, aborted) is nobody's concern; anything else (out of file
/// descriptors, say) is logged and retried after a second, as hyper's and
/// axum's servers do, rather than ending the server or spinning.
async fn accept_failed(error: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "accepting a connection failed; trying again in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// What every request passes through: a declared body over the limit is
/// refused before any handler runs, and any 413 names the limit (see
/// [`error::refuse_declared_oversize`]); the answer gets the headers every
/// answer carries; the latency is recorded under the route pattern (never
/// the raw path, whose session ids would make one series per session) and
/// logged at debug level (`RUST_LOG=a2_server=debug`).
async fn edge(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let limit = state.config.max_body_bytes;
    let method = request.method().clone();
    // The matched path shares its text: a clone is a reference count.
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map_or("unmatched", MatchedPath::as_str);
    let mut response = match error::refuse_declared_oversize(request, limit).await {
        Ok(request) => {
            let response = next.run(request).await;
            // The extractors' own 413 names neither the limit nor how to
            // raise it.
            if response.status() == StatusCode::PAYLOAD_TOO_LARGE {
                error::body_over_limit(limit)
            } else {
                response
            }
        }
        Err(refused) => refused,
    };
    // No browser may guess another type than the one declared (a JSON
    // payload rendered as HTML would run its script).
    response
        .headers_mut()
        .insert(header::X_CONTENT_TYPE_OPTIONS, NOSNIFF);
    // Durable Streams are read by pages of any origin (the protocol asks
    // for this header on its responses).
    if route.starts_with("/v1/stream/") {
        response
            .headers_mut()
            .insert(CROSS_ORIGIN_RESOURCE_POLICY, CROSS_ORIGIN);
    }
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    state.metrics.request(&method, route, status, elapsed);
    tracing::debug!(
        %method,
        route,
        status,
        micros = elapsed.as_micros() as u64,
        "request answered"
    );
    response
}

const NOSNIFF: HeaderValue = HeaderValue::from_static("nosniff");
const CROSS_ORIGIN_RESOURCE_POLICY: header::HeaderName =
    header::HeaderName::from_static("cross-origin-resource-policy");
const CROSS_ORIGIN: HeaderValue = HeaderValue::from_static("cross-origin");

async fn not_found() -> Response {
    ApiError::not_found("no such route").into_response()
}

async fn method_not_allowed() -> Response {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        "this route does not take that method",
    )
    .into_response()
}

/// Runs `metrics` upkeep every few seconds until `shutdown`.
fn spawn_upkeep(metrics: Arc<metrics::Metrics>, shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = tick.tick() => metrics.upkeep(),
                () = shutdown.cancelled() => break,
            }
        }
    });
}
