//! Live feeds across instances: push wake-ups, their cost, and exact
//! delivery (ST1, ST2, ST3).

use super::*;

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
        o.wake_carry_cap(64)
            .follow_refresh(Duration::from_secs(600))
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

/// ST2: a deleted mark is restored by the next refresh while the feed
/// stays push-driven. With the session's `followers` set and field
/// deleted (a flush, a restore), a write publishes nothing; the keeper's
/// next refresh finds the mark was not in force, puts it back and makes
/// the feed read, which delivers the write; the next write is delivered by
/// its wake-up alone, with no read.
#[tokio::test]
async fn st2_deleted_mark_is_restored_and_the_feed_stays_push_driven() {
    let server = RedisServer::start();
    let (a, b, _clock) = pair(&server, "lost-mark", |o| {
        o.follow_refresh(Duration::from_millis(200))
    })
    .await;
    let mut admin = common::admin(&server).await;
    let mut feed = a.stream("s", 0);
    b.append("s", vec![NewEvent::new("e", json!(1))])
        .await
        .unwrap();
    assert_eq!(next_event(&mut feed).await.index, 1);
    let keys = a.session_keys("s");
    let () = redis::pipe()
        .cmd("DEL")
        .arg(&keys.followers)
        .ignore()
        .cmd("HDEL")
        .arg(&keys.meta)
        .arg("followers")
        .ignore()
        .query_async(&mut admin)
        .await
        .unwrap();
    reset_command_calls(&mut admin).await;
    b.append("s", vec![NewEvent::new("e", json!(2))])
        .await
        .unwrap();
    // (The append may race a refresh that already restored the mark.)
    let published = command_calls(&mut admin).await.get("publish").copied();
    assert!(published.unwrap_or(0) <= 1);
    assert_eq!(next_event(&mut feed).await.index, 2);
    followers_reach(&mut admin, &a, "s", 1).await;
    let field: Option<u64> = redis::cmd("HGET")
        .arg(&keys.meta)
        .arg("followers")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(field.is_some(), "the field is back with the set");
    // The keeper makes the feeds read right after the refresh that
    // restored the mark: once a later refresh ran, that read was asked for.
    reset_command_calls(&mut admin).await;
    eventually("one more refresh", || {
        let mut admin = admin.clone();
        async move { command_calls(&mut admin).await.contains_key("zadd") }
    })
    .await;
    let reads = a.feed_stats().reads;
    reset_command_calls(&mut admin).await;
    b.append("s", vec![NewEvent::new("e", json!(3))])
        .await
        .unwrap();
    assert_eq!(next_event(&mut feed).await.index, 3);
    assert_eq!(command_calls(&mut admin).await.get("publish"), Some(&1));
    assert_eq!(a.feed_stats().reads, reads, "delivered by its wake-up");
}

/// ST2: closing a store releases its entries in the marks of the sessions
/// its feeds follow at once: the other instance's writes stop publishing
/// without waiting for the entries to lapse.
#[tokio::test]
async fn st2_closing_a_store_releases_its_marks() {
    let server = RedisServer::start();
    let (a, b, _clock) = pair(&server, "close-release", |o| {
        o.follow_refresh(Duration::from_secs(600))
    })
    .await;
    let mut admin = common::admin(&server).await;
    let mut feeds: Vec<EventStream> = ["s", "t"].iter().map(|s| a.stream(s, 0)).collect();
    for (session, feed) in ["s", "t"].iter().zip(&mut feeds) {
        b.append(session, vec![NewEvent::new("e", json!(1))])
            .await
            .unwrap();
        assert_eq!(next_event(feed).await.index, 1);
    }
    assert_eq!(followers_of(&mut admin, &a, "s").await, 1);
    assert_eq!(followers_of(&mut admin, &a, "t").await, 1);
    a.close().await;
    assert_eq!(followers_of(&mut admin, &a, "s").await, 0);
    assert_eq!(followers_of(&mut admin, &a, "t").await, 0);
    reset_command_calls(&mut admin).await;
    b.append("s", vec![NewEvent::new("e", json!(2))])
        .await
        .unwrap();
    assert_eq!(command_calls(&mut admin).await.get("publish"), None);
    for feed in &mut feeds {
        let ended = tokio::time::timeout(WAIT, feed.next()).await.unwrap();
        assert!(
            matches!(ended, Some(Err(Error::StoreClosed { .. }))),
            "{ended:?}"
        );
    }
}

/// ST2: with no write published at all for the feed's session (the event
/// written behind the store's back, as RD2 lays the log out), a healthy
/// mark means the feed hears nothing and sends nothing: an idle feed costs
/// no reads, only its share of the keeper's refresh.
#[tokio::test]
async fn st2_an_idle_feed_reads_nothing_between_refreshes() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "idle", |o| {
        o.follow_refresh(Duration::from_millis(100))
    })
    .await;
    let mut admin = common::admin(&server).await;
    let mut feed = a.stream("s", 0);
    a.append("s", vec![NewEvent::new("e", json!(1))])
        .await
        .unwrap();
    assert_eq!(next_event(&mut feed).await.index, 1);
    // Setting up may read once more after the first delivery (the read
    // that covers the time before the subscription was confirmed): the
    // count starts after the keeper's first refresh, seen on the server.
    reset_command_calls(&mut admin).await;
    eventually("a first refresh", || {
        let mut admin = admin.clone();
        async move { command_calls(&mut admin).await.contains_key("zadd") }
    })
    .await;
    let reads = a.feed_stats().reads;
    reset_command_calls(&mut admin).await;
    // Wait for five refreshes, observed on the server.
    eventually("five refreshes", || {
        let mut admin = admin.clone();
        async move {
            command_calls(&mut admin)
                .await
                .get("zadd")
                .copied()
                .unwrap_or(0)
                >= 5
        }
    })
    .await;
    assert_eq!(a.feed_stats().reads, reads, "no read while idle");
    let calls = command_calls(&mut admin).await;
    assert_eq!(calls.get("xrange"), None, "{calls:?}");
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
            .follow_refresh(Duration::from_secs(600))
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
    assert_eq!(command_calls(&mut admin).await.get("zadd"), Some(&1));
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
    assert_eq!(command_calls(&mut admin).await.get("zrem"), Some(&1));
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
