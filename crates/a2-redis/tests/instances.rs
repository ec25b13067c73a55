//! Two `RedisStore` instances on one server, as two processes would have
//! them (C6, ST2, ST3, P4), and what a feed costs the server.

mod common;

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
    let (a, b, _clock) = pair(server, label, |o| o.safety_reread(Duration::from_secs(600))).await;
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

/// The live feeds counted in `session`'s `followers` (ST2): 0 when the
/// field is absent.
async fn followers_of(
    admin: &mut redis::aio::MultiplexedConnection,
    store: &RedisStore,
    session: &str,
) -> u64 {
    let count: Option<u64> = redis::cmd("HGET")
        .arg(store.session_keys(session).meta)
        .arg("followers")
        .query_async(admin)
        .await
        .unwrap();
    count.unwrap_or(0)
}

/// Waits until `session`'s `followers` count is `count`.
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

/// C6: two instances claiming the same session concurrently never hand out
/// the same (index, attempt) twice.
#[tokio::test]
async fn c6_claims_race_across_instances_without_double_hand_out() {
    let server = RedisServer::start();
    let (a, b, _clock) = pair(&server, "race", |o| o).await;
    let events = (0..200).map(|n| NewEvent::new("job", json!(n))).collect();
    a.append("jobs", events).await.unwrap();
    let stores = [Arc::new(a), Arc::new(b)];
    let mut tasks = Vec::new();
    for (k, store) in stores.iter().cycle().take(8).enumerate() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let outcome = store
                    .claim_available(ClaimRequest {
                        session: "jobs".into(),
                        holder: format!("w{k}"),
                        lease: Lease::Ttl(60_000),
                        exclude_indexes: vec![],
                        limit: 3,
                    })
                    .await
                    .unwrap();
                match outcome {
                    ClaimOutcome::Claimed(rows) => {
                        got.extend(rows.iter().map(|r| (r.event.index, r.attempt_count)))
                    }
                    _ => return got,
                }
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let distinct: HashSet<_> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "an attempt was handed out twice");
    assert_eq!(all.len(), 200, "every event was claimed once");
}

/// ST2: a feed in one instance sees appends from the other by push (the
/// safety re-read is far away), and a caught-up feed applies the carried
/// events without reading.
#[tokio::test]
async fn st2_feed_sees_other_instance_by_push_without_reads() {
    let server = RedisServer::start();
    let (a, b) = push_only_pair(&server, "push").await;
    let mut admin = common::admin(&server).await;
    let mut feed = a.stream("s", 0);
    b.append("s", vec![NewEvent::new("e", json!(0))])
        .await
        .unwrap();
    assert_eq!(next_event(&mut feed).await.index, 1);
    // Caught up and subscribed: from here on, wake-ups carry everything.
    let channel = a.session_keys("s").events_channel;
    eventually("the subscription", || {
        let mut admin = admin.clone();
        let channel = channel.clone();
        async move { numsub(&mut admin, &channel).await == 1 }
    })
    .await;
    // Let any catch-up caused by the subscription itself finish.
    b.append("s", vec![NewEvent::new("e", json!(1))])
        .await
        .unwrap();
    assert_eq!(next_event(&mut feed).await.index, 2);
    let reads_before = xrange_calls(&mut admin).await;
    for n in 3..=22 {
        b.append("s", vec![NewEvent::new("e", json!(n)).lane("l")])
            .await
            .unwrap();
        let event = next_event(&mut feed).await;
        assert_eq!((event.index, event.payload.clone()), (n, json!(n)));
        assert_eq!(event.session_id, "s");
    }
    assert_eq!(
        xrange_calls(&mut admin).await,
        reads_before,
        "carried events are applied without a read"
    );
}

/// ST2: a batch over the carry cap publishes only the frontier; the feed
/// reads it, in bounded pages.
#[tokio::test]
async fn st2_oversized_batches_are_read_not_carried() {
    let server = RedisServer::start();
    let (a, b, _clock) = pair(&server, "oversized", |o| {
        o.wake_carry_cap(64).safety_reread(Duration::from_secs(600))
    })
    .await;
    let mut feed = a.stream("s", 0);
    b.append("s", vec![NewEvent::new("small", json!(1))])
        .await
        .unwrap();
    assert_eq!(next_event(&mut feed).await.index, 1);
    let big: Vec<NewEvent> = (0..600)
        .map(|n| NewEvent::new("big", json!({ "n": n, "pad": "x".repeat(40) })))
        .collect();
    b.append("s", big).await.unwrap();
    for n in 2..=601 {
        assert_eq!(next_event(&mut feed).await.index, n);
    }
}

/// ST3: one push connection per instance whatever the number of feeds;
/// channel subscriptions are released when the last feed drops.
#[tokio::test]
async fn st3_one_push_connection_and_refcounted_channels() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "refcount", |o| o).await;
    let mut admin = common::admin(&server).await;
    let mut feeds: Vec<EventStream> = (0..10)
        .map(|k| a.stream(if k % 2 == 0 { "x" } else { "y" }, 0))
        .collect();
    let presence = a.presence_subscribe("x").await.unwrap();
    a.append("x", vec![NewEvent::new("e", json!(1))])
        .await
        .unwrap();
    a.append("y", vec![NewEvent::new("e", json!(1))])
        .await
        .unwrap();
    for feed in &mut feeds {
        assert_eq!(next_event(feed).await.index, 1);
    }
    let x = a.session_keys("x").events_channel;
    let y = a.session_keys("y").events_channel;
    assert_eq!(numsub(&mut admin, &x).await, 1);
    assert_eq!(numsub(&mut admin, &y).await, 1);
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(clients.lines().count(), 1, "{clients}");

    // Dropping every feed of y releases y only.
    let (xs, ys): (Vec<_>, Vec<_>) = feeds.into_iter().enumerate().partition(|(k, _)| k % 2 == 0);
    drop(ys);
    eventually("y's channel released", || {
        let mut admin = admin.clone();
        let y = y.clone();
        async move { numsub(&mut admin, &y).await == 0 }
    })
    .await;
    assert_eq!(numsub(&mut admin, &x).await, 1);
    drop(xs);
    drop(presence);
    eventually("x's channel released", || {
        let mut admin = admin.clone();
        let x = x.clone();
        async move { numsub(&mut admin, &x).await == 0 }
    })
    .await;
}

