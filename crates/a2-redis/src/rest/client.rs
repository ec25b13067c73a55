//! The HTTP side of the REST protocol: one command or pipeline per
//! request, JSON in, JSON out, turned into [`redis::Value`] so the store's
//! reply decoding runs unchanged.
//!
//! - A command is `POST {url}` with a JSON array of strings; a pipeline is
//!   `POST {url}/pipeline` with an array of those.
//! - A reply is `{"result": …}` or `{"error": "…"}` (also on 4xx/5xx); a
//!   pipeline's is an array of them.
//! - With `Upstash-Encoding: base64` the server base64-encodes every bulk
//!   string of a reply (not status replies such as `OK`). Whether the
//!   server honours the header is probed once at connect
//!   ([`RestClient::probe_base64`]), and decoding follows what it does.
//! - `upstash-sync-token`: the newest token a reply carried goes with every
//!   request, so a read sees the writes this process made before it even
//!   when the provider serves reads from replicas.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2_core::{Error, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use redis::{Arg, Cmd, RedisFuture, Value};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use serde::de::DeserializeSeed;
use serde_json::Value as Json;

use super::json::{ReplySeed, command_body, error_value, text, to_value};

const ENCODING_HEADER: &str = "upstash-encoding";
const SYNC_TOKEN_HEADER: &str = "upstash-sync-token";

/// How many extra attempts a call may make after a failure that proves the
/// request never reached the server, or after any failure of a read-only
/// command.
const RETRIES: u32 = 2;

/// Commands that change nothing, so sending one twice is harmless.
const IDEMPOTENT: &[&str] = &[
    "PING",
    "ECHO",
    "GET",
    "HGET",
    "HGETALL",
    "HMGET",
    "XRANGE",
    "XREVRANGE",
    "XLEN",
    "ZRANGE",
    "ZRANGEBYLEX",
    "ZCARD",
    "EXISTS",
    "SCRIPT",
];

/// The connection to one REST endpoint, shared by the transport and the
/// subscribers of a store.
pub(crate) struct RestClient {
    /// Commands: every request bounded by the command timeout.
    http: reqwest::Client,
    /// Subscriptions: no overall bound, since an event stream stays open.
    pub(crate) streams: reqwest::Client,
    url: String,
    auth: HeaderValue,
    /// Whether requests ask for base64 replies.
    ask_base64: AtomicBool,
    /// Whether replies are base64 (the server honoured the header).
    base64: AtomicBool,
    sync_token: Mutex<Option<HeaderValue>>,
    pub(crate) command_timeout: Duration,
}

impl RestClient {
    /// A client for `url` (no trailing slash needed) with `token`.
    pub(crate) fn new(
        url: &str,
        token: &str,
        command_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self> {
        let auth = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Error::invalid("the REST token holds characters a header cannot"))?;
        let build = |timeout: Option<Duration>| {
            let mut builder = reqwest::Client::builder()
                .connect_timeout(connect_timeout)
                .pool_idle_timeout(Duration::from_secs(60))
                .tcp_nodelay(true);
            if let Some(timeout) = timeout {
                builder = builder.timeout(timeout);
            }
            builder
                .build()
                .map_err(|e| Error::unavailable_from("could not build the HTTP client", e))
        };
        Ok(Self {
            http: build(Some(command_timeout))?,
            streams: build(None)?,
            url: url.trim_end_matches('/').to_owned(),
            auth,
            ask_base64: AtomicBool::new(false),
            base64: AtomicBool::new(false),
            sync_token: Mutex::new(None),
            command_timeout,
        })
    }

    /// `{url}/{path}`.
    pub(crate) fn endpoint(&self, path: &str) -> String {
        if path.is_empty() {
            self.url.clone()
        } else {
            format!("{}/{path}", self.url)
        }
    }

    /// The `Authorization` header value.
    pub(crate) fn auth(&self) -> HeaderValue {
        self.auth.clone()
    }

