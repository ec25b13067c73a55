//! A stream's configuration and state: the marker's payload (content type,
//! TTL and expiry as the creator gave them) and the session's listing (tail,
//! close, deadline).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use a2_core::{Expiry, Millis, ReadRange};
use serde::{Deserialize, Serialize};

use super::offsets::{self, Inserted, Position};
use super::{CREATED, bare_media_type, media_type};
use crate::error::ApiError;
use crate::streams::Engine;

/// What a `PUT` configured, kept as the marker's payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Config {
    /// The `Content-Type` the stream was created with, as given.
    pub content_type: String,
    /// `Stream-TTL`, in seconds: a sliding expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// `Stream-Expires-At`, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// What a fork was made of, so a second `PUT` of it is recognized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkOf>,
    /// `A2-Work: true`: what is appended is work for a2's handlers
    /// (pending), not only output (settled).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub work: bool,
    /// The events a fork (or its sources) inserted, which offsets count
    /// around ([`super::offsets`]): empty for a stream never forked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inserted: Vec<Inserted>,
}

/// A fork's request: its source, the offset (the source's tail when the
/// request named none) and the sub-offset after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ForkOf {
    pub from: String,
    /// The position forked at, in the source's offset space: the base.
    pub offset: u64,
    /// The sub part of that position (0 unless it is inside a chunk a fork
    /// inserted).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub at_sub: u64,
    /// `Stream-Fork-Sub-Offset`.
    pub sub: u64,
    /// Whether the request named the offset (else it took the tail): a
    /// `PUT` of the same fork without one is the same fork, wherever the
    /// source's tail is now.
    #[serde(default = "yes", skip_serializing_if = "Clone::clone")]
    pub given: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn yes() -> bool {
    true
}

impl Config {
    /// Whether a `PUT` asking for `asked` finds this stream as asked (the
    /// inserted events follow from the rest; a fork asked without an offset
    /// matches the one made at any tail).
    pub fn same_as(&self, asked: &Config) -> bool {
        let forks = match (&self.fork, &asked.fork) {
            (None, None) => true,
            (Some(made), Some(asked)) => {
                made.from == asked.from
                    && made.sub == asked.sub
                    && made.given == asked.given
                    && (!asked.given
                        || (made.offset == asked.offset && made.at_sub == asked.at_sub))
            }
            _ => false,
        };
        forks
            && self.content_type == asked.content_type
            && self.ttl_seconds == asked.ttl_seconds
            && self.expires_at == asked.expires_at
            && self.work == asked.work
    }
}

impl Config {
    /// A session written through the JSON API, without a marker.
    pub fn json() -> Self {
        Self {
            content_type: "application/json".into(),
            ttl_seconds: None,
            expires_at: None,
            fork: None,
            work: false,
            inserted: Vec::new(),
        }
    }

    /// Whether messages are JSON values (else the stream is bytes).
    pub fn is_json(&self) -> bool {
        bare_media_type(&self.content_type).eq_ignore_ascii_case("application/json")
    }

    /// Whether SSE can carry the data as text (else base64).
    pub fn is_text(&self) -> bool {
        self.is_json() || media_type(&self.content_type).starts_with("text/")
    }

    /// Whether an append's content type fits the stream's.
    pub fn accepts(&self, content_type: &str) -> bool {
        bare_media_type(&self.content_type).eq_ignore_ascii_case(bare_media_type(content_type))
    }

    /// The session expiry this configuration asks for, if any.
    pub fn expiry(&self) -> Result<Option<Expiry>, ApiError> {
        let ttl = self.ttl_seconds.map(|s| s.saturating_mul(1000).max(1));
        let at = self.expires_at.as_deref().map(parse_time).transpose()?;
        Ok(match (ttl, at) {
            (None, None) => None,
            (Some(ttl), None) => Some(Expiry::ttl(ttl)),
            (None, Some(at)) => Some(Expiry::at(at)),
            (Some(ttl), Some(at)) => Some(Expiry::ttl(ttl).until(at)),
        })
    }
}

/// An RFC 3339 time as store-clock milliseconds.
pub(crate) fn parse_time(text: &str) -> Result<Millis, ApiError> {
    let bad = || {
        ApiError::invalid(format!(
            "Stream-Expires-At {text:?} is not an RFC 3339 time"
        ))
    };
    let t =
        time::OffsetDateTime::parse(text.trim(), &time::format_description::well_known::Rfc3339)
            .map_err(|_| bad())?;
    Millis::try_from(t.unix_timestamp_nanos() / 1_000_000).map_err(|_| bad())
}

/// A stream as a request finds it.
#[derive(Debug, Clone)]
pub(crate) struct Stream {
    /// Shared with the cache: a request reads it, never copies it.
    pub config: Arc<Config>,
    /// The index of the last event: the tail offset.
    pub tail: u64,
    pub closed: bool,
    /// The store clock of its last write.
    pub updated_at: Millis,
    /// When its first event was written: which incarnation of the
    /// session this is (a stream deleted and made again is another).
    pub first_event_at: Millis,
    /// The last index it took from its source, when it is a fork (FK5).
    pub forked_at: Option<u64>,
}

impl Stream {
    /// The position of the event at `index` ([`super::offsets`]).
    pub fn position(&self, index: u64) -> Position {
        offsets::offset_of(&self.config.inserted, index)
    }

