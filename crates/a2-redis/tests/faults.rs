//! Server faults with a real `redis-server` process (ST5, RD1): killed,
//! restarted from its append-only file, and its push connections cut.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::*;
use a2_redis::testing::RedisServer;
use a2_redis::{RedisOptions, RedisStore};
use futures::StreamExt;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);

fn fault_options(label: &str) -> RedisOptions {
    let clock = Arc::new(ManualClock::new(common::START_MS));
    common::options(label, clock)
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
}

async fn append_one(store: &RedisStore, session: &str, n: u64) -> Result<AppendOutcome> {
    store
        .append(session, vec![NewEvent::new("e", json!({ "n": n }))])
        .await
}

async fn next_event(feed: &mut EventStream) -> Event {
    tokio::time::timeout(WAIT, feed.next())
        .await
        .expect("the feed yields within the timeout")
        .expect("the feed is open")
        .expect("an event, not an error")
}

/// Retries `append` until the restarted server takes it: the store
/// reconnects by itself, the first calls may still see the old connection
/// fail.
async fn append_when_back(store: &RedisStore, session: &str, n: u64) -> AppendOutcome {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match append_one(store, session, n).await {
            Ok(out) => return out,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.code(), ErrorCode::StoreUnavailable, "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the store did not recover: {e}"),
        }
    }
}

/// ST5: SIGKILL of the server ends open feeds with `StoreUnavailable`
/// within 5 s, and calls fail fast instead of hanging.
#[tokio::test]
async fn st5_killed_server_ends_feeds_and_calls_fail_fast() {
    let mut server = RedisServer::start();
    let store = common::open(&server, fault_options("kill")).await;
    append_one(&store, "s", 1).await.unwrap();
    let mut feeds = vec![
        store.stream("s", 0),
        store.stream("s", 0),
        store.stream("t", 0),
    ];
    for feed in &mut feeds[..2] {
        assert_eq!(next_event(feed).await.index, 1);
    }

    server.kill();

    for feed in &mut feeds {
        let item = tokio::time::timeout(WAIT, feed.next())
            .await
            .expect("the feed ends within 5 s");
        let error = item.expect("an error before the end").unwrap_err();
        assert_eq!(error.code(), ErrorCode::StoreUnavailable);
        assert!(feed.next().await.is_none(), "nothing after the error");
    }
    let started = Instant::now();
    let error = append_one(&store, "s", 2).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::StoreUnavailable);
    let error = store.read("s", ReadRange::default()).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::StoreUnavailable);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "calls fail fast, took {:?}",
        started.elapsed()
    );
}

/// ST5, RD1: after a restart from the append-only file the same store
/// works again (scripts reload after NOSCRIPT), and a new feed from the
/// last delivered index continues with no gap or duplicate.
#[tokio::test]
async fn st5_restart_recovers_and_feed_resumes_exactly() {
    let mut server = RedisServer::start_with_aof();
    let store = common::open(&server, fault_options("restart")).await;
    let mut feed = store.stream("s", 0);
    for n in 1..=3 {
        append_one(&store, "s", n).await.unwrap();
    }
    let mut delivered = 0;
    for _ in 0..3 {
        delivered = next_event(&mut feed).await.index;
    }
    assert_eq!(delivered, 3);

    server.kill();
    let error = tokio::time::timeout(WAIT, feed.next())
        .await
        .expect("the feed ends")
        .expect("with an error")
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::StoreUnavailable);
    server.restart();

    let out = append_when_back(&store, "s", 4).await;
    assert_eq!(out.events[0].event.index, 4, "the log survived in the AOF");
    append_one(&store, "s", 5).await.unwrap();

    let mut resumed = store.stream("s", delivered);
    assert_eq!(next_event(&mut resumed).await.index, 4);
    assert_eq!(next_event(&mut resumed).await.index, 5);
    append_one(&store, "s", 6).await.unwrap();
    let sixth = next_event(&mut resumed).await;
    assert_eq!((sixth.index, sixth.payload.clone()), (6, json!({"n": 6})));

    // Every write path works on the restarted server.
    let claimed = store
        .claim_available(ClaimRequest {
            session: "s".into(),
            holder: "w".into(),
            lease: Lease::Ttl(1000),
            exclude_indexes: vec![],
            limit: 1,
        })
        .await
        .unwrap();
    assert!(
        matches!(claimed, ClaimOutcome::Claimed { events: rows, .. } if rows[0].event.index == 1)
    );
}