    /// Asks for base64 replies and learns whether the server honours that:
    /// `ECHO` of a text that is not valid base64 comes back either as
    /// itself (header ignored) or encoded.
    pub(crate) async fn probe_base64(&self) -> Result<()> {
        const PROBE: &str = "a2:base64?";
        self.ask_base64.store(true, Ordering::SeqCst);
        self.base64.store(false, Ordering::SeqCst);
        let reply = self
            .command(&[b"ECHO".to_vec(), PROBE.as_bytes().to_vec()])
            .await?;
        match reply {
            Value::BulkString(bytes) if bytes == PROBE.as_bytes() => {
                // The server ignores the header: stop sending it.
                self.ask_base64.store(false, Ordering::SeqCst);
                Ok(())
            }
            Value::BulkString(bytes)
                if STANDARD.decode(&bytes).ok().as_deref() == Some(PROBE.as_bytes()) =>
            {
                self.base64.store(true, Ordering::SeqCst);
                Ok(())
            }
            other => Err(Error::unavailable(format!(
                "the REST endpoint answered ECHO with {other:?}"
            ))),
        }
    }

    /// Whether replies are base64-encoded.
    pub(crate) fn replies_base64(&self) -> bool {
        self.base64.load(Ordering::SeqCst)
    }

    /// Runs one command. A Redis error is returned as
    /// [`Value::ServerError`]; failing to get a reply is `StoreUnavailable`.
    pub(crate) async fn command(&self, args: &[Vec<u8>]) -> Result<Value> {
        let idempotent = is_idempotent(args);
        self.command_body(command_body(args.iter().map(Vec::as_slice)), idempotent)
            .await
    }

    /// Runs one command whose JSON body ([`command_body`]) is built: the
    /// arguments are written into the body once, and the reply is parsed
    /// straight into a value, with no JSON tree in between.
    pub(crate) async fn command_body(&self, body: Vec<u8>, idempotent: bool) -> Result<Value> {
        let base64 = self.replies_base64();
        self.post("", body, idempotent, |status, bytes| {
            let mut reader = serde_json::Deserializer::from_slice(bytes);
            let value = ReplySeed { base64 }
                .deserialize(&mut reader)
                .and_then(|value| reader.end().map(|()| value));
            value.map_err(|_| self.not_json(status, bytes))
        })
        .await
    }

    /// Runs commands in one `/pipeline` request (not atomic): one value per
    /// command, errors as [`Value::ServerError`].
    pub(crate) async fn pipeline(&self, commands: &[Vec<Vec<u8>>]) -> Result<Vec<Value>> {
        let body = Json::Array(
            commands
                .iter()
                .map(|args| Json::Array(args.iter().map(|a| Json::String(text(a))).collect()))
                .collect(),
        );
        let idempotent = commands.iter().all(|args| is_idempotent(args));
        let body = serde_json::to_vec(&body)
            .map_err(|e| Error::invalid(format!("cannot encode a REST request: {e}")))?;
        let parsed = self
            .post("pipeline", body, idempotent, |status, bytes| {
                serde_json::from_slice::<Json>(bytes).map_err(|_| self.not_json(status, bytes))
            })
            .await?;
        match parsed {
            Json::Array(replies) if replies.len() == commands.len() => {
                Ok(replies.into_iter().map(|r| self.reply(r)).collect())
            }
            Json::Object(reply) if reply.contains_key("error") => {
                let error = error_value(reply.get("error"));
                Ok(vec![error; commands.len()])
            }
            other => Err(Error::unavailable(format!(
                "the REST endpoint answered a pipeline of {} with {}",
                commands.len(),
                short(&other)
            ))),
        }
    }

    /// `{"result": x}` → x as a value; `{"error": e}` → a server error.
    fn reply(&self, reply: Json) -> Value {
        match reply {
            Json::Object(mut fields) => {
                if let Some(error) = fields.get("error").filter(|e| !e.is_null()) {
                    return error_value(Some(error));
                }
                to_value(
                    fields.remove("result").unwrap_or(Json::Null),
                    self.replies_base64(),
                )
            }
            other => error_value(Some(&Json::String(format!(
                "unexpected reply {}",
                short(&other)
            )))),
        }
    }

