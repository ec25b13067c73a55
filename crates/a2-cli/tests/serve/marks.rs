//! ST2 across processes: the mark that makes a followed session's writes
//! publish wake-ups lapses when the following process dies. `a2 serve` on
//! Redis follows a session for a browser (SSE); once the process is
//! SIGKILLed, the session's writes stop publishing within three refresh
//! periods, and the mark's keys go.

use std::time::Duration;

use a2::Store;
use a2::redis::{RedisOptions, RedisStore};
use a2_redis::testing::RedisServer;
use reqwest::Client;
use serde_json::json;
use tokio::time::Instant;

use crate::server::Server;
use crate::sse::Reader;

const WAIT: Duration = Duration::from_secs(10);
const REFRESH: Duration = Duration::from_millis(500);

/// `PUBLISH` calls the server ran so far (also inside scripts).
async fn publishes(admin: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_publish:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Appends one event; whether it published anything.
async fn append_published(
    writer: &RedisStore,
    admin: &mut redis::aio::MultiplexedConnection,
    n: u64,
) -> bool {
    let before = publishes(admin).await;
    writer
        .append("chat", vec![a2::NewEvent::new("said", json!(n))])
        .await
        .unwrap();
    publishes(admin).await > before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn st2_wake_ups_stop_within_three_refresh_periods_of_a_sigkilled_follower() {
    let redis = RedisServer::start();
    let url = redis.url();
    let server = Server::start(&[
        "--store",
        &url,
        "--follow-refresh-ms",
        &REFRESH.as_millis().to_string(),
    ]);
    let writer = RedisStore::connect(&url, RedisOptions::default())
        .await
        .unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();

    // A browser follows the session through the server.
    let response = Client::new()
        .get(server.url("/v1/sessions/chat/live"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut browser = Reader::new(response);
    // The first append also announces new work; from the second on, a
    // publish is the session's wake-up.
    append_published(&writer, &mut admin, 0).await;
    let mut n = 1;
    let deadline = Instant::now() + WAIT;
    loop {
        let published = append_published(&writer, &mut admin, n).await;
        n += 1;
        if published {
            break;
        }
        // The feed joins the mark before its first read: until then, an
        // append may publish nothing.
        assert!(Instant::now() < deadline, "no wake-up while followed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = browser.next(WAIT).await.expect("the browser hears the log");
    assert!(seen.data.contains("said"), "{}", seen.data);
    let keys = writer.session_keys("chat");
    let entries: u64 = redis::cmd("ZCARD")
        .arg(&keys.followers)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(entries, 1, "one process follows");

    // SIGKILL: nothing is released; the entry lapses.
    drop(browser);
    drop(server);
    let killed = Instant::now();
    let lapsed = loop {
        if !append_published(&writer, &mut admin, n).await {
            break killed.elapsed();
        }
        n += 1;
        assert!(
            killed.elapsed() < WAIT,
            "writes still publish {:?} after the kill",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // The last refresh before the kill set the entry to lapse three
    // periods later; one append's round trips of slack.
    assert!(
        lapsed <= REFRESH * 3 + Duration::from_millis(250),
        "wake-ups went on for {lapsed:?} after the kill"
    );
    for k in 0..20 {
        assert!(
            !append_published(&writer, &mut admin, n + 1 + k).await,
            "a write published after the mark lapsed"
        );
    }
    let exists: bool = redis::cmd("EXISTS")
        .arg(&keys.followers)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(!exists, "the lapsed set is gone");
    writer.close().await;
}