    /// The offset of the event at `index`, as the protocol writes it.
    pub fn offset(&self, index: u64) -> String {
        offsets::text(self.position(index))
    }

    /// The last index at or before `position`: where a read from it starts
    /// after.
    pub fn index_of(&self, position: Position) -> u64 {
        offsets::index_after(&self.config.inserted, position)
    }
}

/// The configurations of the streams this process used lately, by name,
/// with the incarnation each was read for (its first event's time and fork
/// index): a marker never changes while its session lives, so a request
/// reads it once, not every time.
#[derive(Debug, Default)]
pub(crate) struct Configs {
    known: Mutex<HashMap<String, Known>>,
}

/// A configuration and the incarnation it was read for: the first event's
/// time and the fork index.
type Known = (Millis, Option<u64>, Arc<Config>);

/// Streams whose configuration a process keeps at most.
const CACHED: usize = 10_000;

impl Configs {
    fn get(
        &self,
        session: &str,
        first_event_at: Millis,
        forked_at: Option<u64>,
    ) -> Option<Arc<Config>> {
        let known = self.known.lock().ok()?;
        let (at, fork, config) = known.get(session)?;
        (*at == first_event_at && *fork == forked_at).then(|| config.clone())
    }

    fn put(
        &self,
        session: &str,
        first_event_at: Millis,
        forked_at: Option<u64>,
        config: &Arc<Config>,
    ) {
        if let Ok(mut known) = self.known.lock() {
            if known.len() >= CACHED && !known.contains_key(session) {
                known.clear();
            }
            known.insert(
                session.to_owned(),
                (first_event_at, forked_at, config.clone()),
            );
        }
    }

    /// Forgets `session` (deleted here: a new stream of that name may come
    /// in the same millisecond).
    pub fn forget(&self, session: &str) {
        if let Ok(mut known) = self.known.lock() {
            known.remove(session);
        }
    }
}

/// The stream `session`, or `None` when there is none.
pub(crate) async fn load(state: &Arc<Engine>, session: &str) -> Result<Option<Stream>, ApiError> {
    super::check_name(session)?;
    let Some(summary) = state.summary(session).await? else {
        return Ok(None);
    };
    let forked_at = summary.forked_from.as_ref().map(|f| f.index);
    let configs = &state.configs;
    if let Some(config) = configs.get(session, summary.first_event_at, forked_at) {
        return Ok(Some(Stream {
            config,
            tail: summary.event_count,
            closed: summary.closed_at.is_some(),
            updated_at: summary.updated_at,
            first_event_at: summary.first_event_at,
            forked_at,
        }));
    }
    // A fork's own marker follows what it took from its source; a fork
    // whose marker is missing takes the source's (at index 1).
    let mut places = vec![1];
    if let Some(origin) = &summary.forked_from {
        places.insert(0, origin.index + 1);
    }
    let mut config = None;
    let mut own = summary.forked_from.is_none();
    for index in places {
        if index < summary.first_index || index > summary.event_count {
            continue;
        }
        let rows = state
            .store
            .read(
                session,
                ReadRange {
                    after_index: index - 1,
                    through_index: Some(index),
                },
            )
            .await?;
        if let Some(row) = rows.into_iter().next()
            && row.event.event_type == CREATED
        {
            config = Some(Arc::new(
                serde_json::from_value(row.event.payload.clone())
                    .unwrap_or_else(|_| Config::json()),
            ));
            own |= summary.forked_from.as_ref().map(|f| f.index + 1) == Some(index);
            break;
        }
    }
    // Only the stream's own marker is kept: a stream without one yet (a
    // fork whose marker is still being written, which reads as its
    // source's meanwhile) is read again next time.
    if let Some(config) = config.as_ref().filter(|_| own) {
        configs.put(session, summary.first_event_at, forked_at, config);
    }
    Ok(Some(Stream {
        config: config.unwrap_or_else(|| Arc::new(Config::json())),
        tail: summary.event_count,
        closed: summary.closed_at.is_some(),
        first_event_at: summary.first_event_at,
        forked_at,
        updated_at: summary.updated_at,
    }))
}

/// The stream `session`, or the protocol's 404 (410 for a deleted stream
/// whose forks live on).
pub(crate) async fn require(state: &Arc<Engine>, session: &str) -> Result<Stream, ApiError> {
    match load(state, session).await? {
        Some(stream) => Ok(stream),
        None => Err(super::forks::missing(state, session).await),
    }
}

/// A read of a stream with a TTL extends it, as a write does (the protocol
/// counts reads as activity; a2 counts writes): once a tenth of the TTL
/// has passed since the last activity, the read sets the same expiry again.
pub(crate) async fn touch(
    state: &Arc<Engine>,
    session: &str,
    stream: &Stream,
) -> Result<(), ApiError> {
    let Some(ttl) = stream.config.ttl_seconds else {
        return Ok(());
    };
    let now = state.store.clock().now_ms();
    let idle = now.saturating_sub(stream.updated_at);
    if (idle as u64).saturating_mul(10) < ttl.saturating_mul(1000) {
        return Ok(());
    }
    if let Some(expiry) = stream.config.expiry()? {
        match state.store.set_expiry(session, expiry).await {
            Ok(_) => {}
            // Expired or gone meanwhile: the read itself says so.
            Err(e) if e.code() == a2_core::ErrorCode::InvalidArgument => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
