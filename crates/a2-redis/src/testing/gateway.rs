//! A Redis REST gateway for tests (features `testing` and `rest`): the
//! Upstash protocol in front of a real `redis-server`.
//!
//! - `POST /` runs one command (`["SET", "k", "v"]` → `{"result": "OK"}`),
//!   `POST /pipeline` several, `POST /multi-exec` several in a
//!   transaction; Redis errors come back as `{"error": "…"}` with 400;
//! - `Upstash-Encoding: base64` makes every bulk and status string of a
//!   reply base64, except `OK` (as the official client expects);
//! - `POST /subscribe/{channel}` with `Accept: text/event-stream` answers
//!   `data: subscribe,{channel},1` once subscribed, then
//!   `data: message,{channel},{payload}` per message, one Redis pub/sub
//!   connection per request;
//! - `Authorization: Bearer {token}` is required (401 otherwise).
//!
//! [`GatewayOptions`] turns subscriptions or base64 off, to stand in for
//! providers without them. `tests/upstash_client.rs` checks the gateway
//! against the official `@upstash/redis` client.
//!
//! The gateway runs on its own Tokio runtime in its own threads, so it
//! outlives the runtimes of individual tests, and [`Gateway::kill`] ends it
//! abruptly: every connection, event streams included, is cut.
//!
//! ```no_run
//! use a2_redis::testing::RedisServer;
//! use a2_redis::testing::gateway::{Gateway, GatewayOptions};
//! let redis = RedisServer::start();
//! let gateway = Gateway::start(&redis.url(), GatewayOptions::default());
//! let url = gateway.url(); // http://:token@127.0.0.1:port
//! # let _ = url;
//! ```

use std::convert::Infallible;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use redis::Value;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use serde_json::{Value as Json, json};
use tokio::runtime::Runtime;

use json::{entry, error_text, parse_body, parse_command, to_cmd, to_json};

/// What the gateway offers.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// The bearer token clients must send.
    pub token: String,
    /// Serve `POST /subscribe/{channel}` (else 404, like providers
    /// without subscriptions).
    pub subscribe: bool,
    /// Honour `Upstash-Encoding: base64` (else plain strings always).
    pub base64: bool,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            token: "a2-test-token".to_owned(),
            subscribe: true,
            base64: true,
        }
    }
}

impl GatewayOptions {
    /// Sets whether subscriptions are served.
    pub fn subscribe(mut self, on: bool) -> Self {
        self.subscribe = on;
        self
    }

    /// Sets whether base64 replies are honoured.
    pub fn base64(mut self, on: bool) -> Self {
        self.base64 = on;
        self
    }
}

/// A running gateway; killed when dropped.
pub struct Gateway {
    port: u16,
    redis_url: String,
    options: GatewayOptions,
    runtime: Option<Runtime>,
    counts: Arc<Counts>,
    switch: Arc<Switch>,
}

/// Whether `/subscribe` is served right now, and a signal that ends the
/// event streams open when it was turned off.
struct Switch {
    on: std::sync::atomic::AtomicBool,
    cut: tokio::sync::watch::Sender<u64>,
}

/// How many requests a gateway has served, by endpoint (see
/// [`Gateway::requests`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    /// `POST /`.
    pub commands: u64,
    /// `POST /pipeline`.
    pub pipelines: u64,
    /// `POST /multi-exec`.
    pub transactions: u64,
    /// `POST /subscribe/{channel}`.
    pub subscriptions: u64,
}

#[derive(Default)]
struct Counts {
    commands: AtomicU64,
    pipelines: AtomicU64,
    transactions: AtomicU64,
    subscriptions: AtomicU64,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("port", &self.port)
            .field("redis_url", &self.redis_url)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Starts a gateway on a free loopback port in front of `redis_url`.
    ///
    /// # Panics
    /// When it cannot bind or start its runtime.
    pub fn start(redis_url: &str, options: GatewayOptions) -> Self {
        let mut gateway = Self {
            port: 0,
            redis_url: redis_url.to_owned(),
            runtime: None,
            counts: Arc::default(),
            switch: Arc::new(Switch {
                on: std::sync::atomic::AtomicBool::new(options.subscribe),
                cut: tokio::sync::watch::Sender::new(0),
            }),
            options,
        };
        gateway
            .serve()
            .unwrap_or_else(|e| panic!("the REST gateway did not start: {e}"));
        gateway
    }

    /// `http://:{token}@127.0.0.1:{port}`: what `RedisStore::connect` takes.
    pub fn url(&self) -> String {
        format!("http://:{}@127.0.0.1:{}", self.options.token, self.port)
    }

    /// `http://127.0.0.1:{port}`, without the token.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The bearer token.
    pub fn token(&self) -> &str {
        &self.options.token
    }

