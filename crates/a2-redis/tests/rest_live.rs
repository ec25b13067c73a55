//! What live feeds cost over REST, counted at the gateway: event streams
//! are shared per channel (1 000 feeds over 100 sessions hold 100), and
//! the polling fallback sends one pipeline per interval for every watched
//! session, nothing else, and that alone wakes the feeds.

use std::time::Duration;

use a2_core::{EventStream, NewEvent, Store};
use a2_redis::rest::{LiveMode, RestOptions};
use a2_redis::testing::gateway::{Gateway, GatewayOptions};
use a2_redis::testing::{self, unique_prefix};
use a2_redis::{RedisOptions, RedisStore};
use futures::StreamExt;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

async fn next_index(feed: &mut EventStream) -> u64 {
    tokio::time::timeout(WAIT, feed.next())
        .await
        .expect("the feed yields within the timeout")
        .expect("the feed is open")
        .expect("an event, not an error")
        .index
}

async fn append(store: &RedisStore, session: &str) {
    store
        .append(session, vec![NewEvent::new("e", json!({}))])
        .await
        .expect("append");
}

/// ST3 over REST: 1 000 feeds over 100 sessions open 100 event streams,
/// one per session's channel, and every feed hears its session's wake-ups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_event_streams_are_shared_per_channel() {
    let gateway = Gateway::start(&testing::shared().url(), GatewayOptions::default());
    // No refresh during the test: only wake-ups deliver.
    let options = RedisOptions::default()
        .prefix(unique_prefix("sse-shared"))
        .follow_refresh(Duration::from_secs(3600));
    let store = RedisStore::connect(&gateway.url(), options)
        .await
        .expect("connect");
    let before = gateway.requests().subscriptions;
    let sessions: Vec<String> = (0..100).map(|k| format!("s{k}")).collect();
    let mut feeds: Vec<EventStream> = (0..1000)
        .map(|k| store.stream(&sessions[k % 100], 0))
        .collect();
    for session in &sessions {
        append(&store, session).await;
    }
    for feed in &mut feeds {
        assert_eq!(next_index(feed).await, 1);
    }
    for session in &sessions {
        append(&store, session).await;
    }
    for feed in &mut feeds {
        assert_eq!(next_index(feed).await, 2);
    }
    assert_eq!(
        gateway.requests().subscriptions - before,
        100,
        "one event stream per session"
    );
    assert_eq!(store.event_streams(), 100, "the store reports them");
    drop(feeds);
    let deadline = tokio::time::Instant::now() + WAIT;
    while store.event_streams() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "streams left open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The polling fallback: while 40 caught-up feeds over 10 sessions wait
/// (driven by a task, as a consumer would), the store sends only
/// `/pipeline` requests, backing off from one per interval to one per idle
/// interval while nothing changes; an append of another instance then
/// reaches the feeds of its session through a poll (the safety re-read is
/// an hour away).
#[tokio::test]
async fn rest_polling_costs_one_request_per_interval_for_all_feeds() {
    let gateway = Gateway::start(
        &testing::shared().url(),
        GatewayOptions::default().subscribe(false),
    );
    let interval = Duration::from_millis(50);
    let idle = Duration::from_millis(200);
    let options = RedisOptions::default()
        .prefix(unique_prefix("polling-cost"))
        .follow_refresh(Duration::from_secs(3600));
    let rest = RestOptions::default()
        .live(LiveMode::Poll)
        .poll_interval(interval)
        .poll_idle_interval(idle);
    let store = RedisStore::connect_rest(&gateway.url(), options.clone(), rest.clone())
        .await
        .expect("connect");
    let writer = RedisStore::connect_rest(&gateway.url(), options, rest)
        .await
        .expect("connect");
    let sessions: Vec<String> = (0..10).map(|k| format!("s{k}")).collect();
    for session in &sessions {
        append(&writer, session).await;
    }
    let polls_before = gateway.requests().pipelines;
    let feeds = (0..40).map(|k| {
        store
            .stream(&sessions[k % 10], 0)
            .map(move |item| (k, item.expect("an event").index))
            .boxed()
    });
    let mut all = futures::stream::select_all(feeds);
    let (delivered, mut heard) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(item) = all.next().await {
            if delivered.send(item).is_err() {
                return;
            }
        }
    });
    let mut next = async || {
        tokio::time::timeout(WAIT, heard.recv())
            .await
            .expect("a feed yields within the timeout")
            .expect("the feeds are open")
    };
    for _ in 0..40 {
        assert_eq!(next().await.1, 1);
    }
    // The first polls see every channel for the first time, and each
    // session's reader re-reads once; wait until that is over.
    let deadline = tokio::time::Instant::now() + WAIT;
    while gateway.requests().pipelines < polls_before + 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store does not poll"
        );
        tokio::time::sleep(interval / 5).await;
    }

    // Quiet polls double the interval up to the idle one.
    tokio::time::sleep(idle * 2).await;
    let window = Duration::from_millis(1_200);
    let before = gateway.requests();
    tokio::time::sleep(window).await;
    let after = gateway.requests();
    assert_eq!(
        after.commands, before.commands,
        "no reads while nothing changes"
    );
    let polls = after.pipelines - before.pipelines;
    let at_idle = (window.as_millis() / idle.as_millis()) as u64;
    assert!(
        (at_idle - 1..=at_idle + 1).contains(&polls),
        "{polls} polls in {window:?}: one per {idle:?} once idle (one per {interval:?} would be {})",
        window.as_millis() / interval.as_millis()
    );

    append(&writer, "s3").await;
    let mut woken = Vec::new();
    while woken.len() < 4 {
        let (k, index) = next().await;
        assert_eq!((k % 10, index), (3, 2), "only the feeds of s3 hear of it");
        woken.push(k);
    }
    // The append, then one read for the four feeds of s3: they share the
    // session's reader, so a change costs one read per session that changed.
    assert_eq!(gateway.requests().commands - after.commands, 1 + 1);
}

