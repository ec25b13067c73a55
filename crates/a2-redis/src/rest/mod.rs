//! Redis over REST (feature `rest`): the Upstash protocol, for serverless
//! and edge deployments that reach Redis only over HTTPS (Upstash, Vercel
//! KV, any gateway speaking it). `docs/rest.md` is the user's guide.
//!
//! [`RedisStore::connect`](crate::RedisStore::connect) takes this path for `https://` and `http://`
//! URLs; the token is the URL's password (`https://:TOKEN@host`) or
//! [`RestOptions::token`]. The store runs the same Lua scripts, key layout
//! and reply decoding as over RESP: only the [`Transport`] and the
//! [`Subscriber`] differ.
//!
//! Connecting checks the endpoint's capabilities ([`capabilities`]):
//!
//! 1. `PING` must answer `PONG`, else `StoreUnavailable` says the URL is
//!    not a Redis REST endpoint;
//! 2. whether the server honours `Upstash-Encoding: base64` (replies are
//!    decoded either way);
//! 3. whether `POST /subscribe/{channel}` answers an event stream: live
//!    feeds and presence then use event streams ([`SseSubscriber`], one
//!    connection per subscribed channel), through [`AdaptiveSubscriber`]
//!    with [`LiveMode::Auto`] (a channel whose stream fails polls until
//!    the stream is back), else [`PollingSubscriber`] (one request per
//!    [`RestOptions::poll_interval`] for all watched sessions).
//!
//! # Layout
//! - `client`: HTTP requests, JSON replies as `redis::Value`, base64.
//! - `transport`: [`RestTransport`], the [`Transport`] implementation.
//! - `channels`: listeners per channel, shared by both subscribers.
//! - `sse`: [`SseSubscriber`], subscriptions over server-sent events.
//! - `polling`: [`PollingSubscriber`], the fallback.
//! - `adaptive`: [`AdaptiveSubscriber`], event streams with polling where
//!   one fails.
//! - `json`: request bodies and replies, straight from and into values.

mod adaptive;
mod channels;
mod client;
mod json;
mod polling;
mod sse;
mod transport;

use std::sync::Arc;
use std::time::Duration;

use a2_core::{Error, Result};
use redis::Value;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};

pub use adaptive::AdaptiveSubscriber;
pub use polling::PollingSubscriber;
pub use sse::SseSubscriber;
pub use transport::RestTransport;

use crate::layout::Layout;
use crate::options::RedisOptions;
use crate::subscriber::Subscriber;
use crate::transport::Transport;
use client::RestClient;

/// How live feeds and presence learn about changes over REST.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LiveMode {
    /// Event streams when the endpoint offers them (polling for a channel
    /// whose stream fails, until it is back), else polling.
    #[default]
    Auto,
    /// Event streams (`/subscribe`); connecting fails without them.
    Subscribe,
    /// Polling, even where subscriptions exist.
    Poll,
}

/// REST-specific options of [`RedisStore::connect_rest`](crate::RedisStore::connect_rest).
///
/// ```
/// use std::time::Duration;
/// use a2_redis::rest::{LiveMode, RestOptions};
/// let options = RestOptions::default()
///     .token("secret")
///     .live(LiveMode::Poll)
///     .poll_interval(Duration::from_millis(250));
/// assert_eq!(options.poll_interval, Duration::from_millis(250));
/// ```
#[derive(Debug, Clone)]
pub struct RestOptions {
    /// The bearer token; when `None`, the URL's password is used.
    pub token: Option<String>,
    /// Event streams, polling, or whichever the endpoint allows (default).
    pub live: LiveMode,
    /// How often the polling fallback checks every watched session and
    /// namespace, with one request (default 500 ms).
    pub poll_interval: Duration,
    /// How often it checks at most while nothing changes: after each quiet
    /// poll the interval doubles, up to this (default 2 s); any change, or
    /// a write of this instance, brings `poll_interval` back.
    pub poll_idle_interval: Duration,
    /// Ask for base64 replies, exact for any bytes (default true); servers
    /// that ignore the request are detected and read as plain text.
    pub base64: bool,
    /// Stream entries one request reads at most: longer reads are split,
    /// for providers that cap reply sizes (default 64).
    pub stream_page: usize,
}

