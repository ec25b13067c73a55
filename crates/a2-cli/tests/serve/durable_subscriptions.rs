//! Durable Streams subscriptions across two `a2 serve` processes on one
//! Redis and a restart: claims raced through both servers are granted
//! once, a lease that runs out wakes a new generation and fences the old
//! holder, acknowledgements survive a restart, and a webhook is told of
//! each generation once however many processes see the appends.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2_redis::testing::RedisServer;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::server::Server;

fn serve(redis: &str) -> Server {
    Server::start(&["--store", redis, "--key-prefix", "subs"])
}

async fn put_json(client: &Client, url: String, body: Value) -> (StatusCode, Value) {
    let response = client
        .put(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn post_json(
    client: &Client,
    url: String,
    token: Option<&str>,
    body: Value,
) -> (StatusCode, Value) {
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get_json(client: &Client, url: String) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

/// Polls `check` every 50 ms until it answers something, for 15 s at most.
async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The wake events of `stream` for subscription `id`.
async fn wakes(client: &Client, server: &Server, stream: &str, id: &str) -> Vec<Value> {
    let all = get_json(
        client,
        server.url(&format!("/v1/stream/{stream}?offset=-1")),
    )
    .await;
    all.as_array()
        .unwrap()
        .iter()
        .filter(|w| w["subscription_id"] == id)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_wake_is_claimed_once_across_two_servers_and_a_restart() {
    let redis = RedisServer::start();
    let url = redis.url();
    let left = serve(&url);
    let mut right = serve(&url);
    let client = Client::new();
    let sub = |s: &Server, tail: &str| s.url(&format!("/v1/stream/__ds/subscriptions/pool{tail}"));

    let (status, _) = put_json(&client, right.url("/v1/stream/wake/pool"), json!([])).await;
    assert_eq!(status, 201);
    let (status, _) = put_json(
        &client,
        sub(&left, ""),
        json!({"type": "pull-wake", "pattern": "jobs/*", "wake_stream": "wake/pool", "lease_ttl_ms": 1000}),
    )
    .await;
    assert_eq!(status, 201);
    // The other server makes the stream: its sweep finds the subscription.
    let (status, _) = put_json(&client, right.url("/v1/stream/jobs/a"), json!({"n": 1})).await;
    assert_eq!(status, 201);
    let first = until("the first wake event", || async {
        wakes(&client, &left, "wake/pool", "pool").await.pop()
    })
    .await;
    assert_eq!(first["stream"], "jobs/a");

    // Twelve workers claim at once through both servers: one holds it.
    let claims = (0..12).map(|n| {
        let server = if n % 2 == 0 { &left } else { &right };
        post_json(
            &client,
            sub(server, "/claim"),
            None,
            json!({ "worker": format!("w{n}") }),
        )
    });
    let answers = futures::future::join_all(claims).await;
    let granted: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::OK)
        .map(|(_, b)| b)
        .collect();
    assert_eq!(granted.len(), 1, "{answers:?}");
    let holder = answers
        .iter()
        .position(|(s, _)| *s == StatusCode::OK)
        .unwrap();
    for (status, body) in &answers {
        if *status != StatusCode::OK {
            assert_eq!(*status, StatusCode::CONFLICT, "{body}");
            assert_eq!(body["error"]["code"], "ALREADY_CLAIMED");
            assert_eq!(body["error"]["current_holder"], format!("w{holder}"));
        }
    }
    let stale = granted[0].clone();

    // The holder never acks: its lease runs out, a sweep wakes the next
    // generation, another worker claims it and the first is fenced.
    let second = until("a wake after the lease", || async {
        wakes(&client, &right, "wake/pool", "pool")
            .await
            .into_iter()
            .find(|w| w["generation"].as_u64() > stale["generation"].as_u64())
    })
    .await;
    let (status, claimed) = post_json(
        &client,
        sub(&right, "/claim"),
        None,
        json!({"worker": "late"}),
    )
    .await;
    assert_eq!(status, 200, "{claimed}");
    assert_eq!(claimed["generation"], second["generation"]);
    let tail = claimed["streams"][0]["tail_offset"].clone();
    let (status, body) = post_json(
        &client,
        sub(&left, "/ack"),
        stale["token"].as_str(),
        json!({"wake_id": stale["wake_id"], "generation": stale["generation"], "acks": [{"stream": "jobs/a", "offset": tail}], "done": true}),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::CONFLICT, &json!("FENCED"))
    );
    let (status, body) = post_json(
        &client,
        sub(&left, "/ack"),
        claimed["token"].as_str(),
        json!({"wake_id": claimed["wake_id"], "generation": claimed["generation"], "acks": [{"stream": "jobs/a", "offset": tail}], "done": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"ok": true, "next_wake": false}));

    // A restarted server reads what was acknowledged from the log.
    right.terminate(Duration::from_secs(10));
    right = serve(&url);
    let shown = get_json(&client, sub(&right, "")).await;
    assert_eq!(shown["streams"][0]["acked_offset"], tail);
    let (status, body) = post_json(
        &client,
        sub(&right, "/claim"),
        None,
        json!({"worker": "again"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"]["code"], "NO_PENDING_WORK");
}

/// A webhook receiver on loopback that answers `{"done": true}` and keeps
/// the bodies it got.
async fn receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let kept = got.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut bytes = Vec::new();
                let mut buf = [0u8; 4096];
                let body = loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    bytes.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&bytes).into_owned();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let length = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if body.len() >= length {
                            break body.to_owned();
                        }
                    }
                };
                kept.lock()
                    .unwrap()
                    .push(serde_json::from_str(&body).unwrap());
                let answer = r#"{"done":true}"#;
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    (url, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_hears_each_generation_once_from_two_servers() {
    let redis = RedisServer::start();
    let url = redis.url();
    let left = serve(&url);
    let right = serve(&url);
    let client = Client::new();
    let (hook, got) = receiver().await;
    let (status, created) = put_json(
        &client,
        left.url("/v1/stream/__ds/subscriptions/feed"),
        json!({"type": "webhook", "streams": ["feed/x"], "webhook": {"url": hook}, "lease_ttl_ms": 5000}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    // The other server reads it, so it knows the subscription at once
    // (else its idle sweep finds it within ten seconds).
    let shown = get_json(&client, right.url("/v1/stream/__ds/subscriptions/feed")).await;
    assert_eq!(shown["type"], "webhook");
    let (status, _) = put_json(&client, right.url("/v1/stream/feed/x"), json!([])).await;
    assert_eq!(status, 201);
    // Round after round both servers append at once (each wakes the
    // subscription unless it saw a wake in progress; the decisions race
    // only then; the claims of the other test race every time), and the
    // receiver acknowledges each wake by answering done.
    for round in 0..10 {
        let appends = [&left, &right].map(|server| {
            client
                .post(server.url("/v1/stream/feed/x"))
                .header("content-type", "application/json")
                .body(json!({ "round": round }).to_string())
                .send()
        });
        for response in futures::future::join_all(appends).await {
            assert_eq!(response.unwrap().status(), 204);
        }
        let head = client
            .head(left.url("/v1/stream/feed/x"))
            .send()
            .await
            .unwrap();
        let tail = head.headers()["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_owned();
        until("everything acknowledged", || async {
            let shown = get_json(&client, right.url("/v1/stream/__ds/subscriptions/feed")).await;
            (shown["streams"][0]["acked_offset"] == tail.as_str()).then_some(())
        })
        .await;
    }
    let got = got.lock().unwrap().clone();
    let generations: Vec<u64> = got
        .iter()
        .map(|b| b["generation"].as_u64().unwrap())
        .collect();
    let distinct: HashSet<u64> = generations.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        generations.len(),
        "a generation told twice: {generations:?}"
    );
    assert!(generations.len() >= 10, "{generations:?}");
    assert!(got.iter().all(|b| b["subscription_id"] == "feed"));
}

/// The `first_index` of session `session` (TR5), through the JSON API.
async fn first_index(client: &Client, server: &Server, session: &str) -> u64 {
    let page = get_json(
        client,
        server.url(&format!(
            "/v1/sessions?prefix={}",
            session.replace('/', "%2F")
        )),
    )
    .await;
    page["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == session)
        .map_or(0, |s| s["first_index"].as_u64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriptions_log_is_compacted_and_its_state_kept() {
    let redis = RedisServer::start();
    let url = redis.url();
    let server = serve(&url);
    let client = Client::new();
    let sub = |tail: &str| server.url(&format!("/v1/stream/__ds/subscriptions/busy{tail}"));
    put_json(&client, server.url("/v1/stream/wake/busy"), json!([])).await;
    let (status, _) = put_json(
        &client,
        sub(""),
        json!({"type": "pull-wake", "streams": ["jobs/x"], "wake_stream": "wake/busy"}),
    )
    .await;
    assert_eq!(status, 201);
    put_json(&client, server.url("/v1/stream/jobs/x"), json!({"n": 1})).await;
    // Claims given back without acknowledging: each starts another wake
    // generation, three events of the subscription's log each time.
    let mut generation = 0;
    for n in 0..400 {
        let (status, claimed) = post_json(
            &client,
            sub("/claim"),
            None,
            json!({"worker": format!("w{n}")}),
        )
        .await;
        assert_eq!(status, 200, "{claimed}");
        generation = claimed["generation"].as_u64().unwrap();
        let (status, body) = post_json(
            &client,
            sub("/release"),
            claimed["token"].as_str(),
            json!({"wake_id": claimed["wake_id"], "generation": claimed["generation"]}),
        )
        .await;
        assert_eq!(status, 204, "{body}");
    }
    assert_eq!(generation, 400);
    // The sweep writes the whole state as one event and trims the rest.
    until("the log compacted", || async {
        (first_index(&client, &server, "__ds/subscriptions/busy").await > 1).then_some(())
    })
    .await;
    // A server that never saw the log before reads it from the compaction.
    let cold = serve(&url);
    let sub = |tail: &str| cold.url(&format!("/v1/stream/__ds/subscriptions/busy{tail}"));
    let (status, claimed) =
        post_json(&client, sub("/claim"), None, json!({"worker": "after"})).await;
    assert_eq!(status, 200, "{claimed}");
    assert_eq!(claimed["generation"].as_u64().unwrap(), generation + 1);
    let shown = get_json(&client, sub("")).await;
    assert_eq!(shown["streams"][0]["path"], "jobs/x");
    assert_eq!(shown["streams"][0]["link_type"], "explicit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_sees_the_tail_of_every_stream_a_pattern_linked() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    put_json(&client, server.url("/v1/stream/wake/many"), json!([])).await;
    let (status, _) = put_json(
        &client,
        server.url("/v1/stream/__ds/subscriptions/many"),
        json!({"type": "pull-wake", "pattern": "many/*", "wake_stream": "wake/many"}),
    )
    .await;
    assert_eq!(status, 201);
    // More streams than a claim lists one by one: their tails come from
    // one listing of the pattern.
    for n in 0..12 {
        let messages: Vec<Value> = (0..=n).map(|k| json!({ "k": k })).collect();
        let (status, _) = put_json(
            &client,
            server.url(&format!("/v1/stream/many/{n:02}")),
            Value::Array(messages),
        )
        .await;
        assert_eq!(status, 201);
    }
    let claimed = until("all twelve linked", || async {
        let (status, claimed) = post_json(
            &client,
            server.url("/v1/stream/__ds/subscriptions/many/claim"),
            None,
            json!({"worker": "w"}),
        )
        .await;
        let streams = claimed["streams"].as_array().map_or(0, Vec::len);
        if status == 200 && streams < 12 {
            // Claimed before the sweep linked them all: give it back.
            post_json(
                &client,
                server.url("/v1/stream/__ds/subscriptions/many/release"),
                claimed["token"].as_str(),
                json!({"wake_id": claimed["wake_id"], "generation": claimed["generation"]}),
            )
            .await;
        }
        (status == 200 && streams == 12).then_some(claimed)
    })
    .await;
    for stream in claimed["streams"].as_array().unwrap() {
        let path = stream["path"].as_str().unwrap();
        let head = client
            .head(server.url(&format!("/v1/stream/{path}")))
            .send()
            .await
            .unwrap();
        let tail = head.headers()["stream-next-offset"].to_str().unwrap();
        assert_eq!(stream["tail_offset"], tail, "{path}");
        assert_eq!(stream["has_pending"], true, "{path}");
    }
}