    /// The gateway's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The requests served so far (since start, restarts included).
    pub fn requests(&self) -> Requests {
        let c = &self.counts;
        Requests {
            commands: c.commands.load(Ordering::Relaxed),
            pipelines: c.pipelines.load(Ordering::Relaxed),
            transactions: c.transactions.load(Ordering::Relaxed),
            subscriptions: c.subscriptions.load(Ordering::Relaxed),
        }
    }

    /// Turns `/subscribe` off (it answers 404, as at a provider without
    /// subscriptions, and every open event stream ends) or on again, while
    /// commands go on: how a test makes stores lose their event streams.
    pub fn set_subscribe(&self, on: bool) {
        self.switch.on.store(on, Ordering::SeqCst);
        if !on {
            self.switch.cut.send_modify(|generation| *generation += 1);
        }
    }

    /// Stops the gateway at once, cutting every connection.
    pub fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }

    /// Starts the gateway again on the same port (after [`Gateway::kill`]).
    ///
    /// # Panics
    /// When the port cannot be bound again within a few seconds.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            match self.serve() {
                Ok(()) => return,
                Err(e) if std::time::Instant::now() >= deadline => {
                    panic!(
                        "the REST gateway did not restart on port {}: {e}",
                        self.port
                    )
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn serve(&mut self) -> io::Result<()> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, self.port))?;
        listener.set_nonblocking(true)?;
        self.port = listener.local_addr()?.port();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("a2-rest-gateway")
            .enable_all()
            .build()?;
        let client = redis::Client::open(self.redis_url.as_str()).map_err(io::Error::other)?;
        let state = Arc::new(GatewayState {
            client,
            connection: tokio::sync::OnceCell::new(),
            options: self.options.clone(),
            counts: self.counts.clone(),
            switch: self.switch.clone(),
        });
        let app = Router::new()
            .route("/", post(command))
            .route("/pipeline", post(pipeline))
            .route("/multi-exec", post(multi_exec))
            .route("/subscribe/{channel}", post(subscribe))
            .with_state(state);
        runtime.spawn(async move {
            let listener = match tokio::net::TcpListener::from_std(listener) {
                Ok(listener) => listener,
                Err(e) => {
                    tracing::error!(error = %e, "the REST gateway cannot listen");
                    return;
                }
            };
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the REST gateway stopped");
            }
        });
        self.runtime = Some(runtime);
        Ok(())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

static SHARED: LazyLock<Gateway> =
    LazyLock::new(|| Gateway::start(&super::shared().url(), GatewayOptions::default()));

/// A gateway with subscriptions and base64 in front of the test binary's
/// [`shared`](super::shared) server, started on first use.
pub fn shared() -> &'static Gateway {
    &SHARED
}

static SHARED_POLLING: LazyLock<Gateway> = LazyLock::new(|| {
    Gateway::start(
        &super::shared().url(),
        GatewayOptions::default().subscribe(false).base64(false),
    )
});

/// A gateway without subscriptions nor base64 in front of the shared
/// server: a provider where stores must fall back to polling.
pub fn shared_without_subscribe() -> &'static Gateway {
    &SHARED_POLLING
}

struct GatewayState {
    client: redis::Client,
    connection: tokio::sync::OnceCell<ConnectionManager>,
    options: GatewayOptions,
    counts: Arc<Counts>,
    switch: Arc<Switch>,
}

impl GatewayState {
    async fn connection(&self) -> Result<ConnectionManager, Failure> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(1);
        self.connection
            .get_or_try_init(|| ConnectionManager::new_with_config(self.client.clone(), config))
            .await
            .cloned()
            .map_err(|e| failure(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
    }

    /// Whether this request is authorized, and whether it wants base64.
    fn check(&self, headers: &HeaderMap) -> Result<bool, Failure> {
        let expected = format!("Bearer {}", self.options.token);
        let given = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if given != expected {
            return Err(failure(StatusCode::UNAUTHORIZED, "Unauthorized".to_owned()));
        }
        Ok(self.options.base64
            && headers
                .get("upstash-encoding")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.eq_ignore_ascii_case("base64")))
    }
}

/// An error reply: `{"error": message}` with a status.
struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({ "error": self.1 }))).into_response()
    }
}

fn failure(status: StatusCode, message: String) -> Failure {
    Failure(status, message)
}

fn fail(status: StatusCode, message: String) -> Response {
    Failure(status, message).into_response()
}

