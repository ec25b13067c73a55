//! Two `RedisStore` instances on one server, as two processes would have
//! them, one module per subject: feeds (ST1, ST2, ST3), presence (P4, P5),
//! group commit (RD1, RD7, AC2), claims (C6, E1), keys (RD3, RD4),
//! expiry on the server (EX5), forks (FK6) and trims (TR1, E1).
//! This file holds what they share.

#[path = "../common/mod.rs"]
mod common;

mod claims;
mod expiry;
mod feeds;
mod fork;
mod group_commit;
mod keys;
mod presence;
mod trim;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::*;
use a2_redis::testing::{NAMES_KEPT, RedisServer};
use a2_redis::{RedisOptions, RedisStore};
use futures::StreamExt;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);

/// Two stores sharing one clock, prefix and server.
async fn pair(
    server: &RedisServer,
    label: &str,
    tune: fn(RedisOptions) -> RedisOptions,
) -> (RedisStore, RedisStore, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(common::START_MS));
    let options = tune(common::options(label, clock.clone()));
    let a = common::open(server, options.clone()).await;
    let b = common::open(server, options).await;
    (a, b, clock)
}

/// [`pair`] whose feeds re-read only every ten minutes: what they yield
/// within a test's wait came to them by push (ST2).
async fn push_only_pair(server: &RedisServer, label: &str) -> (RedisStore, RedisStore) {
    let (a, b, _clock) = pair(server, label, |o| {
        o.follow_refresh(Duration::from_secs(600))
    })
    .await;
    (a, b)
}

/// The events of `session`'s log, read whole.
async fn log_of(store: &RedisStore, session: &str) -> Vec<Event> {
    let rows = store.read(session, ReadRange::default()).await.unwrap();
    rows.into_iter().map(|row| row.event).collect()
}

async fn next_event(feed: &mut EventStream) -> Event {
    tokio::time::timeout(WAIT, feed.next())
        .await
        .expect("the feed yields within the timeout")
        .expect("the feed is open")
        .expect("an event, not an error")
}

/// Waits (with a deadline) until `check` holds, polling the server.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn numsub(admin: &mut redis::aio::MultiplexedConnection, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(admin)
        .await
        .unwrap();
    reply.1
}

/// How many times the server ran each command since its stats were reset
/// (`INFO commandstats`, counting commands run inside scripts), by
/// lowercase name; absent for one it never ran.
async fn command_calls(admin: &mut redis::aio::MultiplexedConnection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            Some((name.to_owned(), rest.split(',').next()?.parse().ok()?))
        })
        .collect()
}

/// Zeroes the counts [`command_calls`] reads.
async fn reset_command_calls(admin: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(admin)
        .await
        .unwrap();
}

/// Calls of the store's scripts and functions in `stats` (`EVALSHA` where
/// functions do not run, `FCALL` where they do).
/// A session's `timed` set: members (indexes) with their scores, lowest
/// first.
async fn timed_of(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<(String, f64)> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(admin)
        .await
        .unwrap()
}

/// The store instances with an entry in `session`'s mark (ST2).
async fn followers_of(
    admin: &mut redis::aio::MultiplexedConnection,
    store: &RedisStore,
    session: &str,
) -> u64 {
    redis::cmd("ZCARD")
        .arg(store.session_keys(session).followers)
        .query_async(admin)
        .await
        .unwrap()
}

/// Waits until `count` instances have an entry in `session`'s mark.
async fn followers_reach(
    admin: &mut redis::aio::MultiplexedConnection,
    store: &RedisStore,
    session: &str,
    count: u64,
) {
    let admin = admin.clone();
    eventually(&format!("{count} followers of {session}"), || {
        let mut admin = admin.clone();
        async move { followers_of(&mut admin, store, session).await == count }
    })
    .await;
}

fn script_calls(stats: &BTreeMap<String, u64>) -> u64 {
    ["evalsha", "fcall"]
        .iter()
        .filter_map(|name| stats.get(*name))
        .sum()
}

async fn xrange_calls(admin: &mut redis::aio::MultiplexedConnection) -> u64 {
    command_calls(admin)
        .await
        .get("xrange")
        .copied()
        .unwrap_or(0)
}

fn prefix_of(store: &RedisStore) -> String {
    store.prefix().to_owned()
}

/// Claims everything claimable in session `s` for a minute.
async fn claim_all(store: &RedisStore) -> ClaimOutcome {
    claim_all_as(store, "w").await
}

/// Claims up to 1000 events of session `s` for `holder`.
async fn claim_all_as(store: &RedisStore, holder: &str) -> ClaimOutcome {
    store
        .claim_available(ClaimRequest {
            session: "s".into(),
            holder: holder.into(),
            lease: Lease::Ttl(60_000),
            exclude_indexes: vec![],
            limit: 1000,
        })
        .await
        .unwrap()
}