impl Default for RestOptions {
    fn default() -> Self {
        Self {
            token: None,
            live: LiveMode::Auto,
            poll_interval: Duration::from_millis(500),
            poll_idle_interval: Duration::from_secs(2),
            base64: true,
            stream_page: 64,
        }
    }
}

impl RestOptions {
    /// Sets the bearer token.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Sets how live feeds learn about changes.
    pub fn live(mut self, mode: LiveMode) -> Self {
        self.live = mode;
        self
    }

    /// Sets the polling interval.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets the longest polling interval while nothing changes (at least
    /// the polling interval).
    pub fn poll_idle_interval(mut self, interval: Duration) -> Self {
        self.poll_idle_interval = interval;
        self
    }

    /// Sets whether base64 replies are asked for.
    pub fn base64(mut self, base64: bool) -> Self {
        self.base64 = base64;
        self
    }

    /// Sets the stream page size.
    pub fn stream_page(mut self, entries: usize) -> Self {
        self.stream_page = entries;
        self
    }
}

/// What a REST endpoint offers, as [`capabilities`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// `POST /subscribe/{channel}` answers an event stream.
    pub subscribe: bool,
    /// Replies honour `Upstash-Encoding: base64`.
    pub base64: bool,
}

/// Whether `url` is served by the REST transport (`http://`, `https://`).
pub fn is_rest_url(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://")
}

/// Checks what the endpoint at `url` offers (see the module docs).
///
/// Fails with `InvalidArgument` for a bad URL or a missing token, and with
/// `StoreUnavailable` when the endpoint cannot be reached or does not
/// answer `PING` with `PONG`.
pub async fn capabilities(
    url: &str,
    options: &RedisOptions,
    rest: &RestOptions,
) -> Result<Capabilities> {
    let client = open(url, options, rest).await?;
    let subscribe = offers_subscribe(&client, &options.prefix).await?;
    Ok(Capabilities {
        subscribe,
        base64: client.replies_base64(),
    })
}

/// The transport and subscriber of a store over the REST endpoint at
/// `url` (see [`RedisStore::connect_rest`](crate::RedisStore::connect_rest)).
pub(crate) async fn connect(
    url: &str,
    options: &RedisOptions,
    rest: &RestOptions,
) -> Result<(Arc<dyn Transport>, Arc<dyn Subscriber>)> {
    let client = Arc::new(open(url, options, rest).await?);
    let subscribe = match rest.live {
        LiveMode::Poll => false,
        LiveMode::Subscribe | LiveMode::Auto => {
            let offered = offers_subscribe(&client, &options.prefix).await?;
            if !offered && rest.live == LiveMode::Subscribe {
                return Err(Error::unavailable(
                    "the REST endpoint offers no subscriptions (POST /subscribe)",
                ));
            }
            offered
        }
    };
    let transport: Arc<dyn Transport> =
        Arc::new(RestTransport::new(client.clone(), rest.stream_page));
    let polling = || {
        let keys = Layout::new(options.prefix.clone(), options.partitions);
        let probe: polling::Probe = Arc::new(move |channel: &str| probe(&keys, channel));
        let pace = polling::Pace {
            base: rest.poll_interval,
            idle: rest.poll_idle_interval.max(rest.poll_interval),
        };
        PollingSubscriber::start(transport.clone(), probe, pace)
    };
    let subscriber: Arc<dyn Subscriber> = match (subscribe, rest.live) {
        // Event streams, polling where one fails, until it is back.
        (true, LiveMode::Auto) => Arc::new(AdaptiveSubscriber::new(
            SseSubscriber::new(client),
            polling(),
            rest.poll_interval,
        )),
        (true, _) => Arc::new(SseSubscriber::new(client)),
        (false, _) => Arc::new(polling()),
    };
    Ok((transport, subscriber))
}

/// The client for `url`, after the `PING` check and the base64 probe.
async fn open(url: &str, options: &RedisOptions, rest: &RestOptions) -> Result<RestClient> {
    let (base, url_token) = split_url(url)?;
    let token = rest.token.clone().or(url_token).ok_or_else(|| {
        Error::invalid(
            "the REST URL has no token: give it as the URL's password \
             (https://:TOKEN@host) or as RestOptions::token",
        )
    })?;
    let client = RestClient::new(
        &base,
        &token,
        options.command_timeout,
        options.connect_timeout,
    )?;
    let ping = tokio::time::timeout(
        options.connect_timeout + options.command_timeout,
        client.command(&[b"PING".to_vec()]),
    )
    .await
    .map_err(|_| Error::unavailable(format!("timed out checking the REST endpoint {base}")))??;
    match ping {
        Value::BulkString(pong) if pong == b"PONG" => {}
        other => {
            return Err(Error::unavailable(format!(
                "the REST endpoint {base} failed the capability check: PING answered {other:?} \
                 instead of PONG (is this a Redis REST URL, and is the token right?)"
            )));
        }
    }
    if rest.base64 {
        client.probe_base64().await?;
    }
    Ok(client)
}