    /// Posts `body` to `{url}/{path}` and returns the reply as `parse`
    /// reads it, retrying a request that never reached the server, and any
    /// failed request (an unreadable reply too) when `idempotent`.
    async fn post<T>(
        &self,
        path: &str,
        body: Vec<u8>,
        idempotent: bool,
        parse: impl Fn(reqwest::StatusCode, &[u8]) -> ParseResult<T>,
    ) -> Result<T> {
        // Shared between the tries, not copied.
        let body = bytes::Bytes::from(body);
        let mut attempt = 0;
        loop {
            let outcome = match self.post_once(path, body.clone()).await {
                Ok((status, bytes)) => parse(status, &bytes).map_err(|error| (error, true)),
                Err(failed) => Err(failed),
            };
            match outcome {
                Ok(value) => return Ok(value),
                Err((error, reached)) => {
                    attempt += 1;
                    if attempt > RETRIES || (reached && !idempotent) {
                        return Err(error);
                    }
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
                }
            }
        }
    }

    /// What a reply that is no JSON says: a refused token, or the status
    /// and the start of the body.
    fn not_json(&self, status: reqwest::StatusCode, bytes: &[u8]) -> Error {
        if status.as_u16() == 401 || status.as_u16() == 403 {
            return Error::unavailable(format!(
                "the REST endpoint {} refused the token ({status})",
                self.url
            ));
        }
        Error::unavailable(format!(
            "the REST endpoint {} answered {status} without JSON: {}",
            self.url,
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        ))
    }

    /// One request: its status and body; on failure, whether the request
    /// may have reached the server.
    async fn post_once(
        &self,
        path: &str,
        body: bytes::Bytes,
    ) -> std::result::Result<(reqwest::StatusCode, bytes::Bytes), (Error, bool)> {
        let mut request = self
            .http
            .post(self.endpoint(path))
            .header(AUTHORIZATION, self.auth.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if self.ask_base64.load(Ordering::SeqCst) {
            request = request.header(ENCODING_HEADER, "base64");
        }
        let token = self
            .sync_token
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(token) = token {
            request = request.header(SYNC_TOKEN_HEADER, token);
        }
        let response = request.send().await.map_err(|e| {
            let reached = !e.is_connect();
            (
                Error::unavailable_from(format!("REST request to {} failed", self.url), e),
                reached,
            )
        })?;
        if let Some(token) = response.headers().get(SYNC_TOKEN_HEADER) {
            *self.sync_token.lock().unwrap_or_else(|p| p.into_inner()) = Some(token.clone());
        }
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| {
            (
                Error::unavailable_from(
                    format!("reading a REST reply from {} failed", self.url),
                    e,
                ),
                true,
            )
        })?;
        Ok((status, bytes))
    }
}

/// What a reply parser returns.
type ParseResult<T> = std::result::Result<T, Error>;

/// A [`redis::aio::ConnectionLike`] over the REST client, so that
/// [`redis::Script`] calls scripts by hash and reloads them after
/// `NOSCRIPT` exactly as it does on a RESP connection.
#[derive(Clone)]
pub(crate) struct RestConnection(pub(crate) Arc<RestClient>);

impl redis::aio::ConnectionLike for RestConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let args = cmd_args(cmd);
        Box::pin(async move { self.0.command(&args).await.map_err(redis_error) })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let commands: Vec<Vec<Vec<u8>>> = pipeline.cmd_iter().map(cmd_args).collect();
        Box::pin(async move {
            let replies = self.0.pipeline(&commands).await.map_err(redis_error)?;
            Ok(replies.into_iter().skip(offset).take(count).collect())
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

fn redis_error(error: Error) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Io,
        "REST request failed",
        error.to_string(),
    ))
}

/// A command's arguments, name first.
pub(crate) fn cmd_args(cmd: &Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .filter_map(|arg| match arg {
            Arg::Simple(bytes) => Some(bytes.to_vec()),
            _ => None,
        })
        .collect()
}

fn is_idempotent(args: &[Vec<u8>]) -> bool {
    args.first().is_some_and(|name| {
        IDEMPOTENT
            .iter()
            .any(|known| known.as_bytes().eq_ignore_ascii_case(name))
    })
}

fn short(json: &Json) -> String {
    let text = json.to_string();
    text.chars().take(200).collect()
}
