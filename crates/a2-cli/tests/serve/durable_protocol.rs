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