/// The URL without its user information, and the password as the token.
fn split_url(url: &str) -> Result<(String, Option<String>)> {
    let mut parsed =
        reqwest::Url::parse(url).map_err(|e| Error::invalid(format!("bad REST URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Error::invalid(format!(
            "a REST URL starts with https:// or http://, not {}://",
            parsed.scheme()
        )));
    }
    let token = parsed.password().map(percent_decode);
    let _ = parsed.set_password(None);
    let _ = parsed.set_username("");
    Ok((parsed.as_str().trim_end_matches('/').to_owned(), token))
}

/// Whether the endpoint answers `POST /subscribe/{channel}` with an event
/// stream. The probe stream is dropped at once.
async fn offers_subscribe(client: &RestClient, prefix: &str) -> Result<bool> {
    let channel = format!("{prefix}:capability-probe");
    let request = client
        .streams
        .post(client.endpoint(&format!("subscribe/{}", sse::path_segment(&channel))))
        .header(AUTHORIZATION, client.auth())
        .header(ACCEPT, "text/event-stream")
        .send();
    let response = tokio::time::timeout(client.command_timeout, request)
        .await
        .map_err(|_| Error::unavailable("timed out probing REST subscriptions"))?
        .map_err(|e| Error::unavailable_from("probing REST subscriptions failed", e))?;
    let is_stream = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    Ok(response.status().is_success() && is_stream)
}

/// The probe of the polling fallback for `channel`: the newest entry of a
/// session's log for its events channel, the presence hash for its
/// presence channel. Channel names are `{prefix}:{{tag}}:{encoded
/// name}:{kind}` (`layout.rs`); the name is decoded and its keys rebuilt,
/// so the probe always reads the keys the scripts write.
fn probe(keys: &Layout, channel: &str) -> Option<redis::Cmd> {
    let rest = channel.strip_prefix(keys.prefix())?.strip_prefix(":{")?;
    let (_tag, rest) = rest.split_once("}:")?;
    let (encoded, _kind) = rest.rsplit_once(':')?;
    let name = percent_decode(encoded);
    let session = keys.session(&name);
    if session.events_channel == channel {
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(&session.log).arg("+").arg("-").arg("COUNT").arg(1);
        Some(cmd)
    } else if session.presence_channel == channel {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(&session.presence);
        Some(cmd)
    } else {
        None
    }
}

/// Decodes `%XX` escapes (invalid escapes are kept as they are).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut k = 0;
    while k < bytes.len() {
        if bytes[k] == b'%'
            && let Some(byte) = text
                .get(k + 1..k + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            k += 3;
            continue;
        }
        out.push(bytes[k]);
        k += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_password_to_the_token() {
        let (base, token) = split_url("https://:s%2Fecret@example.upstash.io/").unwrap();
        assert_eq!(base, "https://example.upstash.io");
        assert_eq!(token.as_deref(), Some("s/ecret"));
        let (_, token) = split_url("http://127.0.0.1:8080").unwrap();
        assert_eq!(token, None);
        assert!(split_url("redis://x").is_err());
        assert!(is_rest_url("HTTPS://x") && !is_rest_url("rediss://x"));
    }

    #[test]
    fn probes_read_the_keys_of_the_channel_s_session() {
        let keys = Layout::new("app,1", 48);
        let session = keys.session("a:b{c}é");
        let events = probe(&keys, &session.events_channel).expect("a probe");
        let args = client::cmd_args(&events);
        assert_eq!(args[0], b"XREVRANGE");
        assert_eq!(args[1], session.log.as_bytes());
        let presence = probe(&keys, &session.presence_channel).expect("a probe");
        assert_eq!(client::cmd_args(&presence)[1], session.presence.as_bytes());
        assert!(probe(&keys, "other:{x}:events").is_none());
    }
}
