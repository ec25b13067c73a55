//! Waking: linking the streams a pattern matches, starting a wake
//! generation when a linked stream has work and no wake is in progress,
//! and telling the consumer — a signed webhook call, or an event in the
//! wake stream.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::{AppendOptions, ListSessionsOptions, Millis, SessionList};
use serde_json::{Value, json};

use super::fold::{Change, Kind, Sub, TOKEN_TTL_MS, Token, stream_info};
use super::glob::literal_prefix;
use super::{PREFIX, Seen, decide, keys, load};
use crate::error::ApiError;
use crate::streams::Engine;
use crate::streams::{RESERVED, config, content};

/// Ticks between two sweeps of a process that knows of no subscription.
const IDLE_SWEEPS: u64 = 10;
/// Streams a sweep lists per pattern at most.
const LISTED: usize = 10_000;
/// The longest wait between two webhook attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// A wake just started: who to tell, with the token only this process has.
pub(crate) struct Started {
    pub generation: u64,
    pub token: Option<String>,
}

/// Starts a wake of `seen.sub` after `changes` — pushes its change onto
/// them — if a linked stream has work and no wake is in progress. A
/// webhook's wake comes with a callback token and a lease; a pull-wake's
/// waits for a claim.
pub(crate) fn start(seen: &Seen<'_>, changes: &mut Vec<Change>) -> Option<Started> {
    let mut sub = seen.sub.clone();
    for change in changes.iter() {
        sub.fold_change(change.clone());
    }
    if sub.live_wake(seen.now).is_some() {
        return None;
    }
    let pending = sub
        .links
        .keys()
        .any(|path| sub.pending(path, seen.tails.get(path).copied().unwrap_or(0)));
    if !pending {
        return None;
    }
    let generation = sub.generation + 1;
    let snapshot = sub
        .links
        .keys()
        .map(|path| (path.clone(), seen.tails.get(path).copied().unwrap_or(0)))
        .collect();
    let (token, lease_until, raw) = if sub.spec.kind == Kind::Webhook {
        let (raw, hash) = keys::token();
        let token = Token {
            hash,
            expires: seen.now + TOKEN_TTL_MS,
        };
        let lease = seen.now + sub.spec.lease_ttl_ms as Millis;
        (Some(token), Some(lease), Some(raw))
    } else {
        (None, None, None)
    };
    changes.push(Change::Woke {
        generation,
        wake_id: keys::wake_id(),
        snapshot,
        token,
        lease_until,
    });
    Some(Started {
        generation,
        token: raw,
    })
}

/// Called after an append to `session` by this process: the subscriptions
/// known to watch it are looked at, in the background.
pub(crate) fn appended(state: &Arc<Engine>, session: &str) {
    if session.starts_with(RESERVED) {
        return;
    }
    let now = state.store.clock().now_ms();
    let ids = state.subscriptions.watching(session, now);
    if ids.is_empty() {
        return;
    }
    let state = state.clone();
    let path = session.to_owned();
    tokio::spawn(async move {
        for id in ids {
            let known = match super::tail(&state, &path).await {
                Ok(tail) => HashMap::from([(path.clone(), tail)]),
                Err(_) => HashMap::new(),
            };
            if let Err(error) = evaluate(&state, &id, &known).await {
                tracing::warn!(subscription = %id, %error, "waking a subscription failed");
            }
        }
    });
}

/// Links the `candidates` the pattern matches (and drops glob links to
/// streams that are gone), then starts a wake if there is work.
async fn evaluate(
    state: &Arc<Engine>,
    id: &str,
    candidates: &HashMap<String, u64>,
) -> Result<(), ApiError> {
    let waiting = backing_off(state, id);
    let (sub, tails, started) = decide(state, id, candidates, |seen| {
        let mut changes = Vec::new();
        for (path, tail) in candidates {
            let exists = *tail > 0;
            if exists && seen.sub.matches(path) && !seen.sub.links.get(path).is_some_and(|l| l.glob)
            {
                changes.push(Change::Linked {
                    path: path.clone(),
                    glob: true,
                    acked: seen.sub.links.get(path).and_then(|l| l.acked),
                });
            }
        }
        for (path, link) in &seen.sub.links {
            if link.glob && !link.explicit && seen.tails.get(path).copied().unwrap_or(0) == 0 {
                changes.push(Change::Dropped { path: path.clone() });
            }
        }
        let started = if waiting {
            None
        } else {
            start(&seen, &mut changes)
        };
        Ok((changes, started))
    })
    .await?;
    tell(state, &sub, &tails, started);
    Ok(())
}