/// P4: `presence_subscribe` returns once the server has the channel
/// subscription, and a patch applied by one instance then reaches the
/// other's subscriber.
#[tokio::test]
async fn p4_presence_patches_cross_instances() {
    let server = RedisServer::start();
    let (a, b, clock) = pair(&server, "presence", |o| o).await;
    let mut admin = common::admin(&server).await;
    let mut sub = a.presence_subscribe("room").await.unwrap();
    let channel = a.session_keys("room").presence_channel;
    assert_eq!(
        numsub(&mut admin, &channel).await,
        1,
        "subscribed on return"
    );
    let meta = PresenceMeta {
        seen: 7,
        at: clock.now_ms(),
        ttl_ms: 10_000,
    };
    let values = BTreeMap::from([("typing".to_owned(), Some(json!(true)))]);
    let applied = b
        .presence_set("room", "ann", values, meta)
        .await
        .unwrap()
        .expect("applied");
    let received = tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("a patch")
        .expect("open")
        .expect("no error");
    assert_eq!(received, applied);
}

/// P4: a subscription made just after the push connection was cut is live
/// when `presence_subscribe` returns all the same: its sync waits for the
/// connection to come back and subscribe. The other instance then writes
/// two patches of one participant; heard live they arrive as themselves, in
/// order (a recovery re-read would have merged them into one).
#[tokio::test]
async fn p4_subscribing_while_the_push_connection_is_cut_is_live_on_return() {
    let server = RedisServer::start();
    let (a, b, clock) = pair(&server, "presence-cut", |o| o).await;
    let mut admin = common::admin(&server).await;
    // Keeps a's push connection open between rounds.
    let _held = a.presence_subscribe("held").await.unwrap();
    for round in 0..5_i64 {
        let killed = common::kill_push_connections(&mut admin).await;
        assert_eq!(killed, 1, "round {round}: a's push connection");
        let mut sub = a.presence_subscribe("room").await.unwrap();
        let participant = format!("p{round}");
        let mut applied = Vec::new();
        for (k, field) in ["first", "second"].into_iter().enumerate() {
            let meta = PresenceMeta {
                seen: round,
                at: clock.now_ms() + k as i64,
                ttl_ms: 60_000,
            };
            let values = BTreeMap::from([(field.to_owned(), Some(json!(round)))]);
            let patch = b
                .presence_set("room", &participant, values, meta)
                .await
                .unwrap()
                .expect("applied");
            applied.push(patch);
        }
        for expected in applied {
            let received = tokio::time::timeout(WAIT, sub.next())
                .await
                .expect("a patch")
                .expect("open")
                .expect("no error");
            assert_eq!(received, expected, "round {round}");
        }
    }
}

fn prefix_of(store: &RedisStore) -> String {
    store.prefix().to_owned()
}

/// ST2: a lost wake-up costs latency, never delivery: an event written
/// without any publish (as if the message was lost) arrives through the
/// periodic safety re-read. Written by hand as RD2 lays the log out: a
/// stream entry with id `{index}-0`.
#[tokio::test]
async fn st2_lost_wake_up_is_recovered_by_the_safety_reread() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "lost-wake", |o| {
        o.safety_reread(Duration::from_millis(200))
    })
    .await;
    let mut admin = common::admin(&server).await;
    let mut feed = a.stream("s", 0);
    a.append("s", vec![NewEvent::new("e", json!(1))])
        .await
        .unwrap();
    assert_eq!(next_event(&mut feed).await.index, 1);
    // Write event 2 behind the store's back: no wake-up is published.
    let _: String = redis::cmd("XADD")
        .arg(a.session_keys("s").log)
        .arg("2-0")
        .arg(&[
            "id",
            "silent",
            "type",
            "e",
            "payload",
            "2",
            "created_at",
            "5",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    let event = next_event(&mut feed).await;
    assert_eq!((event.index, event.id.as_str()), (2, "silent"));
}

/// RD3, RD4: the keys a session uses are the ones docs/redis-layout.md
/// lists, under the store's prefix, with the percent-encoded session id as
/// the hash tag.
#[tokio::test]
async fn rd4_keys_match_the_documented_layout() {
    let server = RedisServer::start();
    let (a, _b, clock) = pair(&server, "layout", |o| o).await;
    let mut admin = common::admin(&server).await;
    a.append(
        "user:42",
        vec![
            NewEvent::new("e", json!(1)).lane("l"),
            NewEvent::new("e", json!(2)).lane("l"),
            NewEvent::new("e", json!(3)),
        ],
    )
    .await
    .unwrap();
    a.claim_available(ClaimRequest {
        session: "user:42".into(),
        holder: "w".into(),
        lease: Lease::Ttl(1000),
        exclude_indexes: vec![],
        limit: 1,
    })
    .await
    .unwrap();
    a.put_snapshots(
        "user:42",
        vec![SnapshotWrite {
            reducer: "r".into(),
            index: 1,
            state: json!({}),
        }],
    )
    .await
    .unwrap();
    a.presence_set(
        "user:42",
        "ann",
        BTreeMap::from([("typing".to_owned(), Some(json!(true)))]),
        PresenceMeta {
            seen: 0,
            at: clock.now_ms(),
            ttl_ms: 1000,
        },
    )
    .await
    .unwrap();
    let prefix = prefix_of(&a);
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut admin)
        .await
        .unwrap();
    keys.sort();
    let session = a.session_keys("user:42");
    // The partition tag comes first, then the encoded id; the session's
    // ready set is empty (its only entry was claimed), so it does not
    // exist, and the lane-less event 3 waits past the claim cursor, in no
    // queue at all.
    assert!(
        session.log.ends_with(":user%3A42:log")
            && session.log.starts_with(&format!("{prefix}:{{p")),
        "{}",
        session.log
    );
    let mut expected: Vec<String> = vec![
        session.log.clone(),
        session.meta.clone(),
        session.timed.clone(),
        session.lanes.clone(),
        session.snapshots.clone(),
        session.presence.clone(),
        session.sessions.clone(),
        session.pending.clone(),
        format!("{prefix}:config"),
    ];
    expected.sort();
    assert_eq!(keys, expected);
    let lanes: Vec<String> = redis::cmd("ZRANGE")
        .arg(&session.lanes)
        .arg(0)
        .arg(-1)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(lanes, ["l:00000000000000000001", "l:00000000000000000002"]);
    let meta: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(&session.meta)
        .arg(&[
            "event_count",
            "pending_count",
            "attempt_count",
            "cursor",
            "#e1",
            "#e3",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    let meta: Vec<_> = meta.iter().map(|v| v.as_deref()).collect();
    // The claim passed lane events 1 and 2 in the log: the cursor stops
    // before event 3, the first lane-less event it did not hand out.
    assert_eq!(
        meta,
        [
            Some("3"),
            Some("3"),
            Some("1"),
            Some("2"),
            Some("1"),
            Some("3")
        ]
    );
    let record: String = redis::cmd("HGET")
        .arg(&session.meta)
        .arg("1")
        .query_async(&mut admin)
        .await
        .unwrap();
    let record: serde_json::Value = serde_json::from_str(&record).unwrap();
    assert_eq!(record["a"], json!(1));
    assert_eq!(record["h"], json!("w"));
    assert_eq!(record["l"], json!("l"));
    let timed = timed_of(&mut admin, &session.timed).await;
    assert_eq!(timed, [("1".to_owned(), (clock.now_ms() + 1000) as f64)]);
    let config: Vec<String> = redis::cmd("HMGET")
        .arg(format!("{prefix}:config"))
        .arg(&["layout", "partitions"])
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(config, ["2".to_owned(), a.partitions().to_string()]);
}

/// P4: after its connection comes back, a presence subscription re-reads
/// the namespace and emits what changed meanwhile (here: a change that
/// was never published, as if its message was lost while disconnected).
#[tokio::test]
async fn p4_presence_recovers_after_a_reconnect() {
    let server = RedisServer::start();
    let (a, _b, clock) = pair(&server, "presence-recovery", |o| o).await;
    let mut admin = common::admin(&server).await;
    let mut sub = a.presence_subscribe("room").await.unwrap();
    let meta = PresenceMeta {
        seen: 1,
        at: clock.now_ms(),
        ttl_ms: 60_000,
    };
    let ann = BTreeMap::from([("typing".to_owned(), Some(json!(true)))]);
    let first = a.presence_set("room", "ann", ann, meta).await.unwrap();
    let received = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(Some(received), first);
    // A second subscription joins the channel the first one holds, so the
    // server sends it no confirmation of its own.
    let mut late = a.presence_subscribe("room").await.unwrap();
    let again = BTreeMap::from([("typing".to_owned(), Some(json!(false)))]);
    let second = a.presence_set("room", "ann", again, meta).await.unwrap();
    for sub in [&mut sub, &mut late] {
        let received = tokio::time::timeout(WAIT, sub.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(Some(received), second);
    }

    // Bob appears without a message: written straight into the hash.
    let entry = format!(
        "{}|{}|{}",
        clock.now_ms(),
        clock.now_ms() + 60_000,
        json!({"participant": "bob", "field": "cursor", "value": 3, "seen": 2})
    );
    let _: i64 = redis::cmd("HSET")
        .arg(a.session_keys("room").presence)
        .arg("bob:cursor")
        .arg(entry)
        .query_async(&mut admin)
        .await
        .unwrap();
    let killed = common::kill_push_connections(&mut admin).await;
    assert_eq!(killed, 1);
    for sub in [&mut sub, &mut late] {
        let recovered = tokio::time::timeout(WAIT, sub.next())
            .await
            .expect("a recovery patch")
            .expect("open")
            .expect("no error");
        assert_eq!(
            recovered,
            PresencePatch {
                participant: "bob".into(),
                values: BTreeMap::from([("cursor".to_owned(), Some(json!(3)))]),
                seen: 2,
                at: clock.now_ms(),
            }
        );
    }
}

/// ST1: with writers in both instances appending concurrently (single
/// events and batches), every feed of either instance yields the log
/// exactly: each event once, in index order, equal to what `read` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn st1_feeds_are_exact_under_concurrent_writers() {
    let server = RedisServer::start();
    let (a, b, _clock) = pair(&server, "concurrent", |o| o.wake_carry_cap(300)).await;
    let (a, b) = (Arc::new(a), Arc::new(b));
    let writers = 4;
    let calls = 60;
    // Each call appends 1 to 4 events; the larger batches are over the
    // carry cap, so feeds mix carried events and catch-up reads.
    let total: u64 = (0..writers)
        .map(|w| (0..calls).map(|c| ((w + c) % 4 + 1) as u64).sum::<u64>())
        .sum();
    let mut consumers = Vec::new();
    for store in [&a, &b, &a, &b] {
        let mut feed = store.stream("s", 0);
        consumers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while (seen.len() as u64) < total {
                seen.push(next_event(&mut feed).await);
            }
            seen
        }));
    }
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = if w % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            for c in 0..calls {
                let events = (0..(w + c) % 4 + 1)
                    .map(|k| {
                        NewEvent::new(
                            "e",
                            json!({ "w": w, "c": c, "k": k, "pad": "x".repeat(20 * k) }),
                        )
                    })
                    .collect();
                store.append("s", events).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let log = log_of(&a, "s").await;
    assert_eq!(log.len() as u64, total);
    for consumer in consumers {
        assert_eq!(consumer.await.unwrap(), log);
    }
}

