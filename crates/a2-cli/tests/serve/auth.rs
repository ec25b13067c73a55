//! Tokens and scopes: every endpoint refuses a request without a token
//! (401) or with a token of the wrong scope (403); malformed JSON (400) and
//! oversized bodies (413) get JSON errors; none of them writes anything.
//! Without tokens only a loopback address may be served.

use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

use crate::server::{Server, refused};

const READ: &str = "reader-0123456789abcdef";
const APPEND: &str = "appender-0123456789abcdef";
const WORK: &str = "worker-0123456789abcdef";
const ADMIN: &str = "admin-0123456789abcdef";

fn token_file(server_dir: &std::path::Path) -> std::path::PathBuf {
    let path = server_dir.join("tokens");
    std::fs::write(
        &path,
        format!("# test tokens\n{READ} read\n{APPEND} append\n{WORK} work\n{ADMIN} admin\n"),
    )
    .unwrap();
    path
}

/// Every endpoint: method, path, the scope it needs, a valid body.
fn endpoints() -> Vec<(Method, &'static str, &'static str, Option<Value>)> {
    let claim = json!({"session": "s", "holder": "h", "claims": [{"index": 1, "attempt": 1}]});
    vec![
        (Method::GET, "/v1/sessions", "read", None),
        (Method::GET, "/v1/sessions/s/events", "read", None),
        (
            Method::POST,
            "/v1/sessions/s/events",
            "append",
            Some(json!({"events": [{"type": "t"}]})),
        ),
        (Method::GET, "/v1/sessions/s/history", "read", None),
        (Method::GET, "/v1/sessions/s/snapshots", "read", None),
        (Method::GET, "/v1/sessions/s/state/r", "read", None),
        (
            Method::PUT,
            "/v1/sessions/s/state/r",
            "work",
            Some(json!({"index": 0, "state": 1})),
        ),
        (Method::GET, "/v1/sessions/s/live", "read", None),
        (Method::DELETE, "/v1/sessions/s", "admin", None),
        (
            Method::POST,
            "/v1/sessions/s/events/1/revive",
            "admin",
            None,
        ),
        (Method::GET, "/v1/presence/s", "read", None),
        (Method::GET, "/v1/presence/s/live", "read", None),
        (
            Method::PUT,
            "/v1/presence/s/p",
            "append",
            Some(json!({"values": {"f": 1}, "ttl_ms": 1000})),
        ),
        (Method::GET, "/v1/work/pending", "work", None),
        (
            Method::POST,
            "/v1/work/claim",
            "work",
            Some(json!({"holder": "h", "ttl_ms": 1000})),
        ),
        (
            Method::POST,
            "/v1/work/renew",
            "work",
            Some({
                let mut c = claim.clone();
                c["ttl_ms"] = json!(1000);
                c
            }),
        ),
        (
            Method::POST,
            "/v1/work/complete",
            "work",
            Some(json!({"session": "s", "index": 1, "attempt": 1})),
        ),
        (
            Method::POST,
            "/v1/work/fail",
            "work",
            Some(
                json!({"session": "s", "index": 1, "attempt": 1, "error": "e", "max_failures": 1}),
            ),
        ),
        (Method::POST, "/v1/work/release", "work", Some(claim)),
        (Method::GET, "/metrics", "read", None),
    ]
}

fn token_without(scope: &str) -> &'static str {
    match scope {
        "read" => APPEND,
        _ => READ,
    }
}

async fn error_of(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .unwrap_or_else(|e| panic!("{status}: not JSON: {e}"));
    (
        status,
        body["error"]["code"].as_str().unwrap_or("").to_owned(),
    )
}