/// ST2: cutting the push connection (`CLIENT KILL TYPE pubsub`) while
/// events are appended loses no event: the subscriber reconnects and the
/// feeds catch up by reading.
#[tokio::test]
async fn st2_pubsub_connection_killed_while_appending_loses_nothing() {
    let server = RedisServer::start();
    // A long safety interval, so recovery comes from the reconnect.
    let store = common::open(
        &server,
        fault_options("pubsub-kill").follow_refresh(Duration::from_secs(60)),
    )
    .await;
    let total: u64 = 90;
    // Each feed is consumed concurrently with the appends, so it is live
    // (caught up and following pushes) when its connection is cut.
    let (progress_tx, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let consumers: Vec<_> = (0..3)
        .map(|_| {
            let mut feed = store.stream("s", 0);
            let progress_tx = progress_tx.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while (seen.len() as u64) < total {
                    let event = next_event(&mut feed).await;
                    let _ = progress_tx.send(event.index);
                    seen.push((event.index, event.payload));
                }
                seen
            })
        })
        .collect();
    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    for n in 1..=total {
        append_one(&store, "s", n).await.unwrap();
        if n % 25 == 0 {
            // Wait until some feed has this event by push, then cut.
            while tokio::time::timeout(WAIT, progress.recv()).await.unwrap() != Some(n) {}
            let killed = common::kill_push_connections(&mut admin).await;
            assert_eq!(killed, 1, "one push connection per store (ST3)");
        }
    }
    for consumer in consumers {
        let seen = consumer.await.unwrap();
        let expected: Vec<_> = (1..=total).map(|n| (n, json!({ "n": n }))).collect();
        assert_eq!(seen, expected);
    }
}

/// ST5: closing the store ends every open feed and presence subscription
/// with `StoreClosed`, and later calls fail with it.
#[tokio::test]
async fn st5_close_ends_feeds() {
    let server = RedisServer::start();
    let store = common::open(&server, fault_options("close")).await;
    let mut feed = store.stream("s", 0);
    let mut presence = store.presence_subscribe("s").await.unwrap();
    append_one(&store, "s", 1).await.unwrap();
    assert_eq!(next_event(&mut feed).await.index, 1);
    store.close().await;
    for item in [
        tokio::time::timeout(WAIT, feed.next())
            .await
            .unwrap()
            .map(|r| r.map(|_| ())),
        tokio::time::timeout(WAIT, presence.next())
            .await
            .unwrap()
            .map(|r| r.map(|_| ())),
    ] {
        assert_eq!(
            item.expect("an error").unwrap_err().code(),
            ErrorCode::StoreClosed
        );
    }
    assert_eq!(
        append_one(&store, "s", 2).await.unwrap_err().code(),
        ErrorCode::StoreClosed
    );
    let mut late = store.stream("s", 0);
    assert_eq!(
        late.next().await.expect("an error").unwrap_err().code(),
        ErrorCode::StoreClosed
    );
    let Err(late_presence) = store.presence_subscribe("s").await else {
        panic!("a presence subscription of a closed store");
    };
    assert_eq!(late_presence.code(), ErrorCode::StoreClosed);
}

/// RD1: scripts and functions are reloaded when the server lost them.
#[tokio::test]
async fn rd1_scripts_and_functions_reload_after_a_flush() {
    let server = RedisServer::start();
    let store = common::open(&server, fault_options("flush")).await;
    append_one(&store, "s", 1).await.unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    for what in ["SCRIPT", "FUNCTION"] {
        let () = redis::cmd(what)
            .arg("FLUSH")
            .query_async(&mut admin)
            .await
            .unwrap();
    }
    let out = append_one(&store, "s", 2).await.unwrap();
    assert_eq!(out.events[0].event.index, 2);
}