/// E1 on Redis, where a processing record lives apart from its log entry:
/// a claim that would hand out an event whose log entry is gone fails with
/// `Corrupted` naming the index, and writes nothing. (The reads of a
/// damaged log are the conformance case `e1_a_damaged_log_is_corrupted_on_every_read`.)
#[tokio::test]
async fn e1_a_claim_that_meets_a_hole_is_corrupted() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "hole", |o| o).await;
    let events: Vec<_> = (1..=4).map(|i| NewEvent::new("e", json!(i))).collect();
    a.append("s", events).await.unwrap();
    a2_redis::testing::delete_log_entry(&server.url(), &a.session_keys("s").log, 2).await;
    let claim = ClaimRequest {
        session: "s".into(),
        holder: "w".into(),
        lease: Lease::Ttl(1000),
        exclude_indexes: vec![],
        limit: 10,
    };
    match a.claim_available(claim).await {
        Err(Error::Corrupted { index, .. }) => assert_eq!(index, Some(2)),
        other => panic!("expected Corrupted, got {other:?}"),
    }
    // Nothing was written: index 1, which the claim met first, is unclaimed.
    let range = ReadRange {
        after_index: 0,
        through_index: Some(1),
    };
    let rows = a.read("s", range).await.unwrap();
    assert_eq!(rows[0].attempt_count, 0, "the failed claim leased nothing");
}

/// RD7: concurrent calls of one store instance share batch scripts under
/// load (fewer script calls than operations), and each still gets its
/// own, correct reply: 400 appends racing over 40 sessions give every
/// session dense indexes 1..=10 and each caller the row it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rd7_concurrent_calls_share_batch_scripts_and_keep_their_replies() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "batch", |o| o).await;
    let mut admin = common::admin(&server).await;
    reset_command_calls(&mut admin).await;
    let a = Arc::new(a);
    // 400 appends, and the first 40 sent twice (A5: the repeat gets the
    // same row, even when both travel in one batch).
    let tasks: Vec<_> = (0..440)
        .map(|n| {
            let a = a.clone();
            let k = if n < 400 { n } else { n - 400 };
            tokio::spawn(async move {
                let session = format!("s{}", k % 40);
                let id = format!("e{k}");
                let out = a
                    .append(&session, vec![NewEvent::new("e", json!(k)).id(&id)])
                    .await
                    .unwrap();
                assert_eq!(out.events.len(), 1);
                assert_eq!(out.events[0].event.id, id, "RD7: the caller's own row");
                (session, id, out.events[0].event.index)
            })
        })
        .collect();
    let mut indexes: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut of_id: BTreeMap<String, u64> = BTreeMap::new();
    for task in tasks {
        let (session, id, index) = task.await.unwrap();
        match of_id.get(&id) {
            Some(&first) => assert_eq!(first, index, "A5: {id} twice"),
            None => {
                of_id.insert(id, index);
                indexes.entry(session).or_default().push(index);
            }
        }
    }
    for (session, mut got) in indexes {
        got.sort();
        assert_eq!(
            got,
            (1..=10).collect::<Vec<_>>(),
            "RD7: dense indexes in {session}"
        );
        let rows = a.read(&session, ReadRange::default()).await.unwrap();
        assert_eq!(rows.len(), 10);
    }
    let stats = command_calls(&mut admin).await;
    let calls = script_calls(&stats);
    assert!(
        calls < 400,
        "RD7: 440 appends took {calls} script calls; none shared a batch"
    );
    // Appends of one session in one batch share one write of its state.
    let hsets = stats["hset"];
    assert!(
        hsets < 400,
        "RD7: 400 new events were written with {hsets} HSETs; no batch grouped a session's appends"
    );
}