async fn command(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.counts.commands.fetch_add(1, Ordering::Relaxed);
    let base64 = match state.check(&headers) {
        Ok(base64) => base64,
        Err(failure) => return failure.into_response(),
    };
    let cmd = match parse_command(&body) {
        Ok(cmd) => cmd,
        Err(failure) => return failure.into_response(),
    };
    let mut connection = match state.connection().await {
        Ok(connection) => connection,
        Err(failure) => return failure.into_response(),
    };
    match connection.req_packed_command(&cmd).await {
        Ok(Value::ServerError(error)) => fail(StatusCode::BAD_REQUEST, error_text(&error)),
        Ok(value) => axum::Json(json!({ "result": to_json(value, base64) })).into_response(),
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// The commands of a `/pipeline` or `/multi-exec` body.
fn to_pipeline(body: &Bytes) -> Result<redis::Pipeline, Failure> {
    let Json::Array(commands) = parse_body(body)? else {
        return Err(failure(
            StatusCode::BAD_REQUEST,
            "a pipeline is an array of commands".to_owned(),
        ));
    };
    if commands.is_empty() {
        return Err(failure(
            StatusCode::BAD_REQUEST,
            "a pipeline cannot be empty".to_owned(),
        ));
    }
    let mut pipe = redis::pipe();
    for command in &commands {
        pipe.add_command(to_cmd(command)?);
    }
    Ok(pipe)
}

async fn pipeline(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    run_pipeline(state, headers, body, false).await
}

async fn multi_exec(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    run_pipeline(state, headers, body, true).await
}

async fn run_pipeline(
    state: Arc<GatewayState>,
    headers: HeaderMap,
    body: Bytes,
    atomic: bool,
) -> Response {
    let counter = if atomic {
        &state.counts.transactions
    } else {
        &state.counts.pipelines
    };
    counter.fetch_add(1, Ordering::Relaxed);
    let base64 = match state.check(&headers) {
        Ok(base64) => base64,
        Err(failure) => return failure.into_response(),
    };
    let mut pipe = match to_pipeline(&body) {
        Ok(pipe) => pipe,
        Err(failure) => return failure.into_response(),
    };
    let mut connection = match state.connection().await {
        Ok(connection) => connection,
        Err(failure) => return failure.into_response(),
    };
    let count = pipe.len();
    let replies = if atomic {
        pipe.atomic();
        // MULTI, the commands and EXEC go out as one write, so no other
        // request's command lands inside the transaction; EXEC's reply is
        // the array of every command's reply.
        match connection.req_packed_commands(&pipe, count + 1, 1).await {
            Ok(mut replies) => match replies.pop() {
                Some(Value::Array(items)) => items,
                Some(Value::ServerError(error)) => {
                    return fail(StatusCode::BAD_REQUEST, error_text(&error));
                }
                other => {
                    return fail(
                        StatusCode::BAD_REQUEST,
                        format!("the transaction was aborted: {other:?}"),
                    );
                }
            },
            Err(e) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        }
    } else {
        match connection.req_packed_commands(&pipe, 0, count).await {
            Ok(replies) => replies,
            Err(e) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        }
    };
    axum::Json(Json::Array(
        replies.into_iter().map(|v| entry(v, base64)).collect(),
    ))
    .into_response()
}

async fn subscribe(
    State(state): State<Arc<GatewayState>>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> Response {
    state.counts.subscriptions.fetch_add(1, Ordering::Relaxed);
    if !state.switch.on.load(Ordering::SeqCst) {
        return (StatusCode::NOT_FOUND, "404 Not Found").into_response();
    }
    let mut cut = state.switch.cut.subscribe();
    if let Err(response) = state.check(&headers) {
        return response.into_response();
    }
    let subscribed = async {
        let mut pubsub = state.client.get_async_pubsub().await?;
        pubsub.subscribe(&channel).await?;
        Ok::<_, redis::RedisError>(pubsub)
    };
    let pubsub = match tokio::time::timeout(Duration::from_secs(2), subscribed).await {
        Ok(Ok(pubsub)) => pubsub,
        Ok(Err(e)) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        Err(_) => {
            return fail(
                StatusCode::SERVICE_UNAVAILABLE,
                "SUBSCRIBE timed out".to_owned(),
            );
        }
    };
    let confirmed = Event::default().data(format!("subscribe,{channel},1"));
    let messages = pubsub.into_on_message().map(move |message| {
        let payload = String::from_utf8_lossy(message.get_payload_bytes()).into_owned();
        Ok::<_, Infallible>(Event::default().data(format!("message,{channel},{payload}")))
    });
    // Turning subscriptions off ends the stream.
    let events = futures::stream::once(async move { Ok::<_, Infallible>(confirmed) })
        .chain(messages)
        .take_until(async move {
            let _ = cut.changed().await;
        });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[path = "gateway/json.rs"]
mod json;
#[cfg(test)]
#[path = "gateway/tests.rs"]
mod tests;
