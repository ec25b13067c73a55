//! Durable Streams details the public conformance suite does not check,
//! held to what the protocol and its reference server do: a `PUT` whose
//! closure differs from the stream's is another configuration (409), and a
//! closing write with data is one step.

use reqwest::{Client, StatusCode};

use crate::server::{Server, get};

async fn put(client: &Client, url: &str, closed: bool) -> StatusCode {
    let mut request = client.put(url).header("content-type", "text/plain");
    if closed {
        request = request.header("stream-closed", "true");
    }
    request.send().await.unwrap().status()
}

/// A `PUT` to an existing stream is a replay only with the same
/// configuration, closure included: without `Stream-Closed` to a closed
/// stream, or with it to an open one, it is 409; with it to a closed one,
/// 200.
#[tokio::test]
async fn a_put_whose_closure_differs_from_the_streams_conflicts() {
    let server = Server::start(&[]);
    let client = Client::new();
    let open = server.url("/v1/stream/open-one");
    assert_eq!(put(&client, &open, false).await, StatusCode::CREATED);
    assert_eq!(put(&client, &open, false).await, StatusCode::OK, "the same");
    assert_eq!(
        put(&client, &open, true).await,
        StatusCode::CONFLICT,
        "closed asked of an open stream"
    );
    let closed = server.url("/v1/stream/closed-one");
    assert_eq!(put(&client, &closed, true).await, StatusCode::CREATED);
    assert_eq!(
        put(&client, &closed, true).await,
        StatusCode::OK,
        "the same"
    );
    assert_eq!(
        put(&client, &closed, false).await,
        StatusCode::CONFLICT,
        "open asked of a closed stream: another configuration"
    );
}

/// A `POST` with `Stream-Closed` and a body appends the data and closes the
/// stream in one atomic step (CL6): the session holds the data and its
/// close at the data's last index.
#[tokio::test]
async fn a_closing_post_with_data_appends_and_closes_in_one_step() {
    let server = Server::start(&[]);
    let client = Client::new();
    let url = server.url("/v1/stream/last-words");
    assert_eq!(put(&client, &url, false).await, StatusCode::CREATED);
    let response = client
        .post(&url)
        .header("content-type", "text/plain")
        .header("stream-closed", "true")
        .body("goodbye")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        response.headers()["stream-closed"].to_str().unwrap(),
        "true"
    );
    let (_, listed) = get(&client, server.url("/v1/sessions?prefix=last-words")).await;
    let session = &listed["sessions"][0];
    assert_eq!(session["event_count"], 2, "the marker and the data");
    assert!(session["closed_at"].is_i64(), "closed: {session}");
    let refused = client
        .post(&url)
        .header("content-type", "text/plain")
        .body("more")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::CONFLICT);
}

/// `POST` of `body` to a byte stream; the offset it answers.
async fn post_bytes(client: &Client, url: &str, body: &str) -> String {
    let response = client
        .post(url)
        .header("content-type", "text/plain")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    next_offset(&response)
}