/// RD7: operations started in one pass of the scheduler travel in one
/// script call, even on a quiet store whose calls are all free: the call
/// the first of them starts waits for that pass to end. (Each of the
/// first four would otherwise take a free call alone.)
#[tokio::test(flavor = "current_thread")]
async fn rd7_operations_started_together_share_one_call() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "together", |o| o).await;
    let mut admin = common::admin(&server).await;
    // The library is loaded and the connection is up before counting.
    a.append("warm", vec![NewEvent::new("e", json!(0))])
        .await
        .unwrap();
    reset_command_calls(&mut admin).await;
    let appends = (0..100).map(|k| {
        let a = &a;
        async move {
            let session = format!("s{}", k % 10);
            let id = format!("e{k}");
            let out = a
                .append(&session, vec![NewEvent::new("e", json!(k)).id(&id)])
                .await
                .unwrap();
            assert_eq!(out.events[0].event.id, id, "RD7: the caller's own row");
            out.events[0].event.index
        }
    });
    let indexes = futures::future::join_all(appends).await;
    for (k, index) in indexes.into_iter().enumerate() {
        assert_eq!(
            index,
            k as u64 / 10 + 1,
            "RD7: dense indexes, in call order"
        );
    }
    let calls = script_calls(&command_calls(&mut admin).await);
    assert_eq!(
        calls, 1,
        "RD7: 100 appends started together took {calls} calls"
    );
}

/// P5: the presence hash of a namespace expires on the server (an hour
/// after its longest-lived entry would), so an abandoned namespace does not
/// stay forever; a longer ttl extends it, a shorter one never shortens it.
#[tokio::test]
async fn p5_presence_hash_expires_on_the_server() {
    let server = RedisServer::start();
    let (a, _b, clock) = pair(&server, "presence-expiry", |o| o).await;
    let mut admin = common::admin(&server).await;
    let key = a.session_keys("room").presence;
    let set = |ttl_ms: u64| {
        let a = &a;
        let clock = clock.clone();
        async move {
            a.presence_set(
                "room",
                "ann",
                BTreeMap::from([("typing".to_owned(), Some(json!(true)))]),
                PresenceMeta {
                    seen: 1,
                    at: clock.now_ms(),
                    ttl_ms,
                },
            )
            .await
            .unwrap()
        }
    };
    let pttl = |admin: &mut redis::aio::MultiplexedConnection| {
        let key = key.clone();
        let mut admin = admin.clone();
        async move {
            let left: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut admin)
                .await
                .unwrap();
            left
        }
    };
    set(10_000).await;
    let first = pttl(&mut admin).await;
    assert!(first > 3_600_000 && first <= 3_610_000, "P5: {first} ms");
    clock.advance(1);
    set(7_200_000).await;
    let longer = pttl(&mut admin).await;
    assert!(
        longer > 10_000_000 && longer <= 10_800_000,
        "P5: extended to {longer} ms"
    );
    clock.advance(1);
    set(1_000).await;
    let kept = pttl(&mut admin).await;
    assert!(
        kept > 10_000_000,
        "P5: a shorter ttl never shortens it ({kept} ms)"
    );
    assert_eq!(
        a.presence_read("room").await.unwrap().len(),
        1,
        "P2 unchanged"
    );
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

