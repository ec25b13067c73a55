//! [`SseSubscriber`]: live feeds over the REST protocol's subscriptions.
//!
//! `POST {url}/subscribe/{channel}` with `Accept: text/event-stream`
//! answers with server-sent lines: `data: subscribe,{channel},{count}` once
//! the subscription is in effect, then `data: message,{channel},{payload}`
//! per published message. The protocol has one channel per request, so
//! this subscriber holds **one event-stream connection per distinct channel
//! with at least one listener** in the store: 1 000 feeds over 100 sessions
//! cost 100 connections, whatever the number of feeds per session (over
//! HTTP/2 they share one TCP connection; over HTTP/1.1 each is its own).
//!
//! Each channel has one task: it connects, hands `resync` to the listeners
//! when the `subscribe` line arrives (anything published before may have
//! been missed), routes messages, and when the stream ends reconnects at
//! once; listeners hear `resync` again when the new subscription is in
//! effect, so feeds catch up (ST2). When connecting fails, the channel's
//! listeners hear `fail` (feeds end with `StoreUnavailable`, ST5).

use std::sync::{Arc, Weak};
use std::time::Duration;

use a2_core::Error;
use futures::StreamExt;
use futures::future::BoxFuture;
use reqwest::header::{ACCEPT, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tracing::{debug, warn};

use super::channels::{Added, Channels};
use super::client::RestClient;
use crate::subscriber::{Listener, Subscriber, Subscription};

/// Where a channel's connection is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Connecting or reconnecting; not yet confirmed by the server.
    Connecting,
    /// The server confirmed the subscription.
    Live,
    /// The connection failed for good; the listeners heard `fail`.
    Ended,
}

struct SseChannel {
    /// Tells this channel's task from a later one on the same channel.
    generation: u64,
    task: AbortHandle,
    phase: watch::Receiver<Phase>,
}

struct Shared {
    client: Arc<RestClient>,
    channels: Channels<SseChannel>,
    next_generation: std::sync::atomic::AtomicU64,
}

/// The [`Subscriber`] over REST event streams (see the module docs).
pub struct SseSubscriber {
    shared: Arc<Shared>,
}

impl SseSubscriber {
    pub(crate) fn new(client: Arc<RestClient>) -> Self {
        Self {
            shared: Arc::new(Shared {
                client,
                channels: Channels::default(),
                next_generation: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }
}

impl Subscriber for SseSubscriber {
    fn subscribe(&self, channel: &str, listener: Arc<dyn Listener>) -> Subscription {
        let weak = Arc::downgrade(&self.shared);
        let client = self.shared.client.clone();
        let generation = self
            .shared
            .next_generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let added = self.shared.channels.add(channel, listener.clone(), || {
            let (phase, receiver) = watch::channel(Phase::Connecting);
            let task = tokio::spawn(run(client, weak, channel.to_owned(), generation, phase));
            SseChannel {
                generation,
                task: task.abort_handle(),
                phase: receiver,
            }
        });
        let id = match added {
            Ok(Added::First(id) | Added::Joined(id)) => id,
            Err(error) => {
                listener.fail(error);
                return Subscription::new(|| {});
            }
        };
        let shared = Arc::downgrade(&self.shared);
        let channel = channel.to_owned();
        Subscription::new(move || {
            if let Some(shared) = shared.upgrade()
                && let Some(last) = shared.channels.remove(&channel, id)
            {
                // Dropping the response closes the stream: the server
                // unsubscribes.
                last.task.abort();
            }
        })
    }

    fn sync(&self) -> BoxFuture<'static, Result<(), Error>> {
        let closed = self.shared.channels.is_closed();
        let phases = self
            .shared
            .channels
            .each(|_, channel| Some(channel.phase.clone()));
        Box::pin(async move {
            if closed {
                return Err(Error::closed("the subscriber is closed"));
            }
            for mut phase in phases {
                // A dropped sender means the channel's task is gone: its
                // listeners were failed or unsubscribed.
                let _ = phase.wait_for(|p| *p != Phase::Connecting).await;
            }
            Ok(())
        })
    }

    fn event_streams(&self) -> usize {
        self.shared.channels.each(|_, _| Some(())).len()
    }

    fn close(&self, error: Error) {
        for channel in self.shared.channels.close(&error) {
            channel.task.abort();
        }
    }
}

impl Drop for SseSubscriber {
    fn drop(&mut self) {
        self.close(Error::closed("the subscriber is closed"));
    }
}

/// A channel's task: subscribe, route, reconnect; fail the listeners when
/// a connection cannot be made.
async fn run(
    client: Arc<RestClient>,
    shared: Weak<Shared>,
    channel: String,
    generation: u64,
    phase: watch::Sender<Phase>,
) {
    loop {
        let started = tokio::time::Instant::now();
        match stream(&client, &shared, &channel, &phase).await {
            Ok(()) => {
                debug!(channel, "event stream ended; reconnecting");
                phase.send_replace(Phase::Connecting);
                // A server that accepts and drops at once must not make
                // this spin.
                if started.elapsed() < Duration::from_millis(500) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Err(error) => {
                warn!(channel, %error, "event stream failed");
                if let Some(shared) = shared.upgrade() {
                    shared
                        .channels
                        .fail_channel(&channel, |c| c.generation == generation, &error);
                }
                phase.send_replace(Phase::Ended);
                return;
            }
        }
    }
}

/// One connection: `Err` when it could not be made (or not confirmed in
/// time), `Ok` when an established stream ended.
async fn stream(
    client: &RestClient,
    shared: &Weak<Shared>,
    channel: &str,
    phase: &watch::Sender<Phase>,
) -> Result<(), Error> {
    let bound = client.command_timeout;
    let response = open_stream(client, channel).await?;
    let mut body = response.bytes_stream();
    let mut buffer: Vec<u8> = Vec::new();
    let mut live = false;
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let chunk = if live {
            body.next().await
        } else {
            match tokio::time::timeout_at(deadline, body.next()).await {
                Ok(chunk) => chunk,
                Err(_) => {
                    return Err(Error::unavailable(
                        "the REST endpoint did not confirm a subscription in time",
                    ));
                }
            }
        };
        let chunk = match chunk {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) if !live => {
                return Err(Error::unavailable_from("the event stream failed", e));
            }
            // An established stream that ends or breaks: reconnect.
            Some(Err(_)) | None => {
                return if live {
                    Ok(())
                } else {
                    Err(Error::unavailable("the event stream ended before it began"))
                };
            }
        };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let Some(shared) = shared.upgrade() else {
                return Ok(());
            };
            if on_line(&shared, channel, &line, phase) {
                live = true;
            }
        }
    }
}

