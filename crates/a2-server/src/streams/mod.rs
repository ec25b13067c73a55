//! The Durable Streams engine: session logs as the protocol's streams at
//! `/v1/stream/{session}`:
//! byte streams of any content type and JSON streams, catch-up reads from an
//! offset, long-poll and SSE live reads, closure, TTL and expiry, and forks.
//!
//! # Mapping (docs/http.md has the whole table)
//! - A stream is a session. `PUT` appends one settled *marker* event
//!   (`a2.stream.created`, id `a2.stream.created`) whose payload is the
//!   stream's configuration (content type, TTL, expiry as given), so an empty
//!   stream exists, a second `PUT` with the same configuration is a replay
//!   (A5) and one with another configuration conflicts. A session written
//!   through the JSON API needs no `PUT`: without a marker it is a JSON
//!   stream.
//! - Each append is events of the session, settled at append (output, not
//!   work for handlers): in a JSON stream one event of type `message` per
//!   message (an array is flattened one level), in a byte stream one event
//!   of type `chunk` per `POST` whose payload is the body — a JSON string
//!   when it is UTF-8, else `{"base64": …}`. Reads concatenate the chunks.
//!   Data is output (settled), unless the stream was created with
//!   `A2-Work: true`: then it is pending work for a2's handlers, whose
//!   completions' events readers see too.
//! - An offset is the index of the last event read, written
//!   `{index:016}_{0:016}` so offsets sort as strings; `-1` is the start and
//!   `now` the tail.
//! - Closing is the session's close (CL1); a TTL is the session's sliding
//!   expiry (EX1) and `Stream-Expires-At` its absolute one; a fork is the
//!   session's fork (FK1) at the offset's index, followed by the fork's own
//!   marker.

pub(crate) mod config;
pub(crate) mod content;
pub(crate) mod forks;
pub(crate) mod offsets;
pub(crate) mod producers;
pub(crate) mod subscriptions;

use std::sync::Arc;
use std::time::Duration;

use a2_core::{
    AppendOptions, AppendOutcome, CompleteOutcome, CompleteRequest, ForkOutcome,
    ListSessionsOptions, NewEvent, SessionSummary, Store,
};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use offsets::Position;

/// The Durable Streams engine of one server process: the store it works
/// on, and what it keeps of the streams it serves — their configurations,
/// their writers' state and the subscriptions, each a cache of the log.
/// The HTTP handlers (`routes::streams`) call it; it knows nothing of
/// them.
pub(crate) struct Engine {
    /// The store every stream lives in.
    pub store: Arc<dyn Store>,
    /// Cancelled when the server shuts down: background work stops.
    pub shutdown: CancellationToken,
    /// How often the subscription sweep runs.
    pub sweep: Duration,
    pub configs: config::Configs,
    pub writers: producers::Writers,
    pub subscriptions: subscriptions::Subscriptions,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

impl Engine {
    /// The engine of a server on `store`, whose background work (the
    /// subscription sweep, every `sweep`) stops when `shutdown` is
    /// cancelled; `start` begins it.
    pub fn new(store: Arc<dyn Store>, shutdown: CancellationToken, sweep: Duration) -> Self {
        Self {
            store,
            shutdown,
            sweep,
            configs: config::Configs::default(),
            writers: producers::Writers::default(),
            subscriptions: subscriptions::Subscriptions::default(),
        }
    }

    /// Starts the engine's background work: the subscription sweep.
    pub fn start(self: &Arc<Self>) {
        subscriptions::spawn_sweep(self.clone());
    }

