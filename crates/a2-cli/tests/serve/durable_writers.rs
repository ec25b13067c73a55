//! Idempotent producers across several `a2 serve` processes on one Redis
//! and across a restart: a write raced to two servers is written once, a
//! fenced epoch stays fenced on the other server, and a restarted server
//! (which folds the producers' state again from the log) still knows every
//! write.

use a2_redis::testing::RedisServer;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

use crate::server::Server;

fn serve(redis: &str) -> Server {
    Server::start(&["--store", redis, "--key-prefix", "writers"])
}

async fn write(
    client: &Client,
    server: &Server,
    epoch: u64,
    seq: u64,
) -> (StatusCode, Option<String>) {
    let response = client
        .post(server.url("/v1/stream/orders"))
        .header("content-type", "application/json")
        .header("producer-id", "checkout")
        .header("producer-epoch", epoch.to_string())
        .header("producer-seq", seq.to_string())
        .body(json!({ "epoch": epoch, "seq": seq }).to_string())
        .send()
        .await
        .unwrap();
    let current = response
        .headers()
        .get("producer-epoch")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (response.status(), current)
}

async fn messages(client: &Client, server: &Server) -> Vec<Value> {
    let body = client
        .get(server.url("/v1/stream/orders?offset=-1"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    serde_json::from_str::<Vec<Value>>(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_write_once_across_two_servers_and_a_restart() {
    let redis = RedisServer::start();
    let url = redis.url();
    let left = serve(&url);
    let mut right = serve(&url);
    let client = Client::new();
    let created = client
        .put(left.url("/v1/stream/orders"))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    // Each write raced to both servers: one writes it, the other finds it
    // written (a producer retrying through another instance).
    for seq in 0..40 {
        let (a, b) = tokio::join!(
            write(&client, &left, 0, seq),
            write(&client, &right, 0, seq)
        );
        let mut statuses = [a.0, b.0];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::OK, StatusCode::NO_CONTENT],
            "seq {seq}"
        );
    }
    let written = messages(&client, &left).await;
    let expected: Vec<Value> = (0..40)
        .map(|seq| json!({ "epoch": 0, "seq": seq }))
        .collect();
    assert_eq!(written, expected, "every write once, in order");

    // A new epoch through one server fences the old one on the other.
    assert_eq!(write(&client, &right, 1, 0).await.0, StatusCode::OK);
    let (status, current) = write(&client, &left, 0, 40).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(current.as_deref(), Some("1"));

    // A restarted server folds the state again from the log.
    drop(right);
    right = serve(&url);
    assert_eq!(
        write(&client, &right, 1, 0).await.0,
        StatusCode::NO_CONTENT,
        "a retry"
    );
    assert_eq!(
        write(&client, &right, 0, 41).await.0,
        StatusCode::FORBIDDEN,
        "still fenced"
    );
    assert_eq!(
        write(&client, &right, 1, 2).await.0,
        StatusCode::CONFLICT,
        "a gap"
    );
    assert_eq!(write(&client, &right, 1, 1).await.0, StatusCode::OK);
    assert_eq!(messages(&client, &left).await.len(), 42);
}