#[tokio::test]
async fn every_endpoint_refuses_missing_tokens_and_wrong_scopes_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path());
    let server = Server::start(&["--store", "memory", "--tokens", tokens.to_str().unwrap()]);
    let client = Client::new();
    for (method, path, scope, body) in endpoints() {
        let request = |token: Option<&str>| {
            let mut r = client.request(method.clone(), server.url(path));
            if let Some(body) = &body {
                r = r.json(body);
            }
            if let Some(token) = token {
                r = r.bearer_auth(token);
            }
            r.send()
        };
        let (status, code) = error_of(request(None).await.unwrap()).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::UNAUTHORIZED, "Unauthorized"),
            "{method} {path} without a token"
        );
        let (status, code) = error_of(request(Some("not-a-token-0123456789")).await.unwrap()).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::UNAUTHORIZED, "Unauthorized"),
            "{method} {path} with an unknown token"
        );
        let (status, code) = error_of(request(Some(token_without(scope))).await.unwrap()).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::FORBIDDEN, "Forbidden"),
            "{method} {path} without {scope}"
        );
        if let Some(body) = &body {
            // Malformed JSON with the right token: 400, nothing written.
            let right = match scope {
                "read" => READ,
                "append" => APPEND,
                "work" => WORK,
                _ => ADMIN,
            };
            let response = client
                .request(method.clone(), server.url(path))
                .bearer_auth(right)
                .header("content-type", "application/json")
                .body(format!("{}}}", body))
                .send()
                .await
                .unwrap();
            let (status, code) = error_of(response).await;
            assert_eq!(
                (status, code.as_str()),
                (StatusCode::BAD_REQUEST, "InvalidArgument"),
                "{method} {path} malformed"
            );
        }
    }
    // The admin token holds every scope; the right ones pass.
    let response = client
        .get(server.url("/v1/sessions"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let listing: Value = response.json().await.unwrap();
    assert_eq!(listing["sessions"], json!([]), "nothing was written");
    let presence: Value = client
        .get(server.url("/v1/presence/s"))
        .bearer_auth(READ)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(presence["entries"], json!([]), "no presence was written");
    // A browser's EventSource names its token in the query.
    let live = client
        .get(server.url(&format!("/v1/sessions/s/live?access_token={READ}")))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    let response = client
        .post(server.url("/v1/sessions/s/events"))
        .bearer_auth(APPEND)
        .json(&json!({"events": [{"type": "t"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn oversized_bodies_are_refused_with_413_and_nothing_written() {
    let server = Server::start_with(
        &["--store", "memory", "--max-body-bytes", "65536"],
        &[("A2_TOKENS", &format!("{APPEND} append;{READ} read"))],
    );
    let client = Client::new();
    let big = "x".repeat(70_000);
    for (method, path, body) in [
        (
            Method::POST,
            "/v1/sessions/s/events",
            json!({"events": [{"type": "t", "payload": big}]}),
        ),
        (
            Method::PUT,
            "/v1/presence/s/p",
            json!({"values": {"f": big}, "ttl_ms": 1000}),
        ),
    ] {
        let response = client
            .request(method.clone(), server.url(path))
            .bearer_auth(APPEND)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, Some("PayloadTooLarge")),
            "{method} {path}"
        );
        // The answer names the limit and how to raise it.
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains("65536 bytes") && message.contains("--max-body-bytes"),
            "{message}"
        );
    }
    let listing: Value = client
        .get(server.url("/v1/sessions"))
        .bearer_auth(READ)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listing["sessions"], json!([]));
    let presence: Value = client
        .get(server.url("/v1/presence/s"))
        .bearer_auth(READ)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(presence["entries"], json!([]));
}

/// An address without a port is refused with a hint of the form it takes.
#[test]
fn a_listen_address_without_a_port_gets_a_hint() {
    let stderr = refused(&["--listen", "localhost", "--store", "memory"], &[]);
    assert!(stderr.contains("HOST:PORT"), "{stderr}");
}

#[test]
fn without_tokens_only_loopback_is_served() {
    let stderr = refused(&["--listen", "0.0.0.0:0", "--store", "memory"], &[]);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0 without tokens"),
        "{stderr}"
    );
    let stderr = refused(
        &["--listen", "0.0.0.0:0", "--tokens", "/nonexistent/tokens"],
        &[],
    );
    assert!(stderr.contains("cannot read the token file"), "{stderr}");
    let stderr = refused(&["--listen", "127.0.0.1:0"], &[("A2_TOKENS", "short read")]);
    assert!(
        stderr.contains("A2_TOKENS: token entry 1 is shorter than 16 bytes"),
        "{stderr}"
    );
    // With tokens, any address is allowed.
    let _server = Server::start_with(
        &["--store", "memory"],
        &[("A2_TOKENS", &format!("{READ} read"))],
    );
}