/// ST2 with polling: a write by the same store instance reaches that
/// instance's feeds of the session at once, not at the next poll (an hour
/// away here): no poll runs in between.
#[tokio::test]
async fn rest_polling_feeds_hear_their_own_process_s_writes_at_once() {
    let gateway = Gateway::start(
        &testing::shared().url(),
        GatewayOptions::default().subscribe(false),
    );
    let options = RedisOptions::default().prefix(unique_prefix("polling-own"));
    let rest = RestOptions::default()
        .live(LiveMode::Poll)
        .poll_interval(Duration::from_secs(3600));
    let store = RedisStore::connect_rest(&gateway.url(), options, rest)
        .await
        .expect("connect");
    append(&store, "s").await;
    let mut feed = store.stream("s", 0);
    assert_eq!(next_index(&mut feed).await, 1);
    let polls = gateway.requests().pipelines;
    append(&store, "s").await;
    assert_eq!(next_index(&mut feed).await, 2);
    // A completion that returns an event, too.
    let claimed = store
        .claim_available(a2_core::ClaimRequest {
            session: "s".into(),
            holder: "w".into(),
            lease: a2_core::Lease::Ttl(60_000),
            exclude_indexes: vec![],
            limit: 1,
        })
        .await
        .expect("claim");
    let a2_core::ClaimOutcome::Claimed { events: rows, .. } = claimed else {
        panic!("{claimed:?}");
    };
    store
        .complete_attempt(a2_core::CompleteRequest {
            session: "s".into(),
            index: rows[0].event.index,
            attempt: rows[0].attempt_count,
            events: vec![NewEvent::new("reply", json!({}))],
            batch_size: None,
        })
        .await
        .expect("complete");
    assert_eq!(next_index(&mut feed).await, 3);
    assert_eq!(gateway.requests().pipelines, polls, "no poll ran");
}

/// ST5 over REST with `LiveMode::Auto`: a feed whose event stream fails
/// (the provider stops serving `/subscribe`) falls back to polling without
/// ending, and returns to the event stream once it is served again: the
/// polling stops and the next write arrives by push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_feeds_fall_back_to_polling_and_return_to_event_streams() {
    let gateway = Gateway::start(&testing::shared().url(), GatewayOptions::default());
    let options = RedisOptions::default()
        .prefix(unique_prefix("adaptive"))
        .follow_refresh(Duration::from_secs(3600));
    let rest = RestOptions::default().poll_interval(Duration::from_millis(50));
    let store = RedisStore::connect_rest(&gateway.url(), options.clone(), rest)
        .await
        .expect("connect");
    let writer = RedisStore::connect(&testing::shared().url(), options)
        .await
        .expect("connect");
    let mut feed = store.stream("s", 0);
    append(&writer, "s").await;
    assert_eq!(next_index(&mut feed).await, 1);
    assert_eq!(store.polling_channels(), 0, "over the event stream");

    gateway.set_subscribe(false);
    eventually("the feed to fall back to polling", || {
        store.polling_channels() == 1
    })
    .await;
    append(&writer, "s").await;
    assert_eq!(next_index(&mut feed).await, 2, "delivered while polling");

    gateway.set_subscribe(true);
    eventually("the event stream to come back", || {
        store.polling_channels() == 0
    })
    .await;
    let polls = gateway.requests().pipelines;
    append(&writer, "s").await;
    assert_eq!(next_index(&mut feed).await, 3, "delivered by push again");
    assert_eq!(gateway.requests().pipelines, polls, "no poll since");
}

/// Waits (with a deadline) until `check` holds.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Stream reads larger than `stream_page` are split into several requests
/// (for providers that cap reply sizes) and join exactly: a feed catching
/// up on 10 events with pages of 4 reads them all, in order, in 3 requests.
#[tokio::test]
async fn rest_stream_reads_are_paged() {
    let gateway = Gateway::start(
        &testing::shared().url(),
        GatewayOptions::default().subscribe(false),
    );
    let options = RedisOptions::default().prefix(unique_prefix("paged"));
    let rest = RestOptions::default()
        .live(LiveMode::Poll)
        .poll_interval(Duration::from_secs(3600))
        .stream_page(4);
    let store = RedisStore::connect_rest(&gateway.url(), options, rest)
        .await
        .expect("connect");
    let events = (0..10)
        .map(|n| NewEvent::new("e", json!({ "n": n })))
        .collect();
    store.append("s", events).await.expect("append");
    let before = gateway.requests().commands;
    let mut feed = store.stream("s", 0);
    for index in 1..=10 {
        assert_eq!(next_index(&mut feed).await, index);
    }
    assert_eq!(
        gateway.requests().commands - before,
        3,
        "pages of 4, 4 and 2"
    );
}