fn next_offset(response: &reqwest::Response) -> String {
    response.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// `PUT` of a fork of `source` at `offset` (and `sub` units further);
/// its status and offset.
async fn fork(
    client: &Client,
    url: &str,
    source: &str,
    offset: Option<&str>,
    sub: Option<u64>,
) -> (StatusCode, String) {
    let mut request = client
        .put(url)
        .header("content-type", "text/plain")
        .header("stream-forked-from", format!("/v1/stream/{source}"));
    if let Some(offset) = offset {
        request = request.header("stream-fork-offset", offset);
    }
    if let Some(sub) = sub {
        request = request.header("stream-fork-sub-offset", sub.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let offset = if status.is_success() {
        next_offset(&response)
    } else {
        String::new()
    };
    (status, offset)
}

/// The data of `url` after `offset`, and the offset to read next.
async fn read(client: &Client, url: &str, offset: &str) -> (String, String) {
    let response = client
        .get(format!("{url}?offset={offset}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let next = next_offset(&response);
    (response.text().await.unwrap(), next)
}

/// §8: a fork shares its source's offset space. Made at an offset, its
/// tail is that offset; its first append gets the offset the source's next
/// event has; its data read from the start is the source's up to the fork
/// point, then its own; a read from the fork offset gives only its own.
#[tokio::test]
async fn a_fork_goes_on_in_its_sources_offset_space() {
    let server = Server::start(&[]);
    let client = Client::new();
    let source = server.url("/v1/stream/source");
    assert_eq!(put(&client, &source, false).await, StatusCode::CREATED);
    let after_a = post_bytes(&client, &source, "a").await;
    let after_b = post_bytes(&client, &source, "b").await;
    let after_c = post_bytes(&client, &source, "c").await;
    let branch = server.url("/v1/stream/branch");
    let (status, tail) = fork(&client, &branch, "source", Some(&after_b), None).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(tail, after_b, "the fork's tail is its fork offset");
    let head = client.head(&branch).send().await.unwrap();
    assert_eq!(next_offset(&head), after_b, "HEAD says the same");
    let after_x = post_bytes(&client, &branch, "x").await;
    assert_eq!(after_x, after_c, "the fork's next offset is its source's");
    assert_eq!(
        read(&client, &branch, "-1").await,
        ("abx".into(), after_x.clone())
    );
    assert_eq!(
        read(&client, &branch, &after_b).await,
        ("x".into(), after_x.clone())
    );
    assert_eq!(
        read(&client, &branch, &after_a).await,
        ("bx".into(), after_x)
    );
    // The same PUT again is the same fork, its tail as it is now.
    let (status, _) = fork(&client, &branch, "source", Some(&after_b), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = fork(&client, &branch, "source", Some(&after_a), None).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "another offset is another fork"
    );
}

/// §8 with a sub-offset: a fork taking two bytes into the source's next
/// chunk ends between the fork offset and the source's next offset; its
/// first append gets the source's next offset; a fork of that fork at its
/// tail reads the same bytes and goes on the same way.
#[tokio::test]
async fn a_fork_inside_a_chunk_ends_between_its_sources_offsets() {
    let server = Server::start(&[]);
    let client = Client::new();
    let source = server.url("/v1/stream/words");
    assert_eq!(put(&client, &source, false).await, StatusCode::CREATED);
    let after_hello = post_bytes(&client, &source, "hello").await;
    let after_world = post_bytes(&client, &source, "world").await;
    let inside = server.url("/v1/stream/inside");
    let (status, tail) = fork(&client, &inside, "words", Some(&after_hello), Some(2)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(
        after_hello < tail && tail < after_world,
        "{after_hello} < {tail} < {after_world}"
    );
    assert_eq!(
        read(&client, &inside, "-1").await,
        ("hellowo".into(), tail.clone())
    );
    let deeper = server.url("/v1/stream/deeper");
    let (status, deeper_tail) = fork(&client, &deeper, "inside", Some(&tail), None).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(deeper_tail, tail, "a fork of the fork at its tail");
    assert_eq!(read(&client, &deeper, "-1").await.0, "hellowo");
    let after_x = post_bytes(&client, &inside, "X").await;
    assert_eq!(
        after_x, after_world,
        "the fork's next offset is its source's"
    );
    assert_eq!(read(&client, &inside, &tail).await, ("X".into(), after_x));
    let after_y = post_bytes(&client, &deeper, "Y").await;
    assert_eq!(after_y, after_world);
    assert_eq!(
        read(&client, &deeper, "-1").await.0,
        "helloWoY".replace('W', "w")
    );
}

/// A fork at the start takes nothing, whatever the source is: of a session
/// written through the JSON API (no marker) too. A fork asked without an
/// offset takes the source's tail, and the same `PUT` again answers 200
/// after the source grew.
#[tokio::test]
async fn forks_at_the_start_and_at_the_tail() {
    let server = Server::start(&[]);
    let client = Client::new();
    let (status, _) = crate::server::post(
        &client,
        server.url("/v1/sessions/chat/events"),
        serde_json::json!({"events": [{"type": "message", "payload": {"text": "one"}, "settled": true}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let empty = server.url("/v1/stream/empty");
    let mut request = client
        .put(&empty)
        .header("content-type", "application/json")
        .header("stream-forked-from", "/v1/stream/chat")
        .header("stream-fork-offset", "-1");
    request = request.header("stream-closed", "false");
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let (text, _) = read(&client, &empty, "-1").await;
    assert_eq!(text, "[]", "a fork at the start takes nothing");

    let source = server.url("/v1/stream/growing");
    assert_eq!(put(&client, &source, false).await, StatusCode::CREATED);
    post_bytes(&client, &source, "a").await;
    let at_tail = server.url("/v1/stream/at-tail");
    let (status, _) = fork(&client, &at_tail, "growing", None, None).await;
    assert_eq!(status, StatusCode::CREATED);
    post_bytes(&client, &source, "b").await;
    let (status, _) = fork(&client, &at_tail, "growing", None, None).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the same fork, wherever the tail is now"
    );
    assert_eq!(read(&client, &at_tail, "-1").await.0, "a");
}

/// A fork whose own events were never written — the server stopped
/// between the store's fork and them, here made by hand through the JSON
/// API's fork — is finished by the same `PUT`.
#[tokio::test]
async fn the_same_put_finishes_a_fork_left_halfway() {
    let server = Server::start(&[]);
    let client = Client::new();
    let source = server.url("/v1/stream/base");
    assert_eq!(put(&client, &source, false).await, StatusCode::CREATED);
    post_bytes(&client, &source, "a").await;
    let after_b = post_bytes(&client, &source, "b").await;
    let (status, body) = crate::server::post(
        &client,
        server.url("/v1/sessions/base/fork"),
        serde_json::json!({"at_index": 3, "target": "half"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let half = server.url("/v1/stream/half");
    let (status, tail) = fork(&client, &half, "base", Some(&after_b), None).await;
    assert!(status.is_success(), "{status}");
    assert_eq!(tail, after_b);
    assert_eq!(read(&client, &half, "-1").await.0, "ab");
    let (status, _) = fork(&client, &half, "base", Some(&after_b), None).await;
    assert_eq!(status, StatusCode::OK);
}