/// RD7, CO2, CO3: concurrent completions of one session that travel in one
/// batch share one read and one write of the session's state, and each
/// still behaves as if alone: 62 completions at once (a third of them
/// returning an event, a fifth sent twice, five with a wrong attempt, two
/// of them lane heads) give every caller its own reply, repeats the same
/// rows, and leave counters, records and lanes as sequential calls would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rd7_concurrent_completions_of_one_session_share_one_write() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "group", |o| o).await;
    let mut admin = common::admin(&server).await;
    let mut events: Vec<NewEvent> = (0..60).map(|k| NewEvent::new("e", json!(k))).collect();
    for lane in ["x", "y"] {
        events.extend((0..10).map(|k| NewEvent::new("e", json!(k)).lane(lane)));
    }
    a.append("s", events).await.unwrap();
    let ClaimOutcome::Claimed(claimed) = claim_all(&a).await else {
        panic!("nothing claimed");
    };
    assert_eq!(claimed.len(), 62, "60 lane-less events and two lane heads");
    reset_command_calls(&mut admin).await;
    // The server holds the first calls until every completion is spawned,
    // so the rest queue behind them and travel in batches whatever the
    // machine's speed (a slow spawner would otherwise send small ones).
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query_async(&mut admin)
        .await
        .unwrap();
    let a = Arc::new(a);
    let request = |row: &StoredEvent, attempt: u32| CompleteRequest {
        session: "s".into(),
        index: row.event.index,
        attempt,
        events: if row.event.index.is_multiple_of(3) {
            vec![NewEvent::new("r", json!(row.event.index)).id(format!("r{}", row.event.index))]
        } else {
            vec![]
        },
        batch_size: None,
    };
    let mut tasks = Vec::new();
    for (k, row) in claimed.iter().enumerate() {
        let sends = if k % 5 == 0 { 2 } else { 1 };
        for _ in 0..sends {
            let (a, req) = (a.clone(), request(row, row.attempt_count));
            tasks.push((
                row.event.index,
                true,
                tokio::spawn(async move { a.complete_attempt(req).await }),
            ));
        }
        if k % 13 == 0 {
            let (a, req) = (a.clone(), request(row, row.attempt_count + 1));
            tasks.push((
                row.event.index,
                false,
                tokio::spawn(async move { a.complete_attempt(req).await }),
            ));
        }
    }
    let completes = tasks.len();
    // Every completion has reached the group commit (queued, or sent and
    // held by the pause) before the server answers any.
    eventually("every completion to reach the batcher", || {
        let a = a.clone();
        async move { a.operations_waiting() == completes }
    })
    .await;
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut admin)
        .await
        .unwrap();
    let mut outcomes: BTreeMap<u64, Vec<CompleteOutcome>> = BTreeMap::new();
    for (index, right, task) in tasks {
        let outcome = task.await.unwrap().unwrap();
        if right {
            outcomes.entry(index).or_default().push(outcome);
        } else {
            assert_eq!(outcome, CompleteOutcome::Superseded, "CO5: event {index}");
        }
    }
    let mut returned = 0;
    for (index, got) in &outcomes {
        let CompleteOutcome::Completed { events: rows } = &got[0] else {
            panic!("CO2: event {index} did not complete: {:?}", got[0]);
        };
        assert!(
            got.iter().all(|o| o == &got[0]),
            "CO3: repeats of {index} differ"
        );
        let expect = usize::from(index.is_multiple_of(3));
        assert_eq!(rows.len(), expect, "event {index}: its returned rows");
        for row in rows {
            assert_eq!(row.event.id, format!("r{index}"));
            assert_eq!(row.cause.map(|c| (c.index, c.attempt)), Some((*index, 1)));
        }
        returned += expect as u64;
    }
    assert_eq!(outcomes.len(), 62);

    // The state is what sequential calls leave.
    let rows = a.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(rows.len() as u64, 80 + returned);
    for row in &rows {
        let done = outcomes.contains_key(&row.event.index);
        assert_eq!(
            row.processed_at.is_some(),
            done,
            "event {}",
            row.event.index
        );
        if done {
            assert_eq!(row.processed_by_attempt, Some(1));
            assert_eq!(row.claim_holder, None);
        }
    }
    let page = a.list_sessions(ListSessionsOptions::new(10)).await.unwrap();
    let info = &page.sessions[0];
    assert_eq!(info.event_count, 80 + returned);
    assert_eq!(
        info.pending_count,
        18 + returned,
        "I1: pending after the completions"
    );
    // The lanes moved on: their second events are the heads now.
    let ClaimOutcome::Claimed(next) = claim_all(&a).await else {
        panic!("nothing claimable after the completions");
    };
    let lanes: Vec<_> = next.iter().filter_map(|r| r.lane.clone()).collect();
    assert_eq!(lanes, vec!["x".to_owned(), "y".to_owned()]);
    assert_eq!(next.len() as u64, 2 + returned);

    // Completions of one session shared their writes: fewer HSETs than
    // completions (each alone writes once).
    let stats = command_calls(&mut admin).await;
    let calls = |name: &str| -> u64 { stats.get(name).copied().unwrap_or(0) };
    assert!(
        calls("hset") < completes as u64 / 2,
        "RD7: {completes} completions wrote the session {} times",
        calls("hset")
    );
    // ... read the records of a group, and the ids its completions
    // return, in one HMGET, and took its settled events out of the lease
    // queue in one ZREM.
    for command in ["hmget", "zrem"] {
        assert!(
            calls(command) < completes as u64 / 2,
            "RD7: {completes} completions ran {command} {} times",
            calls(command)
        );
    }
}