/// Connecting to a server that is not there fails with `StoreUnavailable`
/// within the connect timeout.
#[tokio::test]
async fn connect_to_a_missing_server_fails_fast() {
    let mut server = RedisServer::start();
    server.kill();
    let started = Instant::now();
    let error = RedisStore::connect(&server.url(), fault_options("missing"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::StoreUnavailable);
    assert!(started.elapsed() < Duration::from_secs(3));
}

fn signal(server: &RedisServer, name: &str) {
    let pid = server.pid().expect("the server runs");
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// ST5: a server that hangs (SIGSTOP) makes calls time out with
/// `StoreUnavailable` instead of hanging, and open feeds end at their next
/// safety re-read; once it resumes, the same store works again.
#[tokio::test]
async fn st5_hung_server_times_out_and_recovers() {
    let server = RedisServer::start();
    let store = common::open(
        &server,
        fault_options("hung").follow_refresh(Duration::from_millis(300)),
    )
    .await;
    append_one(&store, "s", 1).await.unwrap();
    let mut feed = store.stream("s", 0);
    assert_eq!(next_event(&mut feed).await.index, 1);

    signal(&server, "STOP");
    let started = Instant::now();
    let error = append_one(&store, "s", 2).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::StoreUnavailable);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let ended = tokio::time::timeout(WAIT, feed.next())
        .await
        .expect("the feed ends within 5 s")
        .expect("with an error")
        .unwrap_err();
    assert_eq!(ended.code(), ErrorCode::StoreUnavailable);

    signal(&server, "CONT");
    let out = append_when_back(&store, "s", 3).await;
    let mut resumed = store.stream("s", 1);
    // Whether the timed-out append of 2 was applied is unknown to the
    // caller; the log is dense either way and ends with 3.
    let mut last = 1;
    while last < out.events[0].event.index {
        let event = next_event(&mut resumed).await;
        assert_eq!(event.index, last + 1);
        last = event.index;
    }
}

/// Kills the server and starts it again from its append-only file, with no
/// call in between: the store's pooled connection still points at the old
/// process.
fn bounce(server: &mut RedisServer) {
    server.kill();
    server.restart();
}

/// RD8, ST5: the first call after a server restart goes through although
/// its pooled connection died with the old process: a read, an append (a
/// replay is A5's retry), a new feed from the last delivered index, a
/// completion (CO3). A claim is never sent twice: it succeeds or fails
/// with `StoreUnavailable`, and either way no attempt is handed out twice
/// (C6).
#[tokio::test]
async fn rd8_the_first_call_after_a_restart_succeeds_where_a_replay_is_safe() {
    let mut server = RedisServer::start_with_aof();
    let store = common::open(&server, fault_options("first-call")).await;
    for n in 1..=3 {
        append_one(&store, "s", n).await.unwrap();
    }

    bounce(&mut server);
    let rows = store.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(rows.len(), 3, "RD8: the first read after the restart");

    bounce(&mut server);
    let out = append_one(&store, "s", 4).await.unwrap();
    assert_eq!(out.events[0].event.index, 4, "RD8: the first append");

    bounce(&mut server);
    let mut feed = store.stream("s", 3);
    assert_eq!(
        next_event(&mut feed).await.index,
        4,
        "RD8, ST5: a new feed from the last delivered index"
    );
    drop(feed);

    bounce(&mut server);
    let claim = ClaimRequest {
        session: "s".into(),
        holder: "w".into(),
        lease: Lease::Ttl(1000),
        exclude_indexes: vec![],
        limit: 1,
    };
    match store.claim_available(claim.clone()).await {
        Ok(ClaimOutcome::Claimed { events: rows, .. }) => assert_eq!(claims(&rows), [(1, 1)]),
        Ok(other) => panic!("RD8: expected a claim or StoreUnavailable, got {other:?}"),
        Err(e) => {
            assert_eq!(e.code(), ErrorCode::StoreUnavailable, "{e}");
            let again = store.claim_available(claim.clone()).await.unwrap();
            let ClaimOutcome::Claimed { events: rows, .. } = again else {
                panic!("expected a claim, got {again:?}");
            };
            assert_eq!(claims(&rows), [(1, 1)], "C6: the lost claim never ran");
        }
    }
    let row = &store.read("s", ReadRange::default()).await.unwrap()[0];
    assert_eq!(row.attempt_count, 1, "C6: one attempt, never two");

    bounce(&mut server);
    let done = store
        .complete_attempt(CompleteRequest {
            session: "s".into(),
            index: 1,
            attempt: 1,
            events: vec![NewEvent::new("reply", json!("ok")).id("r-1")],
            batch_size: None,
        })
        .await
        .unwrap();
    let CompleteOutcome::Completed { events } = done else {
        panic!("RD8: expected the completion, got {done:?}");
    };
    assert_eq!(events[0].event.index, 5, "RD8, CO3: completed once");
}

fn claims(rows: &[StoredEvent]) -> Vec<(u64, u32)> {
    rows.iter()
        .map(|r| (r.event.index, r.attempt_count))
        .collect()
}
