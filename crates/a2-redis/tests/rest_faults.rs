//! Faults over REST (ST5, ST2): the gateway and the `redis-server` behind
//! it killed mid-feed, and event streams cut while the gateway stays.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::*;
use a2_redis::testing::RedisServer;
use a2_redis::testing::gateway::{Gateway, GatewayOptions};
use a2_redis::{RedisOptions, RedisStore};
use futures::StreamExt;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);
/// How long the REST subscriber may take to reconnect after its event
/// stream was cut: its backoff plus a busy machine (the whole suite runs
/// beside it) can pass WAIT.
const RECONNECT_WAIT: Duration = Duration::from_secs(30);

fn fault_options(label: &str) -> RedisOptions {
    let clock = Arc::new(ManualClock::new(common::START_MS));
    common::options(label, clock)
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
}

async fn append_one(store: &RedisStore, session: &str, n: u64) -> Result<AppendOutcome> {
    store
        .append(
            session,
            vec![NewEvent::new("e", json!({ "n": n, "text": "é\n" }))],
        )
        .await
}

async fn next_event(feed: &mut EventStream) -> Event {
    tokio::time::timeout(WAIT, feed.next())
        .await
        .expect("the feed yields within the timeout")
        .expect("the feed is open")
        .expect("an event, not an error")
}

/// ST5 over REST: killing the gateway and Redis behind it ends open feeds
/// with `StoreUnavailable` within 5 s and calls fail fast; once both are
/// back (from the append-only file), the same store works again and a new
/// feed continues exactly after the last delivered index.
#[tokio::test]
async fn rest_killed_gateway_and_redis_end_feeds_then_recover() {
    let mut redis = RedisServer::start_with_aof();
    let mut gateway = Gateway::start(&redis.url(), GatewayOptions::default());
    let store = RedisStore::connect(&gateway.url(), fault_options("rest-kill"))
        .await
        .expect("connect to the gateway");
    append_one(&store, "s", 1).await.unwrap();
    let mut feeds = vec![
        store.stream("s", 0),
        store.stream("s", 0),
        store.stream("t", 0),
    ];
    for feed in &mut feeds[..2] {
        assert_eq!(next_event(feed).await.index, 1);
    }

    gateway.kill();
    redis.kill();

    for feed in &mut feeds {
        let item = tokio::time::timeout(WAIT, feed.next())
            .await
            .expect("the feed ends within 5 s");
        let error = item.expect("an error before the end").unwrap_err();
        assert_eq!(error.code(), ErrorCode::StoreUnavailable, "{error}");
        assert!(feed.next().await.is_none(), "nothing after the error");
    }
    let started = Instant::now();
    let error = append_one(&store, "s", 2).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::StoreUnavailable);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "calls fail fast"
    );

    redis.restart();
    gateway.restart();

    let deadline = Instant::now() + Duration::from_secs(10);
    let out = loop {
        match append_one(&store, "s", 2).await {
            Ok(out) => break out,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.code(), ErrorCode::StoreUnavailable, "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the store did not recover: {e}"),
        }
    };
    assert_eq!(out.events[0].event.index, 2, "the first event survived");
    let mut feed = store.stream("s", 1);
    assert_eq!(next_event(&mut feed).await.index, 2);
    append_one(&store, "s", 3).await.unwrap();
    assert_eq!(next_event(&mut feed).await.index, 3);
}

/// ST2 over REST: when the event streams are cut (Redis drops the
/// gateway's pub/sub connections), the subscriber reconnects and the feeds
/// catch up: every event appended meanwhile arrives once, in order.
#[tokio::test]
async fn rest_cut_event_streams_reconnect_and_catch_up() {
    let redis = RedisServer::start();
    let gateway = Gateway::start(&redis.url(), GatewayOptions::default());
    let store = RedisStore::connect(&gateway.url(), fault_options("rest-cut"))
        .await
        .expect("connect to the gateway");
    let mut feed = store.stream("s", 0);
    append_one(&store, "s", 1).await.unwrap();
    assert_eq!(next_event(&mut feed).await.index, 1);

    let mut admin = common::admin(&redis).await;
    for round in 0..3u64 {
        // Wait for the subscriber to be (re)connected, then cut it.
        let deadline = Instant::now() + RECONNECT_WAIT;
        while common::kill_push_connections(&mut admin).await == 0 {
            assert!(
                Instant::now() < deadline,
                "the event stream never came back"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for k in 0..5 {
            append_one(&store, "s", round * 5 + k + 2).await.unwrap();
        }
    }
    for index in 2..=16 {
        assert_eq!(next_event(&mut feed).await.index, index);
    }
    append_one(&store, "s", 17).await.unwrap();
    assert_eq!(next_event(&mut feed).await.index, 17);
}
