//! Work completed through this server reaches a Durable Streams
//! subscription at once: the engine tells the subscriptions of every
//! append, completion and fork made through it, so nothing waits for the
//! sweep (here set to an hour, so only the completion can wake it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::{MemoryStore, StoreOptions};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

struct Server {
    base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Server {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let store = Arc::new(MemoryStore::new(StoreOptions::default()));
        let config =
            a2_server::Config::default().with_subscription_sweep(Duration::from_secs(3600));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(a2_server::serve(listener, store, config, async {
            let _ = stopped.await;
        }));
        Self {
            base,
            stop: Some(stop),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn send(
    client: &Client,
    method: reqwest::Method,
    url: String,
    headers: &[(&str, &str)],
    token: Option<&str>,
    body: Value,
) -> (StatusCode, Value) {
    let mut request = client
        .request(method, url)
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The wake events of the wake stream.
async fn wakes(client: &Client, server: &Server) -> Vec<Value> {
    let all: Value = client
        .get(server.url("/v1/stream/wake/pool?offset=-1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    all.as_array().unwrap().clone()
}

/// Waits for the `n`th wake event, for 10 s at most (the sweep would come
/// after an hour).
async fn nth_wake(client: &Client, server: &Server, n: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(wake) = wakes(client, server).await.into_iter().nth(n - 1) {
            return wake;
        }
        assert!(
            Instant::now() < deadline,
            "no wake number {n} within 10 s: only the sweep, an hour away, would bring it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_through_the_work_api_wakes_a_subscription_at_once() {
    let server = Server::start().await;
    let client = Client::new();
    let put = reqwest::Method::PUT;
    let post = reqwest::Method::POST;
    let sub = |tail: &str| server.url(&format!("/v1/stream/__ds/subscriptions/pool{tail}"));

    let (status, body) = send(
        &client,
        put.clone(),
        server.url("/v1/stream/wake/pool"),
        &[],
        None,
        json!([]),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // A stream whose appends are work for handlers.
    let (status, body) = send(
        &client,
        put.clone(),
        server.url("/v1/stream/jobs/a"),
        &[("a2-work", "true")],
        None,
        json!([]),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = send(
        &client,
        put.clone(),
        sub(""),
        &[],
        None,
        json!({"type": "pull-wake", "pattern": "jobs/*", "wake_stream": "wake/pool", "lease_ttl_ms": 60000}),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // An append wakes it; the consumer takes the wake and acknowledges all.
    let (status, body) = send(
        &client,
        post.clone(),
        server.url("/v1/stream/jobs/a"),
        &[],
        None,
        json!({"job": 1}),
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    nth_wake(&client, &server, 1).await;
    let (status, claimed) = send(
        &client,
        post.clone(),
        sub("/claim"),
        &[],
        None,
        json!({"worker": "w"}),
    )
    .await;
    assert_eq!(status, 200, "{claimed}");
    let tail = claimed["streams"][0]["tail_offset"].clone();
    let (status, body) = send(
        &client,
        post.clone(),
        sub("/ack"),
        &[],
        claimed["token"].as_str(),
        json!({"wake_id": claimed["wake_id"], "generation": claimed["generation"], "acks": [{"stream": "jobs/a", "offset": tail}], "done": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(wakes(&client, &server).await.len(), 1);

    // A handler claims the job over the work API and completes it with an
    // event: the subscription is woken again, by the completion.
    let (status, work) = send(
        &client,
        post.clone(),
        server.url("/v1/work/claim"),
        &[],
        None,
        json!({"holder": "handler", "ttl_ms": 60000, "session": "jobs/a"}),
    )
    .await;
    assert_eq!(status, 200, "{work}");
    let event = &work["events"][0];
    let (status, body) = send(
        &client,
        post.clone(),
        server.url("/v1/work/complete"),
        &[],
        None,
        json!({"session": "jobs/a", "index": event["index"], "attempt": event["attempt_count"], "events": [{"type": "message", "payload": {"done": 1}}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["outcome"], "completed", "{body}");
    let second = nth_wake(&client, &server, 2).await;
    assert_eq!(second["stream"], "jobs/a", "{second}");
    assert!(
        second["generation"].as_u64() > claimed["generation"].as_u64(),
        "{second} after {claimed}"
    );
}
