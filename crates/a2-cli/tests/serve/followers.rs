//! Many followers of one session on `a2 serve`'s default store (SQLite):
//! they share one reader (ST7), which `/metrics`, the session listing and
//! the inspector show, and once they disconnect nothing of them is left.

use std::time::Duration;

use reqwest::Client;
use serde_json::json;

use crate::server::Server;
use crate::sse::Reader;

const WAIT: Duration = Duration::from_secs(10);

async fn metrics(client: &Client, server: &Server) -> String {
    let response = client.get(server.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// The value of the sample `name` (no labels) in a Prometheus text.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in\n{metrics}"))
}

/// Waits until the sample `name` equals `value`.
async fn until_sample(client: &Client, server: &Server, name: &str, value: f64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = metrics(client, server).await;
        if sample(&text, name) == value {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} did not reach {value}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn twenty_followers_over_sqlite_cost_one_read_per_append_and_leave_nothing_behind() {
    // The default store: SQLite in the working folder.
    let server = Server::start(&[]);
    let client = Client::new();
    let mut followers = Vec::new();
    for _ in 0..20 {
        let response = client
            .get(server.url("/v1/sessions/chat/live"))
            .send()
            .await
            .unwrap();
        followers.push(Reader::new(response));
    }
    until_sample(&client, &server, "a2_feed_followers", 20.0).await;
    let before = metrics(&client, &server).await;
    let appends = 10;
    for index in 1..=appends {
        let response = client
            .post(server.url("/v1/sessions/chat/events"))
            .json(&json!({"events": [{"type": "token", "payload": {"n": index}}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        for follower in &mut followers {
            let message = follower.next(WAIT).await.expect("an event");
            assert_eq!(message.event, "event");
            assert_eq!(message.json()["index"], json!(index));
        }
    }
    let after = metrics(&client, &server).await;
    let reads = sample(&after, "a2_feed_reads_total") - sample(&before, "a2_feed_reads_total");
    let deliveries =
        sample(&after, "a2_feed_deliveries_total") - sample(&before, "a2_feed_deliveries_total");
    assert!(
        reads <= f64::from(appends) * 1.1 + 2.0,
        "{reads} reads of the log for {appends} appends followed by 20 feeds"
    );
    assert_eq!(deliveries, f64::from(20 * appends));
    assert_eq!(sample(&after, "a2_feed_readers"), 1.0);

    let listing: serde_json::Value = client
        .get(server.url("/v1/sessions"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listing["sessions"][0]["session_id"], "chat");
    assert_eq!(listing["sessions"][0]["followers"], 20, "{listing}");
    let page = client
        .get(server.url("/ui/sessions/chat"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("20 following here"), "{page}");

    drop(followers);
    until_sample(&client, &server, "a2_feed_followers", 0.0).await;
    until_sample(&client, &server, "a2_feed_readers", 0.0).await;
}

#[tokio::test]
async fn a_stalled_follower_holds_back_nobody_and_leaves_nothing_behind() {
    use tokio::io::AsyncWriteExt;
    let server = Server::start(&[]);
    let client = Client::new();
    // A client that asks for the feed and then never reads: its socket
    // buffers fill, and the server's writes to it stall.
    let address = server.url("").trim_start_matches("http://").to_owned();
    let mut stalled = tokio::net::TcpStream::connect(&address).await.unwrap();
    stalled
        .write_all(
            format!("GET /v1/sessions/chat/live HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let response = client
        .get(server.url("/v1/sessions/chat/live"))
        .send()
        .await
        .unwrap();
    let mut reading = Reader::new(response);
    until_sample(&client, &server, "a2_feed_followers", 2.0).await;
    // 6 000 events of 2 KiB: far more than the socket buffers and the
    // shared reader's buffer hold.
    let filler = "x".repeat(2048);
    for batch in 0..60 {
        let events: Vec<_> = (0..100)
            .map(|i| json!({"type": "token", "payload": {"n": batch * 100 + i, "filler": filler}}))
            .collect();
        let response = client
            .post(server.url("/v1/sessions/chat/events"))
            .json(&json!({ "events": events }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    for index in 1..=6_000u64 {
        let message = reading.next(WAIT).await.expect("an event");
        assert_eq!(
            message.json()["index"],
            json!(index),
            "the reading follower"
        );
    }
    drop(stalled);
    drop(reading);
    until_sample(&client, &server, "a2_feed_followers", 0.0).await;
    until_sample(&client, &server, "a2_feed_readers", 0.0).await;
}

#[tokio::test]
async fn a2_inspect_server_shows_each_sessions_followers() {
    let server = Server::start(&[]);
    let client = Client::new();
    for session in ["chat", "quiet"] {
        let response = client
            .post(server.url(&format!("/v1/sessions/{session}/events")))
            .json(&json!({"events": [{"type": "note", "payload": "hi", "settled": true}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let mut followers = Vec::new();
    for _ in 0..3 {
        let response = client
            .get(server.url("/v1/sessions/chat/live"))
            .send()
            .await
            .unwrap();
        followers.push(Reader::new(response));
    }
    until_sample(&client, &server, "a2_feed_readers", 1.0).await;
    until_sample(&client, &server, "a2_feed_followers", 3.0).await;
    let base = server.url("");
    let listing = inspect(&["inspect", "--server", &base]).await;
    let rows: Vec<Vec<&str>> = listing
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0].last(), Some(&"followers"), "{listing}");
    let row = |name: &str| rows.iter().find(|r| r.first() == Some(&name)).cloned();
    assert_eq!(
        row("chat").and_then(|r| r.last().copied()),
        Some("3"),
        "{listing}"
    );
    assert_eq!(
        row("quiet").and_then(|r| r.last().copied()),
        Some("0"),
        "{listing}"
    );
    let events = inspect(&["inspect", "--server", &base, "chat"]).await;
    assert!(events.contains("3 following on the server now"), "{events}");
    assert!(events.contains("processed (settled)"), "{events}");
    drop(followers);
}

/// Runs the `a2` binary with `args`; its standard output.
async fn inspect(args: &[&str]) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_a2"))
        .args(args)
        .output()
        .await
        .expect("a2 runs");
    assert!(
        output.status.success(),
        "a2 {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}