/// `changes`, then the end of the wake in progress (its snapshot
/// acknowledged or not) and the start of the next one, if a linked stream
/// has work: what a [`decide`] that ends a wake returns.
pub(crate) fn end_wake(
    seen: &Seen<'_>,
    mut changes: Vec<Change>,
    snapshot_acked: bool,
) -> (Vec<Change>, Option<Started>) {
    changes.push(Change::Ended { snapshot_acked });
    let next = start(seen, &mut changes);
    (changes, next)
}

/// Tells the consumer of a wake just started, if one did: a webhook call,
/// or an event in the wake stream.
pub(crate) fn tell(
    state: &Arc<Engine>,
    sub: &Sub,
    tails: &HashMap<String, u64>,
    started: Option<Started>,
) {
    let Some(started) = started else {
        return;
    };
    let state = state.clone();
    let sub = sub.clone();
    let tails = tails.clone();
    tokio::spawn(async move {
        let outcome = match sub.spec.kind {
            Kind::Webhook => deliver(&state, &sub, &tails, started).await,
            Kind::PullWake => post_wake(&state, &sub, started.generation).await,
        };
        if let Err(error) = outcome {
            tracing::warn!(subscription = %sub.id, %error, "telling a subscription's consumer failed");
        }
    });
}

/// The notification of a webhook wake, signed; a `{"done": true}` answer
/// ends the wake with its snapshot acknowledged.
async fn deliver(
    state: &Arc<Engine>,
    sub: &Sub,
    tails: &HashMap<String, u64>,
    started: Started,
) -> Result<(), ApiError> {
    let (Some(url), Some(wake), Some(token)) = (&sub.spec.webhook, &sub.wake, &started.token)
    else {
        return Ok(());
    };
    let body = json!({
        "subscription_id": sub.id,
        "wake_id": wake.id,
        "generation": started.generation,
        "streams": stream_info(sub, tails),
        "callback_url": action_url(sub, "callback"),
        "callback_token": token,
    })
    .to_string();
    let subscriptions = &state.subscriptions;
    subscriptions.signer.publish(state).await?;
    let signature = subscriptions
        .signer
        .sign(&body, state.store.clock().now_ms() / 1000);
    let answer = subscriptions
        .client()
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-signature", signature)
        .body(body)
        .send()
        .await;
    let answer = match answer {
        Ok(answer) if answer.status().is_success() => answer,
        Ok(answer) => {
            failed(state, &sub.id);
            tracing::warn!(subscription = %sub.id, status = %answer.status(), "the webhook refused a notification");
            return Ok(());
        }
        Err(error) => {
            failed(state, &sub.id);
            tracing::warn!(subscription = %sub.id, %error, "a webhook notification failed");
            return Ok(());
        }
    };
    if let Ok(mut failures) = subscriptions.failures.lock() {
        failures.remove(&sub.id);
    }
    let done = answer
        .bytes()
        .await
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .is_some_and(|v| v["done"] == Value::Bool(true));
    if !done {
        return Ok(());
    }
    let generation = started.generation;
    let (sub, tails, next) = decide(state, &sub.id, &HashMap::new(), |seen| {
        let current = seen.sub.generation == generation && seen.sub.live_wake(seen.now).is_some();
        if !current {
            return Ok((Vec::new(), None));
        }
        Ok(end_wake(&seen, Vec::new(), true))
    })
    .await?;
    tell(state, &sub, &tails, next);
    Ok(())
}

/// A pull-wake's wake event, appended to its wake stream (a JSON stream
/// that must exist).
async fn post_wake(state: &Arc<Engine>, sub: &Sub, generation: u64) -> Result<(), ApiError> {
    let Some(wake_stream) = &sub.spec.wake_stream else {
        return Ok(());
    };
    let Some(stream) = config::load(state, wake_stream).await? else {
        tracing::warn!(subscription = %sub.id, %wake_stream, "the wake stream does not exist");
        return Ok(());
    };
    let first = sub
        .wake
        .as_ref()
        .and_then(|w| {
            w.snapshot
                .iter()
                .find(|(path, tail)| sub.pending(path, *tail))
                .map(|(path, _)| path.clone())
        })
        .unwrap_or_default();
    let event = json!({
        "type": "wake",
        "subscription_id": sub.id,
        "stream": first,
        "generation": generation,
        "ts": state.store.clock().now_ms(),
    });
    let events = content::events_of(&stream.config, event.to_string().as_bytes(), false)?;
    state
        .append_with(wake_stream, events, AppendOptions::new())
        .await?;
    Ok(())
}