/// RD7: a batch names each session once, by its `meta` key, for a run of
/// its operations, and the store time only when it changes; the script
/// derives the rest. 40 sessions racing appends, claims, completions and
/// failures from 160 tasks on one instance, with the clock moving between
/// them, leave every session as sequential calls would: every event
/// processed once, counters right, no queue entry left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rd7_mixed_batches_of_many_sessions_leave_each_as_if_alone() {
    let server = RedisServer::start();
    let (a, _b, clock) = pair(&server, "mixed", |o| o).await;
    let mut admin = common::admin(&server).await;
    reset_command_calls(&mut admin).await;
    let a = Arc::new(a);
    let sessions = 40;
    let per = 4;
    let tasks: Vec<_> = (0..sessions * per)
        .map(|k| {
            let (a, clock) = (a.clone(), clock.clone());
            tokio::spawn(async move {
                let session = format!("m{}", k % sessions);
                if k % 7 == 0 {
                    clock.advance(1);
                }
                let out = a
                    .append(
                        &session,
                        vec![NewEvent::new("e", json!(k)).id(format!("e{k}"))],
                    )
                    .await
                    .unwrap();
                assert_eq!(out.events[0].event.id, format!("e{k}"), "RD7: own row");
                // Claim whatever is there and finish it: fail first
                // attempts of every third event, complete the rest.
                loop {
                    let outcome = a
                        .claim_available(ClaimRequest {
                            session: session.clone(),
                            holder: format!("w{k}"),
                            lease: Lease::Ttl(60_000),
                            exclude_indexes: vec![],
                            limit: 2,
                        })
                        .await
                        .unwrap();
                    let ClaimOutcome::Claimed(rows) = outcome else {
                        return;
                    };
                    for row in rows {
                        let index = row.event.index;
                        if index % 3 == 0 && row.attempt_count == 1 {
                            let failed = a
                                .fail_attempt(FailRequest {
                                    session: session.clone(),
                                    index,
                                    attempt: 1,
                                    error: "once".into(),
                                    max_failures: 5,
                                    retry_at: None,
                                })
                                .await
                                .unwrap();
                            assert_eq!(failed.outcome, FailKind::Failed, "{failed:?}");
                        } else {
                            let done = a
                                .complete_attempt(CompleteRequest::new(
                                    session.clone(),
                                    index,
                                    row.attempt_count,
                                ))
                                .await
                                .unwrap();
                            assert!(
                                matches!(done, CompleteOutcome::Completed { .. }),
                                "{session} {index}: {done:?}"
                            );
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let calls = script_calls(&command_calls(&mut admin).await);
    // 160 appends and at least as many claims and completions.
    assert!(
        calls < 160,
        "RD7: some {} operations took {calls} script calls: few shared a batch",
        3 * sessions * per
    );
    // Whatever a task left claimable when it stopped looking (a failed
    // event due for its retry): finish it now.
    for s in 0..sessions {
        let session = format!("m{s}");
        while let ClaimOutcome::Claimed(rows) = a
            .claim_available(ClaimRequest {
                session: session.clone(),
                holder: "sweeper".into(),
                lease: Lease::Ttl(60_000),
                exclude_indexes: vec![],
                limit: 100,
            })
            .await
            .unwrap()
        {
            for row in rows {
                a.complete_attempt(CompleteRequest::new(
                    session.clone(),
                    row.event.index,
                    row.attempt_count,
                ))
                .await
                .unwrap();
            }
        }
        let rows = a.read(&session, ReadRange::default()).await.unwrap();
        assert_eq!(rows.len(), per, "{session}");
        for row in &rows {
            assert!(row.processed_at.is_some(), "{session} {}", row.event.index);
            let expect = if row.event.index % 3 == 0 { 2 } else { 1 };
            assert_eq!(row.attempt_count, expect, "{session} {}", row.event.index);
        }
        let keys = a.session_keys(&session);
        for queue in [&keys.ready, &keys.timed] {
            let left: u64 = redis::cmd("ZCARD")
                .arg(queue)
                .query_async(&mut admin)
                .await
                .unwrap();
            assert_eq!(left, 0, "{queue} is empty once all is processed");
        }
    }
    let mut cursor = None;
    let mut seen = 0;
    loop {
        let mut options = ListSessionsOptions::new(16);
        options.cursor = cursor.take();
        let page = a.list_sessions(options).await.unwrap();
        for info in &page.sessions {
            assert_eq!(info.event_count, per as u64, "{}", info.session_id);
            assert_eq!(info.pending_count, 0, "{}", info.session_id);
            assert_eq!(info.failed_count, 0, "{}", info.session_id);
            seen += 1;
        }
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, sessions);
}

/// Appends, claims and completes `n` events of `session`, one at a time.
async fn cycle(store: &RedisStore, session: &str, n: usize) {
    for k in 0..n {
        store
            .append(session, vec![NewEvent::new("e", json!(k))])
            .await
            .unwrap();
        let ClaimOutcome::Claimed(rows) = store
            .claim_available(ClaimRequest {
                session: session.into(),
                holder: "w".into(),
                lease: Lease::Ttl(60_000),
                exclude_indexes: vec![],
                limit: 1,
            })
            .await
            .unwrap()
        else {
            panic!("event {k} of {session} is not claimable");
        };
        let row = &rows[0];
        let done = store
            .complete_attempt(CompleteRequest::new(
                session,
                row.event.index,
                row.attempt_count,
            ))
            .await
            .unwrap();
        assert!(
            matches!(done, CompleteOutcome::Completed { .. }),
            "{done:?}"
        );
    }
}

/// RD1: on Redis ≥ 7 the writes run as functions of one library, loaded by
/// the first call (`FCALL`, no `EVALSHA`), and loaded again when the server
/// lost it (`FUNCTION FLUSH`).
#[tokio::test]
async fn rd1_writes_run_as_functions_of_one_library() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "functions", |o| o).await;
    let mut admin = common::admin(&server).await;
    reset_command_calls(&mut admin).await;
    cycle(&a, "s", 3).await;
    let stats = command_calls(&mut admin).await;
    assert!(stats.get("fcall").copied().unwrap_or(0) >= 9, "{stats:?}");
    assert_eq!(stats.get("evalsha"), None, "{stats:?}");
    let libraries: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(
        format!("{libraries:?}").contains("a2_"),
        "the library is on the server: {libraries:?}"
    );
    let () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .unwrap();
    cycle(&a, "s", 2).await;
    let rows = a.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(rows.len(), 5);
    assert!(rows.iter().all(|r| r.processed_at.is_some()));
}

/// RD1: where the server refuses functions (here an ACL without `FCALL`
/// and `FUNCTION`, as on Redis 6.2, where they do not exist) the same
/// operations run as scripts, and the store works the same.
#[tokio::test]
async fn rd1_writes_run_as_scripts_where_functions_are_refused() {
    let server = RedisServer::start();
    let mut admin = common::admin(&server).await;
    let () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "scripts",
            "on",
            ">secret",
            "~*",
            "&*",
            "+@all",
            "-fcall",
            "-function",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = server
        .url()
        .replacen("redis://", "redis://scripts:secret@", 1);
    let clock = Arc::new(ManualClock::new(common::START_MS));
    let store = RedisStore::connect(&url, common::options("refused", clock))
        .await
        .unwrap();
    reset_command_calls(&mut admin).await;
    cycle(&store, "s", 3).await;
    let stats = command_calls(&mut admin).await;
    assert!(stats.get("evalsha").copied().unwrap_or(0) >= 9, "{stats:?}");
    let rows = store.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.processed_at.is_some()));
}

/// ST2 under group commit: a batch joins the wake-ups of one session's
/// consecutive writes into one message, within the carry cap. A raw
/// subscriber sees fewer messages than appends, each carrying contiguous
/// events whose JSON stays within the cap; together they name every event
/// of the log once, in order; and a live feed yields the log exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn st2_a_batch_joins_one_session_s_wake_ups_within_the_cap() {
    let server = RedisServer::start();
    let cap = 150;
    let (a, b, _clock) = pair(&server, "joined", move |o| {
        o.wake_carry_cap(150)
            .safety_reread(Duration::from_secs(600))
    })
    .await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub
        .subscribe(a.session_keys("s").events_channel)
        .await
        .unwrap();
    // Writes publish while a feed follows the session: this one counts
    // itself at its first poll, and the raw subscriber listens alongside.
    let mut feed = a.stream("s", 0);
    let appends = 400u64;
    let total = appends + appends / 5;
    let consumer = tokio::spawn(async move {
        let mut seen = Vec::new();
        while (seen.len() as u64) < total {
            seen.push(next_event(&mut feed).await);
        }
        seen
    });
    let mut admin = common::admin(&server).await;
    followers_reach(&mut admin, &a, "s", 1).await;
    let b = Arc::new(b);
    let mut tasks = Vec::new();
    for t in 0..64u64 {
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = t;
            while n < appends {
                // Every fifth append is a pair, over the cap when padded.
                let events = if n % 5 == 0 {
                    vec![
                        NewEvent::new("e", json!(n)),
                        NewEvent::new("e", json!({ "n": n, "pad": "x".repeat(200) })),
                    ]
                } else {
                    vec![NewEvent::new("e", json!(n))]
                };
                b.append("s", events).await.unwrap();
                n += 64;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let log = log_of(&a, "s").await;
    let frontier = log.len() as u64;
    assert_eq!(frontier, appends + appends / 5);

    let mut messages = pubsub.on_message();
    let (mut count, mut joined, mut last, mut carried) = (0u64, 0, 0u64, 0u64);
    while last < frontier {
        let message = tokio::time::timeout(WAIT, messages.next())
            .await
            .expect("a wake-up within the timeout")
            .expect("the subscription is open");
        let text: String = message.get_payload().unwrap();
        let wake: serde_json::Value = serde_json::from_str(&text).unwrap();
        let f = wake["f"].as_u64().unwrap();
        assert!(f > last, "frontiers rise: {f} after {last}");
        count += 1;
        if let Some(events) = wake["e"].as_array() {
            let raw = &text[text.find(r#","e":"#).unwrap() + 5..text.len() - 1];
            assert!(
                raw.len() <= cap,
                "{} bytes carried over a cap of {cap}",
                raw.len()
            );
            let first = f + 1 - events.len() as u64;
            assert_eq!(first, last + 1, "carried events follow the last wake-up's");
            for (k, event) in events.iter().enumerate() {
                let stored = &log[(first - 1) as usize + k];
                assert_eq!(event[0], json!(stored.id));
                assert_eq!(event[2], stored.payload);
            }
            carried += events.len() as u64;
            if events.len() > 1 && events.iter().all(|e| e[2].is_number()) {
                joined += 1;
            }
        }
        last = f;
    }
    assert_eq!(last, frontier);
    assert!(count < appends, "{count} wake-ups for {appends} appends");
    assert!(joined > 0, "no wake-up joined two appends");
    assert!(carried < frontier, "the padded pairs are not carried");
    assert_eq!(consumer.await.unwrap(), log);
}

/// AC2 under group commit: a batch adds the leases its appends take to
/// `timed` when the session's group ends, before its completions take
/// theirs out. Appends that claim race completions of earlier claimed
/// events; afterwards `timed` holds exactly the unsettled leases at their
/// expiry, and once they expire another holder claims exactly those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac2_leases_taken_in_a_batch_reach_timed_before_its_completions() {
    let server = RedisServer::start();
    let (a, b, clock) = pair(&server, "held-leases", |o| o).await;
    let a = Arc::new(a);
    let claim = || AppendClaim::new("w", Lease::Ttl(60_000), 1);
    let first = futures::future::join_all((0..100).map(|n| {
        let a = a.clone();
        async move {
            a.append_and_claim("s", vec![NewEvent::new("e", json!(n))], claim())
                .await
                .unwrap()
        }
    }))
    .await;
    let claimed: Vec<(u64, u32)> = first
        .iter()
        .flat_map(|o| o.claimed_rows().map(|r| (r.event.index, r.attempt_count)))
        .collect();
    assert_eq!(claimed.len(), 100);
    // Completions of the first 50 race 100 more appends that claim.
    let completions = claimed[..50].iter().map(|&(index, attempt)| {
        let a = a.clone();
        tokio::spawn(async move {
            a.complete_attempt(CompleteRequest::new("s", index, attempt))
                .await
                .unwrap();
            None
        })
    });
    let appends = (100..200).map(|n| {
        let a = a.clone();
        tokio::spawn(async move {
            let outcome = a
                .append_and_claim("s", vec![NewEvent::new("e", json!(n))], claim())
                .await
                .unwrap();
            let row = outcome.claimed_rows().next().expect("claimed").clone();
            Some(row.event.index)
        })
    });
    let tasks: Vec<_> = completions.chain(appends).collect();
    let mut unsettled: Vec<u64> = claimed[50..].iter().map(|c| c.0).collect();
    for task in tasks {
        if let Some(index) = task.await.unwrap() {
            unsettled.push(index);
        }
    }
    unsettled.sort_unstable();
    let mut admin = common::admin(&server).await;
    let timed = timed_of(&mut admin, &a.session_keys("s").timed).await;
    let expiry = (common::START_MS + 60_000) as f64;
    let mut in_timed: Vec<u64> = timed
        .iter()
        .map(|(member, score)| {
            assert_eq!(*score, expiry, "event {member} leased until the expiry");
            member.parse().unwrap()
        })
        .collect();
    in_timed.sort_unstable();
    assert_eq!(
        in_timed, unsettled,
        "timed holds exactly the unsettled leases"
    );
    clock.advance(60_001);
    let mut taken = Vec::new();
    while let ClaimOutcome::Claimed(rows) = claim_all_as(&b, "v").await {
        taken.extend(rows.iter().map(|r| r.event.index));
    }
    taken.sort_unstable();
    assert_eq!(
        taken, unsettled,
        "the expired leases, and only they, are claimed again"
    );
}

/// RD3: a batch script keeps the key names of the sessions it has seen
/// (`NAMES_KEPT` of them, then it starts over), and a kept name is only
/// ever its own session's. Two stores of different prefixes on one server
/// write sessions of the same names from 64 tasks, twice around more
/// sessions than are kept: each session's log holds its own events, and
/// its lease set the leases of its own claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rd3_kept_key_names_stay_their_own_session_s() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(common::START_MS));
    let a = Arc::new(common::open(&server, common::options("names-a", clock.clone())).await);
    let b = Arc::new(common::open(&server, common::options("names-b", clock)).await);
    let sessions = NAMES_KEPT + 100;
    for round in 0..2 {
        let mut tasks = Vec::new();
        for t in 0..64 {
            let (a, b) = (a.clone(), b.clone());
            tasks.push(tokio::spawn(async move {
                for s in (t..sessions).step_by(64) {
                    let session = format!("s{s}");
                    a.append_and_claim(
                        &session,
                        vec![NewEvent::new("a", json!([s, round]))],
                        AppendClaim::new("w", Lease::Ttl(60_000), 1),
                    )
                    .await
                    .unwrap();
                    b.append(&session, vec![NewEvent::new("b", json!([s, round]))])
                        .await
                        .unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    }
    let mut admin = common::admin(&server).await;
    for s in 0..sessions {
        let session = format!("s{s}");
        for (store, kind) in [(&a, "a"), (&b, "b")] {
            let log = log_of(store, &session).await;
            let seen: Vec<_> = log
                .iter()
                .map(|e| (e.event_type.clone(), e.payload.clone()))
                .collect();
            assert_eq!(
                seen,
                [
                    (kind.to_owned(), json!([s, 0])),
                    (kind.to_owned(), json!([s, 1]))
                ],
                "{kind}'s {session}"
            );
        }
        let leased: Vec<_> = timed_of(&mut admin, &a.session_keys(&session).timed)
            .await
            .into_iter()
            .map(|(member, _)| member)
            .collect();
        assert_eq!(leased, ["1", "2"], "a's leases of {session}");
        assert!(
            timed_of(&mut admin, &b.session_keys(&session).timed)
                .await
                .is_empty()
        );
    }
}

/// ST2: a session's writes publish wake-ups only while a live feed follows
/// it. A store instance counts itself in the session's `followers` at its
/// first feed's first poll and takes itself off when its last feed of the
/// session is dropped; the field goes at 0, also after a clear under three
/// feeds of two instances, which end with `SessionCleared`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn st2_writes_publish_only_while_a_feed_follows() {
    let server = RedisServer::start();
    let (a, b) = push_only_pair(&server, "followers").await;
    let mut admin = common::admin(&server).await;
    // The first append publishes on the partition's work channel (the
    // session gains pending work); the next publishes nothing.
    b.append("s", vec![NewEvent::new("e", json!(1))])
        .await
        .unwrap();
    reset_command_calls(&mut admin).await;
    b.append("s", vec![NewEvent::new("e", json!(2))])
        .await
        .unwrap();
    assert_eq!(command_calls(&mut admin).await.get("publish"), None);

    let mut feeds = Vec::new();
    for store in [&a, &a, &b] {
        let mut feed = store.stream("s", 1);
        assert_eq!(next_event(&mut feed).await.index, 2);
        feeds.push(feed);
    }
    assert_eq!(
        followers_of(&mut admin, &a, "s").await,
        2,
        "two instances follow"
    );
    reset_command_calls(&mut admin).await;
    b.append("s", vec![NewEvent::new("e", json!(3))])
        .await
        .unwrap();
    for feed in &mut feeds {
        assert_eq!(next_event(feed).await.index, 3);
    }
    assert_eq!(command_calls(&mut admin).await.get("publish"), Some(&1));

    // A clear keeps the count; each instance takes itself off as its
    // feeds end.
    b.clear("s").await.unwrap();
    assert_eq!(followers_of(&mut admin, &a, "s").await, 2);
    // The new log reaches the feeds' last index: they find the clear (ST6).
    let new_log = (0..3).map(|n| NewEvent::new("e", json!(n))).collect();
    b.append("s", new_log).await.unwrap();
    for feed in &mut feeds {
        let ended = tokio::time::timeout(WAIT, feed.next()).await.unwrap();
        assert!(
            matches!(ended, Some(Err(Error::SessionCleared { .. }))),
            "{ended:?}"
        );
    }
    drop(feeds);
    followers_reach(&mut admin, &a, "s", 0).await;
    let field: bool = redis::cmd("HEXISTS")
        .arg(a.session_keys("s").meta)
        .arg("followers")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(!field, "the count's field goes at 0");

    // Nobody follows again: no wake-up.
    reset_command_calls(&mut admin).await;
    b.append("s", vec![NewEvent::new("e", json!(5))])
        .await
        .unwrap();
    assert_eq!(command_calls(&mut admin).await.get("publish"), None);
}

/// ST2: fifty feeds of one session on one store instance count the
/// instance once: one `follow.lua` call (its `HINCRBY`) before their first
/// reads, one after the last is dropped, and every feed hears the
/// wake-ups in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn st2_an_instance_counts_itself_once_for_all_its_feeds_of_a_session() {
    let server = RedisServer::start();
    let (a, b) = push_only_pair(&server, "many").await;
    let mut admin = common::admin(&server).await;
    b.append("s", vec![NewEvent::new("e", json!(1))])
        .await
        .unwrap();
    reset_command_calls(&mut admin).await;
    let mut feeds: Vec<EventStream> = (0..50).map(|_| a.stream("s", 0)).collect();
    // Polled together, as fifty followers would be.
    let firsts = futures::future::join_all(feeds.iter_mut().map(next_event)).await;
    assert!(firsts.iter().all(|e| e.index == 1));
    assert_eq!(followers_of(&mut admin, &a, "s").await, 1);
    assert_eq!(command_calls(&mut admin).await.get("hincrby"), Some(&1));
    b.append("s", vec![NewEvent::new("e", json!(2))])
        .await
        .unwrap();
    for feed in &mut feeds {
        assert_eq!(next_event(feed).await.index, 2);
    }
    // The count stays while any feed is open.
    feeds.truncate(1);
    b.append("s", vec![NewEvent::new("e", json!(3))])
        .await
        .unwrap();
    assert_eq!(next_event(&mut feeds[0]).await.index, 3);
    assert_eq!(followers_of(&mut admin, &a, "s").await, 1);
    drop(feeds);
    followers_reach(&mut admin, &a, "s", 0).await;
    assert_eq!(command_calls(&mut admin).await.get("hincrby"), Some(&2));
}

/// ST1, ST2 under churn: feeds start and stop while two instances append
/// from 16 tasks. A feed that counted itself before its first read hears
/// every later write by push, so with the safety re-read ten minutes away
/// every whole feed still yields the whole log within the wait; the short
/// ones leave, and the count ends at 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn st2_feeds_starting_during_writes_hear_every_write_by_push() {
    let server = RedisServer::start();
    let (a, b) = push_only_pair(&server, "churn").await;
    let (a, b) = (Arc::new(a), Arc::new(b));
    let (tasks_n, per_task) = (16u64, 40u64);
    let total = tasks_n * per_task;
    let mut writers = Vec::new();
    for t in 0..tasks_n {
        let store = if t % 2 == 0 { a.clone() } else { b.clone() };
        writers.push(tokio::spawn(async move {
            for n in 0..per_task {
                store
                    .append("s", vec![NewEvent::new("e", json!([t, n]))])
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut whole = Vec::new();
    let mut short = Vec::new();
    for k in 0..24u64 {
        let store = if k % 2 == 0 { a.clone() } else { b.clone() };
        // Half the feeds read everything, half leave after a few events.
        let wanted = if k % 2 == 0 { total } else { 3 };
        let feed = tokio::spawn(async move {
            let mut feed = store.stream("s", 0);
            let mut seen = Vec::new();
            while (seen.len() as u64) < wanted {
                let next = tokio::time::timeout(WAIT, feed.next()).await;
                let event = next
                    .unwrap_or_else(|_| panic!("feed {k} heard nothing after {}", seen.len()))
                    .expect("the feed is open")
                    .expect("an event");
                seen.push(event);
            }
            seen
        });
        if k % 2 == 0 {
            whole.push(feed)
        } else {
            short.push(feed)
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let log = log_of(&a, "s").await;
    assert_eq!(log.len() as u64, total);
    for feed in whole {
        assert_eq!(feed.await.unwrap(), log);
    }
    for feed in short {
        assert_eq!(feed.await.unwrap(), log[..3]);
    }
    let mut admin = common::admin(&server).await;
    followers_reach(&mut admin, &a, "s", 0).await;
}

/// ST2: a feed counts itself before its first read, so one write racing a
/// feed's start reaches it by push whichever comes first. 300 fresh
/// sessions each get a feed and one append at a staggered moment of the
/// feed's start; with the safety re-read ten minutes away, a write that
/// neither the feed's read saw nor a wake-up announced would leave the
/// feed waiting past the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn st2_a_write_racing_a_feed_s_start_reaches_it() {
    let server = RedisServer::start();
    let (a, b) = push_only_pair(&server, "start-race").await;
    let (a, b) = (Arc::new(a), Arc::new(b));
    let mut rounds = Vec::new();
    for k in 0..300u32 {
        let (a, b) = (a.clone(), b.clone());
        rounds.push(tokio::spawn(async move {
            let session = format!("s{k}");
            let mut feed = a.stream(&session, 0);
            let listener =
                tokio::spawn(async move { tokio::time::timeout(WAIT, feed.next()).await });
            for _ in 0..(k % 60) * 3 {
                tokio::task::yield_now().await;
            }
            b.append(&session, vec![NewEvent::new("e", json!(k))])
                .await
                .unwrap();
            let heard = listener.await.unwrap();
            let event = heard
                .unwrap_or_else(|_| panic!("{session}: the append never reached the feed"))
                .expect("the feed is open")
                .expect("an event");
            assert_eq!(event.payload, json!(k));
        }));
        if k % 50 == 49 {
            for round in rounds.drain(..) {
                round.await.unwrap();
            }
        }
    }
    for round in rounds {
        round.await.unwrap();
    }
}
