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
use serde_json::Value as Json;

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
        let body = Json::Array(args.iter().map(|a| Json::String(text(a))).collect());
        let idempotent = is_idempotent(args);
        let reply = self.post("", &body, idempotent).await?;
        Ok(self.reply(reply))
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
        match self.post("pipeline", &body, idempotent).await? {
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

    /// Posts `body` to `{url}/{path}` and returns the parsed JSON reply,
    /// retrying a request that never reached the server, and any failed
    /// request when `idempotent`.
    async fn post(&self, path: &str, body: &Json, idempotent: bool) -> Result<Json> {
        let body = serde_json::to_vec(body)
            .map_err(|e| Error::invalid(format!("cannot encode a REST request: {e}")))?;
        let mut attempt = 0;
        loop {
            match self.post_once(path, body.clone()).await {
                Ok(json) => return Ok(json),
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

    /// One request; on failure, whether the request may have reached the
    /// server.
    async fn post_once(
        &self,
        path: &str,
        body: Vec<u8>,
    ) -> std::result::Result<Json, (Error, bool)> {
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
        match serde_json::from_slice::<Json>(&bytes) {
            Ok(json) => Ok(json),
            Err(_) if status.as_u16() == 401 || status.as_u16() == 403 => Err((
                Error::unavailable(format!(
                    "the REST endpoint {} refused the token ({status})",
                    self.url
                )),
                true,
            )),
            Err(_) => Err((
                Error::unavailable(format!(
                    "the REST endpoint {} answered {status} without JSON: {}",
                    self.url,
                    String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                )),
                true,
            )),
        }
    }
}

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

/// An argument as JSON text. The protocol carries strings, so bytes must be
/// UTF-8; the one non-UTF-8 byte the store sends, 0xFF as the "after every
/// UTF-8 string" bound of a lexicographic range, becomes U+10FFFF, the
/// greatest character (exact unless a name holds that noncharacter).
fn text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => {
            let mut out = String::with_capacity(bytes.len() + 4);
            for chunk in bytes.utf8_chunks() {
                out.push_str(chunk.valid());
                for _ in chunk.invalid() {
                    out.push('\u{10FFFF}');
                }
            }
            out
        }
    }
}

/// A JSON reply as the value RESP would have given.
pub(crate) fn to_value(json: Json, base64: bool) -> Value {
    match json {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Int(i64::from(b)),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => {
            if base64 {
                // Status replies (`OK`) are not encoded; they are never
                // valid base64 of the same text.
                match STANDARD.decode(s.as_bytes()) {
                    Ok(bytes) if s != "OK" => Value::BulkString(bytes),
                    _ => Value::BulkString(s.into_bytes()),
                }
            } else {
                Value::BulkString(s.into_bytes())
            }
        }
        Json::Array(items) => {
            Value::Array(items.into_iter().map(|v| to_value(v, base64)).collect())
        }
        Json::Object(fields) => Value::Map(
            fields
                .into_iter()
                .map(|(k, v)| (Value::BulkString(k.into_bytes()), to_value(v, base64)))
                .collect(),
        ),
    }
}

/// An `error` field as a Redis error value. The code is the message's first
/// word when it looks like one (`NOSCRIPT`, `ERR`, `WRONGTYPE`); a server
/// that wraps Redis's message ("Failed to execute Redis command: NOSCRIPT
/// …") still yields `NOSCRIPT`, so scripts reload on any such server.
fn error_value(error: Option<&Json>) -> Value {
    let message = match error {
        Some(Json::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "unknown error".to_owned(),
    };
    let message = message.replace(['\r', '\n'], " ");
    let message = match message.find("NOSCRIPT") {
        Some(at) => message[at..].to_owned(),
        None => message,
    };
    let first = message.split(' ').next().unwrap_or("");
    let coded = if !first.is_empty() && first.bytes().all(|b| b.is_ascii_uppercase()) {
        message
    } else {
        format!("ERR {message}")
    };
    redis::parse_redis_value(format!("-{coded}\r\n").as_bytes()).unwrap_or_else(|_| Value::Nil)
}

fn short(json: &Json) -> String {
    let text = json.to_string();
    text.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_replies_become_resp_values() {
        let json: Json = serde_json::json!([1, null, "a\nb", ["x"], "OK"]);
        assert_eq!(
            to_value(json, false),
            Value::Array(vec![
                Value::Int(1),
                Value::Nil,
                Value::BulkString(b"a\nb".to_vec()),
                Value::Array(vec![Value::BulkString(b"x".to_vec())]),
                Value::BulkString(b"OK".to_vec()),
            ])
        );
    }

    #[test]
    fn base64_replies_are_decoded_but_status_ok_is_kept() {
        let encoded = STANDARD.encode("é\n");
        let json = serde_json::json!([encoded, "OK"]);
        assert_eq!(
            to_value(json, true),
            Value::Array(vec![
                Value::BulkString("é\n".as_bytes().to_vec()),
                Value::BulkString(b"OK".to_vec()),
            ])
        );
    }

    #[test]
    fn wrapped_noscript_errors_keep_their_code() {
        let json = Json::String("Failed to execute Redis command: NOSCRIPT No matching".into());
        let Value::ServerError(error) = error_value(Some(&json)) else {
            panic!("a server error");
        };
        assert_eq!(error.kind(), Some(redis::ServerErrorKind::NoScript));
    }

    #[test]
    fn the_lexicographic_top_byte_becomes_the_greatest_character() {
        assert_eq!(text(b"(ab\xff"), "(ab\u{10FFFF}");
        assert!(text(b"(ab\xff").as_str() > "(ab\u{10FFFD}");
    }
}