    /// Appends through the store (see `Store::append_with`) and tells the
    /// subscriptions watching `session`: this process's appends, completions
    /// and forks reach them through these three methods, at once, instead of
    /// at the next sweep.
    pub async fn append_with(
        self: &Arc<Self>,
        session: &str,
        events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> a2_core::Result<AppendOutcome> {
        let outcome = self.store.append_with(session, events, options).await?;
        if !outcome.events.is_empty() {
            subscriptions::appended(self, session);
        }
        Ok(outcome)
    }

    /// Completes an attempt through the store (`Store::complete_attempt`);
    /// the events it returned reach the session's subscriptions.
    pub async fn complete(
        self: &Arc<Self>,
        request: CompleteRequest,
    ) -> a2_core::Result<CompleteOutcome> {
        let session = request.session.clone();
        let outcome = self.store.complete_attempt(request).await?;
        if matches!(&outcome, CompleteOutcome::Completed { events } if !events.is_empty()) {
            subscriptions::appended(self, &session);
        }
        Ok(outcome)
    }

    /// Forks through the store (`Store::fork`); a new fork reaches the
    /// subscriptions whose patterns match it.
    pub async fn fork(
        self: &Arc<Self>,
        source: &str,
        at_index: u64,
        target: &str,
    ) -> a2_core::Result<ForkOutcome> {
        let outcome = self.store.fork(source, at_index, target).await?;
        if matches!(outcome, ForkOutcome::Forked { .. }) {
            subscriptions::appended(self, target);
        }
        Ok(outcome)
    }

    /// Deletes a session through the store (`Store::clear`, I4) and forgets
    /// the stream configuration kept of it.
    pub async fn clear(&self, session: &str) -> a2_core::Result<()> {
        self.store.clear(session).await?;
        self.configs.forget(session);
        Ok(())
    }

    /// The listing of one session (I1): its counters, tail and trim point,
    /// or `None` when it has no events.
    pub async fn summary(&self, session: &str) -> a2_core::Result<Option<SessionSummary>> {
        let listed = self
            .store
            .list_sessions(ListSessionsOptions::new(1).prefix(Some(session.to_owned())))
            .await?;
        // The id itself sorts first among the ids it prefixes.
        Ok(listed
            .sessions
            .into_iter()
            .next()
            .filter(|s| s.session_id == session))
    }
}

/// The event type of the configuration marker.
pub(crate) const CREATED: &str = "a2.stream.created";
/// The event type of messages appended to a JSON stream.
pub(crate) const MESSAGE: &str = "message";
/// The event type of an append to a byte stream.
pub(crate) const CHUNK: &str = "chunk";

/// The path prefix of streams, as `Stream-Forked-From` names them.
const PREFIX: &str = "/v1/stream/";

/// Where a read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum At {
    /// After this position (`{0}_{0}`: from the start).
    After(Position),
    /// At the tail, whatever it is when the read starts.
    Now,
}

/// Parses an offset: `-1`, `now`, `{16 digits}_{16 digits}` (a position:
/// see [`offsets`]), or the 20-digit offsets of earlier a2 versions (an
/// index).
pub(crate) fn parse_offset(text: &str) -> Result<At, ApiError> {
    let malformed = || ApiError::invalid(format!("malformed offset {text:?}"));
    match text {
        "-1" => Ok(At::After(Position::index(0))),
        "now" => Ok(At::Now),
        t if t.len() == 33
            && t.as_bytes()[16] == b'_'
            && t[..16].bytes().all(|b| b.is_ascii_digit())
            && t[17..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            let base = t[..16].parse().map_err(|_| malformed())?;
            let sub = t[17..].parse().map_err(|_| malformed())?;
            Ok(At::After(Position { base, sub }))
        }
        t if t.len() == 20 && t.bytes().all(|b| b.is_ascii_digit()) => t
            .parse()
            .map(|index| At::After(Position::index(index)))
            .map_err(|_| malformed()),
        _ => Err(malformed()),
    }
}

/// A header that is a whole number as the protocol writes one: digits,
/// without a sign or a leading zero (`0` itself is one).
pub(crate) fn whole_number(text: &str, name: &str) -> Result<u64, ApiError> {
    let canonical = text == "0"
        || (!text.is_empty() && !text.starts_with('0') && text.bytes().all(|b| b.is_ascii_digit()));
    if !canonical {
        return Err(ApiError::invalid(format!(
            "{name} must be a whole number, not {text:?}"
        )));
    }
    text.parse()
        .map_err(|_| ApiError::invalid(format!("{name} {text:?} is too large")))
}

/// The media type of a `Content-Type` (lowercased, without parameters).
pub(crate) fn media_type(content_type: &str) -> String {
    bare_media_type(content_type).to_ascii_lowercase()
}

/// The media type of a `Content-Type` as written (without parameters).
pub(crate) fn bare_media_type(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or("").trim()
}

/// The session a stream path names (`/v1/stream/{session}`, or the bare
/// name).
pub(crate) fn session_of_path(path: &str) -> &str {
    path.strip_prefix(PREFIX).unwrap_or(path)
}

/// Refuses a session id the store would refuse, as the protocol's 400,
/// and the names the protocol reserves for the server (`__ds/…`: here the
/// registers of forks) as unknown.
pub(crate) fn check_name(session: &str) -> Result<(), ApiError> {
    if session.starts_with(RESERVED) {
        return Err(ApiError::not_found(format!(
            "{session:?} is reserved for the server"
        )));
    }
    a2_core::validate::session_id(session).map_err(ApiError::from)
}

/// The prefix of the stream names the protocol reserves for the server.
pub(crate) const RESERVED: &str = "__ds/";

/// FNV-1a: a stable, dependency-free hash for the ETag's stream part.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_parse_back_to_their_positions() {
        let at = |base, sub| At::After(Position { base, sub });
        let text = offsets::text(Position { base: 42, sub: 7 });
        assert_eq!(parse_offset(&text).unwrap(), at(42, 7));
        assert_eq!(parse_offset("-1").unwrap(), at(0, 0));
        assert_eq!(parse_offset("now").unwrap(), At::Now);
        assert_eq!(parse_offset("00000000000000000042").unwrap(), at(42, 0));
        for bad in ["", "abc", "12", "-2", "0000000000000000x", "1,2", " 1"] {
            assert!(parse_offset(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn whole_numbers_have_no_sign_and_no_leading_zero() {
        assert_eq!(whole_number("0", "n").unwrap(), 0);
        assert_eq!(whole_number("3600", "n").unwrap(), 3600);
        for bad in [
            "",
            "01",
            "+1",
            "-1",
            "1.5",
            " 1",
            "1e3",
            "99999999999999999999",
        ] {
            assert!(whole_number(bad, "n").is_err(), "{bad:?}");
        }
    }
}