/// The URL of one of a subscription's actions.
pub(crate) fn action_url(sub: &Sub, action: &str) -> String {
    let segments = ["v1", "stream", "__ds", "subscriptions", &sub.id, action];
    match reqwest::Url::parse(&sub.base) {
        // The URL parser encodes each segment (an id may hold any byte).
        Ok(mut url) => {
            if let Ok(mut path) = url.path_segments_mut() {
                path.clear().extend(segments);
            }
            url.into()
        }
        Err(_) => format!("{}/v1/stream/{PREFIX}{}/{action}", sub.base, sub.id),
    }
}

/// Notes a failed webhook call: the next wake waits, twice as long each
/// time (1 s, 2 s, … 60 s).
fn failed(state: &Arc<Engine>, id: &str) {
    if let Ok(mut failures) = state.subscriptions.failures.lock() {
        let count = failures.get(id).map_or(0, |(n, _)| *n) + 1;
        let wait = Duration::from_secs(1u64 << (count - 1).min(6)).min(MAX_BACKOFF);
        failures.insert(id.to_owned(), (count, Instant::now() + wait));
    }
}

fn backing_off(state: &Arc<Engine>, id: &str) -> bool {
    state
        .subscriptions
        .failures
        .lock()
        .ok()
        .and_then(|f| f.get(id).map(|(_, until)| *until > Instant::now()))
        .unwrap_or(false)
}

/// Whether this process's last webhook call of `id` failed.
pub(crate) fn failing(state: &Arc<Engine>, id: &str) -> bool {
    state
        .subscriptions
        .failures
        .lock()
        .is_ok_and(|f| f.contains_key(id))
}

/// Sweeps the subscriptions every `Config::subscription_sweep` (a second
/// by default) until the server shuts down.
/// A process that knows of no subscription sweeps only every
/// [`IDLE_SWEEPS`]th tick: looking for subscriptions another process made
/// costs a listing (an HTTP request on the REST store), and the process
/// that made one sweeps it every period anyway.
pub(crate) fn spawn_sweep(state: Arc<Engine>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(state.sweep);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks: u64 = 0;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    ticks += 1;
                    let idle = state.subscriptions.knows_none();
                    if idle && ticks % IDLE_SWEEPS != 1 {
                        continue;
                    }
                    if let Err(error) = sweep(&state).await {
                        tracing::debug!(%error, "sweeping subscriptions failed");
                    }
                }
                () = state.shutdown.cancelled() => break,
            }
        }
    });
}

/// One sweep: every subscription, with the streams its pattern matches.
async fn sweep(state: &Arc<Engine>) -> Result<(), ApiError> {
    let mut cursor = None;
    loop {
        let page = sessions_page(state, PREFIX, cursor).await?;
        for summary in &page.sessions {
            let id = &summary.session_id[PREFIX.len()..];
            let sub = match load(state, id).await {
                Ok(Some(sub)) => sub,
                Ok(None) => continue,
                Err(error) => {
                    tracing::debug!(subscription = %id, %error, "reading a subscription failed");
                    continue;
                }
            };
            let candidates = match &sub.spec.pattern {
                Some(pattern) => matching(state, pattern).await?,
                None => HashMap::new(),
            };
            if let Err(error) = evaluate(state, id, &candidates).await {
                tracing::debug!(subscription = %id, %error, "sweeping a subscription failed");
            }
            if let Err(error) = super::compact(state, &sub).await {
                tracing::debug!(subscription = %id, %error, "compacting a subscription failed");
            }
        }
        cursor = page.cursor;
        if cursor.is_none() {
            return Ok(());
        }
    }
}

/// A page of the sessions whose id starts with `prefix`, after `cursor`.
async fn sessions_page(
    state: &Engine,
    prefix: &str,
    cursor: Option<String>,
) -> Result<SessionList, ApiError> {
    let options = ListSessionsOptions::new(1_000)
        .prefix(Some(prefix.to_owned()))
        .cursor(cursor);
    Ok(state.store.list_sessions(options).await?)
}

/// The streams `pattern` matches (at most [`LISTED`]), with their tails.
pub(crate) async fn matching(
    state: &Arc<Engine>,
    pattern: &str,
) -> Result<HashMap<String, u64>, ApiError> {
    let prefix = literal_prefix(pattern);
    let mut found = HashMap::new();
    let mut cursor = None;
    while found.len() < LISTED {
        let page = sessions_page(state, &prefix, cursor).await?;
        found.extend(
            page.sessions
                .into_iter()
                .filter(|s| {
                    !s.session_id.starts_with(RESERVED)
                        && super::glob::glob_match(pattern, &s.session_id)
                })
                .map(|s| (s.session_id, s.event_count)),
        );
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }
    Ok(found)
}
