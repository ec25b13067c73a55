//! Subscriptions: the protocol's reserved `__ds/subscriptions/{id}` API.
//! A subscription links streams — named explicitly, or matched by a glob
//! pattern — and wakes a consumer when one of them has data past what the
//! consumer acknowledged: a *webhook* subscription `POST`s a signed
//! notification with a callback token; a *pull-wake* subscription appends
//! a wake event to a stream its workers follow, and one worker at a time
//! claims the wake under a lease. Acknowledging offsets and saying `done`
//! ends the wake; a consumer of a stale generation is fenced.
//!
//! # In a2's model
//! A subscription is the session `__ds/subscriptions/{id}`: its first
//! event holds the configuration, and every change — a stream linked or
//! unlinked, a wake, a claim, acknowledgements, the wake's end — is an
//! `a2.subscription` event after it. Its state is their fold, and each
//! decision is appended only at the frontier it was taken at (A13), so
//! processes sharing a store agree on every generation and every claim,
//! and a restart loses nothing but the in-flight HTTP call.
//!
//! What wakes a subscription: an append through the Durable Streams face
//! or the JSON API of this process (at once), and a sweep each process
//! runs every second (every ten while it knows of no subscription), which
//! links new streams its patterns match, sees appends made elsewhere
//! (another process, the runtime) and wakes again when a lease ran out. Webhook targets must be `https` on a public host,
//! or `http` on loopback.

pub(crate) mod fold;
mod glob;
pub(crate) mod keys;
pub(crate) mod wake;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use a2_core::{AppendOptions, ErrorCode, Millis, ReadEventsOptions};
use axum::http::StatusCode;

pub(crate) use fold::PREFIX;
use fold::{Change, Sub};
pub(crate) use keys::Signer;
pub(crate) use wake::{appended, spawn_sweep};

use crate::error::ApiError;
use crate::streams::Engine;

/// Decisions retried at most this often when other writers keep coming
/// first: each turn around is another writer's success.
const MAX_TURNS: usize = 64;

/// What one process keeps of the subscriptions: their folded states, which
/// streams each watches (for the append hook), webhook failures, and its
/// signing key.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    folded: Mutex<HashMap<String, Sub>>,
    index: Mutex<Index>,
    failures: Mutex<HashMap<String, (u32, Instant)>>,
    pub signer: Signer,
    client: std::sync::OnceLock<reqwest::Client>,
}

/// Which streams each subscription watches: its pattern and its links.
#[derive(Debug, Default)]
struct Index {
    watched: HashMap<String, (Option<String>, HashSet<String>)>,
}

impl Subscriptions {
    fn remember(&self, sub: &Sub) {
        if let Ok(mut folded) = self.folded.lock() {
            folded.insert(sub.id.clone(), sub.clone());
        }
        if let Ok(mut index) = self.index.lock() {
            let links = sub.links.keys().cloned().collect();
            index
                .watched
                .insert(sub.id.clone(), (sub.spec.pattern.clone(), links));
        }
    }

    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut folded) = self.folded.lock() {
            folded.remove(id);
        }
        if let Ok(mut index) = self.index.lock() {
            index.watched.remove(id);
        }
    }

    /// Whether this process knows of no subscription.
    fn knows_none(&self) -> bool {
        self.index
            .lock()
            .is_ok_and(|index| index.watched.is_empty())
    }

    /// The subscriptions watching `path` that an append to it may wake:
    /// not those this process last saw linking it with a wake in progress
    /// (an append to a busy stream, token after token, costs nothing then;
    /// the wake's end looks for more work, and the sweep would too).
    fn watching(&self, path: &str, now: Millis) -> Vec<String> {
        let Ok(index) = self.index.lock() else {
            return Vec::new();
        };
        let busy = |id: &str| {
            self.folded.lock().is_ok_and(|folded| {
                folded
                    .get(id)
                    .is_some_and(|sub| sub.links.contains_key(path) && sub.live_wake(now).is_some())
            })
        };
        index
            .watched
            .iter()
            .filter(|(_, (pattern, links))| {
                links.contains(path)
                    || pattern
                        .as_deref()
                        .is_some_and(|p| glob::glob_match(p, path))
            })
            .map(|(id, _)| id.clone())
            .filter(|id| !busy(id))
            .collect()
    }

    fn client(&self) -> &reqwest::Client {
        self.client.get_or_init(|| {
            reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default()
        })
    }
}

/// The session of subscription `id`.
pub(crate) fn session_of(id: &str) -> String {
    format!("{PREFIX}{id}")
}

/// A subscription-API error: the protocol's code and status.
pub(crate) fn error(
    status: StatusCode,
    code: &'static str,
    message: impl Into<String>,
) -> ApiError {
    ApiError::new(status, code, message)
}

pub(crate) fn not_found(id: &str) -> ApiError {
    error(
        StatusCode::NOT_FOUND,
        "SUBSCRIPTION_NOT_FOUND",
        format!("no subscription {id:?}"),
    )
}

/// The subscription `id` folded through its tail, or `None`.
pub(crate) async fn load(state: &Arc<Engine>, id: &str) -> Result<Option<Sub>, ApiError> {
    // A compaction elsewhere may trim what a read was about to fold: read
    // again from the compaction.
    let mut turns = 0;
    loop {
        match fold(state, id).await {
            Err(e) if e.code() == ErrorCode::Trimmed && turns < 3 => turns += 1,
            outcome => return outcome.map_err(ApiError::from),
        }
    }
}