/// Asks the endpoint for the channel's event stream: the response, once
/// it is a successful `text/event-stream`.
async fn open_stream(client: &RestClient, channel: &str) -> Result<reqwest::Response, Error> {
    let bound = client.command_timeout;
    let request = client
        .streams
        .post(client.endpoint(&format!("subscribe/{}", path_segment(channel))))
        .header(AUTHORIZATION, client.auth())
        .header(ACCEPT, "text/event-stream")
        .header(CACHE_CONTROL, "no-cache")
        .send();
    let response = match tokio::time::timeout(bound, request).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => return Err(Error::unavailable_from("subscribing over REST failed", e)),
        Err(_) => return Err(Error::unavailable("subscribing over REST timed out")),
    };
    let status = response.status();
    let is_stream = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !status.is_success() || !is_stream {
        let body = tokio::time::timeout(bound, response.text())
            .await
            .ok()
            .and_then(|r| r.ok())
            .unwrap_or_default();
        return Err(Error::unavailable(format!(
            "the REST endpoint refused a subscription ({status}): {}",
            body.chars().take(200).collect::<String>()
        )));
    }
    Ok(response)
}

/// One line of the event stream (with its line end): a confirmed
/// subscription makes the channel live and its listeners resync (true is
/// returned); a message reaches its listeners.
fn on_line(shared: &Shared, channel: &str, line: &[u8], phase: &watch::Sender<Phase>) -> bool {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // Like the official client, every `data:` line is one event.
    let Some(data) = line.strip_prefix(b"data:") else {
        return false;
    };
    let data = data.strip_prefix(b" ").unwrap_or(data);
    match parse(data, channel) {
        Some(Line::Subscribed) => {
            phase.send_replace(Phase::Live);
            for listener in shared.channels.listeners(channel) {
                listener.resync();
            }
            true
        }
        Some(Line::Message(payload)) => {
            for listener in shared.channels.listeners(channel) {
                listener.message(payload);
            }
            false
        }
        None => false,
    }
}

enum Line<'a> {
    Subscribed,
    Message(&'a [u8]),
}

/// `subscribe,{channel},{count}` or `message,{channel},{payload}` for our
/// channel (whose name may hold commas, so it is matched whole).
fn parse<'a>(data: &'a [u8], channel: &str) -> Option<Line<'a>> {
    let (kind, rest) = if let Some(rest) = data.strip_prefix(b"message,") {
        (true, rest)
    } else {
        (false, data.strip_prefix(b"subscribe,")?)
    };
    let rest = rest.strip_prefix(channel.as_bytes())?.strip_prefix(b",")?;
    Some(if kind {
        Line::Message(rest)
    } else {
        Line::Subscribed
    })
}

/// A channel name as one URL path segment: everything but unreserved
/// characters percent-encoded (so a `%` in the name survives the server's
/// decoding).
pub(crate) fn path_segment(channel: &str) -> String {
    let mut out = String::with_capacity(channel.len() * 2);
    for byte in channel.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_matched_against_the_whole_channel_name() {
        let channel = "a,b:{c}:events";
        assert!(matches!(
            parse(b"subscribe,a,b:{c}:events,1", channel),
            Some(Line::Subscribed)
        ));
        match parse(b"message,a,b:{c}:events,{\"f\":1,\"x\":\"y,z\"}", channel) {
            Some(Line::Message(payload)) => assert_eq!(payload, b"{\"f\":1,\"x\":\"y,z\"}"),
            _ => panic!("a message"),
        }
        assert!(parse(b"message,other,x", channel).is_none());
    }

    #[test]
    fn channel_names_are_one_path_segment() {
        assert_eq!(
            path_segment("a2:{s%20t}:events"),
            "a2%3A%7Bs%2520t%7D%3Aevents"
        );
    }
}