async fn fold(state: &Arc<Engine>, id: &str) -> a2_core::Result<Option<Sub>> {
    let session = session_of(id);
    let Some(summary) = state.summary(&session).await? else {
        state.subscriptions.forget(id);
        return Ok(None);
    };
    // A cached fold of this incarnation, unless a compaction trimmed what
    // it would read next.
    let cached = state
        .subscriptions
        .folded
        .lock()
        .ok()
        .and_then(|folded| folded.get(id).cloned())
        .filter(|s| {
            s.incarnation == summary.first_event_at
                && s.through <= summary.event_count
                && s.through + 1 >= summary.first_index
        });
    let mut sub = match cached {
        Some(sub) => sub,
        None => {
            let first = state
                .store
                .read_events(
                    &session,
                    ReadEventsOptions::new(1).after_index(summary.first_index.saturating_sub(1)),
                )
                .await?;
            let Some(row) = first.events.first() else {
                return Ok(None);
            };
            Sub::from_first(id, &row.event, summary.first_event_at).ok_or_else(|| {
                a2_core::Error::corrupted(
                    format!("subscription {id:?} does not start with its configuration"),
                    Some(&session),
                    Some(row.event.index),
                )
            })?
        }
    };
    while sub.through < summary.event_count {
        let page = state
            .store
            .read_events(
                &session,
                ReadEventsOptions::new(1_000).after_index(sub.through),
            )
            .await?;
        if page.events.is_empty() {
            break;
        }
        for row in &page.events {
            sub.fold(&row.event);
        }
    }
    state.subscriptions.remember(&sub);
    Ok(Some(sub))
}

/// Events of a subscription's log past its last compaction after which the
/// sweep compacts it.
const COMPACT_AFTER: u64 = 1_000;

/// Writes the whole state of subscription `id` as one event and trims what
/// came before, once its log grew [`COMPACT_AFTER`] events past the last
/// compaction. A decision of another process in between only moves the
/// compaction later (A13); readers folding from a cached state read on,
/// cold ones start at the compaction.
async fn compact(state: &Arc<Engine>, sub: &Sub) -> Result<(), ApiError> {
    if sub.through - sub.first < COMPACT_AFTER {
        return Ok(());
    }
    let (after, _, ()) = decide(state, &sub.id, &HashMap::new(), |seen| {
        let due = seen.sub.through - seen.sub.first >= COMPACT_AFTER;
        let changes = if due {
            vec![seen.sub.compacted()]
        } else {
            Vec::new()
        };
        Ok((changes, ()))
    })
    .await?;
    if after.first > 1 {
        state
            .store
            .trim(&session_of(&sub.id), after.first - 1)
            .await?;
    }
    Ok(())
}

/// The tail index of stream `path` (0: none).
pub(crate) async fn tail(state: &Arc<Engine>, path: &str) -> Result<u64, ApiError> {
    Ok(state.summary(path).await?.map_or(0, |s| s.event_count))
}

/// The tails of the streams `sub` links, beside those `known`.
async fn tails(
    state: &Arc<Engine>,
    sub: &Sub,
    known: &HashMap<String, u64>,
) -> Result<HashMap<String, u64>, ApiError> {
    let mut tails = known.clone();
    // Many streams a pattern linked: one listing of the pattern's streams
    // (a page per 1 000) rather than one listing each.
    let missing = sub.links.keys().filter(|p| !tails.contains_key(*p)).count();
    if let Some(pattern) = sub.spec.pattern.as_deref().filter(|_| missing > 8) {
        for (path, tail) in wake::matching(state, pattern).await? {
            tails.entry(path).or_insert(tail);
        }
    }
    for path in sub.links.keys() {
        if !tails.contains_key(path) {
            tails.insert(path.clone(), tail(state, path).await?);
        }
    }
    Ok(tails)
}

/// What a decision sees: the subscription, its streams' tails and the time.
pub(crate) struct Seen<'a> {
    pub sub: &'a Sub,
    pub tails: &'a HashMap<String, u64>,
    pub now: Millis,
}

/// Takes a decision on subscription `id` and appends its changes at the
/// frontier it was taken at; another writer first means deciding again.
/// `known` are tails already read (of streams a pattern may link).
/// Returns the state after, the tails seen and the decision's answer.
pub(crate) async fn decide<T>(
    state: &Arc<Engine>,
    id: &str,
    known: &HashMap<String, u64>,
    mut decision: impl FnMut(Seen<'_>) -> Result<(Vec<Change>, T), ApiError>,
) -> Result<(Sub, HashMap<String, u64>, T), ApiError> {
    for _ in 0..MAX_TURNS {
        let Some(mut sub) = load(state, id).await? else {
            return Err(not_found(id));
        };
        let tails = tails(state, &sub, known).await?;
        let now = state.store.clock().now_ms();
        let (changes, answer) = decision(Seen {
            sub: &sub,
            tails: &tails,
            now,
        })?;
        if changes.is_empty() {
            return Ok((sub, tails, answer));
        }
        let mut options = AppendOptions::new();
        options.if_frontier = Some(sub.through);
        let events = changes.iter().map(Change::event).collect();
        match state
            .store
            .append_with(&session_of(id), events, options)
            .await
        {
            Ok(appended) => {
                for row in &appended.events {
                    sub.fold(&row.event);
                }
                state.subscriptions.remember(&sub);
                return Ok((sub, tails, answer));
            }
            Err(e) if e.code() == ErrorCode::FrontierMoved => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::from(a2_core::Error::unavailable(format!(
        "subscription {id:?} changed {MAX_TURNS} times while deciding; try again"
    ))))
}
