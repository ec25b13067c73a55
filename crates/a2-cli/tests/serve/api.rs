//! The JSON API end to end: append (idempotent by id), pages, sessions,
//! state, presence, live feeds, errors, shutdown. The work API is in
//! `work.rs`.

use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

use crate::server::{Server, get, ids, post};
use crate::sse::Reader;

const T: Duration = Duration::from_secs(10);

#[tokio::test]
async fn append_is_idempotent_by_id_and_reads_page_by_page() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    let url = server.url("/v1/sessions/chat%2F1%20%F0%9F%8E%89/events");
    let batch: Vec<Value> = (1..=5)
        .map(|n| json!({"id": format!("m{n}"), "type": "user.message", "payload": {"n": n}}))
        .collect();
    let (status, first) = post(&client, url.clone(), json!({ "events": batch })).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(ids(&first["events"]), ["m1", "m2", "m3", "m4", "m5"]);
    assert_eq!(first["events"][4]["index"], 5);
    assert_eq!(first["events"][0]["session_id"], "chat/1 🎉");
    assert_eq!(first["events"][0]["state"], "pending");
    assert_eq!(first["has_pending"], true);

    // The same request again (its answer was lost): the original rows,
    // nothing written.
    let (status, again) = post(&client, url.clone(), json!({ "events": batch })).await;
    assert_eq!(status, 200);
    assert_eq!(again, first);
    // The same id with another payload is refused with the contract's code.
    let (status, conflict) = post(
        &client,
        url.clone(),
        json!({"events": [{"id": "m1", "type": "user.message", "payload": {"n": 99}}]}),
    )
    .await;
    assert_eq!(status, 409);
    assert_eq!(conflict["error"]["code"], "PartialDuplicateBatch");

    // Pages freeze the frontier of the first page (I2).
    let (_, page) = get(&client, format!("{url}?limit=2")).await;
    assert_eq!(ids(&page["events"]), ["m1", "m2"]);
    assert_eq!(page["through_index"], 5);
    post(&client, url.clone(), json!({"events": [{"type": "late"}]})).await;
    let (_, page) = get(
        &client,
        format!("{url}?after_index=4&through_index=5&limit=2"),
    )
    .await;
    assert_eq!(ids(&page["events"]), ["m5"], "the frozen bound holds");
    let (_, page) = get(&client, format!("{url}?after_index=5")).await;
    assert_eq!(page["events"][0]["type"], "late");
    assert_eq!(page["events"][0]["index"], 6);

    // History reads backwards.
    let history = server.url("/v1/sessions/chat%2F1%20%F0%9F%8E%89/history?limit=2&before_index=3");
    let (_, page) = get(&client, history).await;
    assert_eq!(ids(&page["events"]), ["m1", "m2"]);
    assert_eq!(page["has_more"], false);

    // An unknown session reads as empty.
    let (status, page) = get(&client, server.url("/v1/sessions/nobody/events")).await;
    assert_eq!(status, 200);
    assert_eq!(page["events"], json!([]));
}

#[tokio::test]
async fn sessions_are_listed_page_by_page_and_by_prefix() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    for name in ["a-1", "a-2", "a-3", "b-1"] {
        let (status, _) = post(
            &client,
            server.url(&format!("/v1/sessions/{name}/events")),
            json!({"events": [{"type": "t"}, {"type": "t", "settled": true}]}),
        )
        .await;
        assert_eq!(status, 200);
    }
    let (_, page) = get(&client, server.url("/v1/sessions?prefix=a-&limit=2")).await;
    let names: Vec<&str> = page["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a-1", "a-2"]);
    assert_eq!(page["sessions"][0]["event_count"], 2);
    assert_eq!(page["sessions"][0]["pending_count"], 1);
    let cursor = page["cursor"].as_str().unwrap();
    let (_, page) = get(
        &client,
        server.url(&format!("/v1/sessions?prefix=a-&limit=2&cursor={cursor}")),
    )
    .await;
    assert_eq!(page["sessions"][0]["session_id"], "a-3");
    assert_eq!(page["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(page["cursor"], Value::Null);
    let (status, error) = get(&client, server.url("/v1/sessions?limit=0")).await;
    assert_eq!(status, 400);
    assert_eq!(error["error"]["code"], "InvalidArgument");

    // Clearing a session removes it from the list.
    let response = client
        .delete(server.url("/v1/sessions/b-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let (_, page) = get(&client, server.url("/v1/sessions?prefix=b")).await;
    assert_eq!(page["sessions"], json!([]));
}

#[tokio::test]
async fn reducer_state_is_the_snapshot_and_the_events_after_it() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    let events: Vec<Value> = (1..=4)
        .map(|n| json!({"type": "add", "payload": n}))
        .collect();
    post(
        &client,
        server.url("/v1/sessions/s/events"),
        json!({ "events": events }),
    )
    .await;
    let (_, state) = get(&client, server.url("/v1/sessions/s/state/sum")).await;
    assert_eq!(state["snapshot"], Value::Null);
    assert_eq!(state["events"].as_array().unwrap().len(), 4);
    assert_eq!(
        (state["through_index"].clone(), state["has_more"].clone()),
        (json!(4), json!(false))
    );
    // A misspelt reducer has no snapshot: its answer is a page, not the log.
    let (_, page) = get(&client, server.url("/v1/sessions/s/state/smu?limit=3")).await;
    assert_eq!(page["events"].as_array().unwrap().len(), 3);
    assert_eq!(
        (page["through_index"].clone(), page["has_more"].clone()),
        (json!(4), json!(true))
    );
    let (status, _) = get(&client, server.url("/v1/sessions/s/state/sum?limit=0")).await;
    assert_eq!(status, 400, "a limit names its bounds");

    let put = client
        .put(server.url("/v1/sessions/s/state/sum"))
        .json(&json!({"index": 3, "state": {"sum": 6}}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 204);
    let (_, state) = get(&client, server.url("/v1/sessions/s/state/sum")).await;
    assert_eq!(state["snapshot"], json!({"index": 3, "state": {"sum": 6}}));
    assert_eq!(state["events"][0]["index"], 4);
    assert_eq!(state["events"][0]["payload"], 4);
    let (_, list) = get(&client, server.url("/v1/sessions/s/snapshots")).await;
    assert_eq!(list["snapshots"][0]["reducer"], "sum");
    assert_eq!(list["snapshots"][0]["index"], 3);

    // A snapshot beyond the frontier is bad input.
    let put = client
        .put(server.url("/v1/sessions/s/state/sum"))
        .json(&json!({"index": 9, "state": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 400);
}

#[tokio::test]
async fn presence_is_set_read_and_followed_live() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    let set = |participant: &str, body: Value| {
        client
            .put(server.url(&format!("/v1/presence/room/{participant}")))
            .json(&body)
            .send()
    };
    let response = set(
        "ann",
        json!({"values": {"typing": true}, "ttl_ms": 60_000, "at": 10}),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["patch"]["values"], json!({"typing": true}));

    let live = client
        .get(server.url("/v1/presence/room/live"))
        .send()
        .await
        .unwrap();
    let mut live = Reader::new(live);
    let snapshot = live.next(T).await.unwrap();
    assert_eq!(snapshot.event, "snapshot");
    assert_eq!(snapshot.json()["entries"][0]["participant"], "ann");

    // An older write loses (P1) and applies nothing.
    let stale: Value = set(
        "ann",
        json!({"values": {"typing": false}, "ttl_ms": 60_000, "at": 5}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(stale["patch"], Value::Null);
    set("bob", json!({"values": {"cursor": 7}, "ttl_ms": 60_000}))
        .await
        .unwrap();
    let patch = live.next(T).await.unwrap();
    assert_eq!(patch.event, "patch");
    assert_eq!(patch.json()["participant"], "bob");
    assert_eq!(patch.json()["values"], json!({"cursor": 7}));

    let (_, read) = get(&client, server.url("/v1/presence/room")).await;
    let fields: Vec<(&str, &str)> = read["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["participant"].as_str().unwrap(),
                e["field"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(fields, [("ann", "typing"), ("bob", "cursor")]);
}

#[tokio::test]
async fn a_live_tail_delivers_appends_and_resumes_from_last_event_id() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    let events = server.url("/v1/sessions/tail/events");
    post(
        &client,
        events.clone(),
        json!({"events": [{"type": "a"}, {"type": "b"}]}),
    )
    .await;
    let live = client
        .get(server.url("/v1/sessions/tail/live?after_index=1"))
        .send()
        .await
        .unwrap();
    let mut live = Reader::new(live);
    let second = live.next(T).await.unwrap();
    assert_eq!(
        (second.event.as_str(), second.id.as_deref()),
        ("event", Some("2"))
    );
    assert_eq!(second.json()["type"], "b");
    for n in 3..=5 {
        post(
            &client,
            events.clone(),
            json!({"events": [{"type": format!("e{n}")}]}),
        )
        .await;
        let message = live.next(T).await.unwrap();
        assert_eq!(message.id, Some(n.to_string()));
        assert_eq!(message.json()["type"], format!("e{n}"));
    }
    drop(live);

    // A reconnecting EventSource sends the last id it saw.
    let resumed = client
        .get(server.url("/v1/sessions/tail/live"))
        .header("Last-Event-ID", "4")
        .send()
        .await
        .unwrap();
    let mut resumed = Reader::new(resumed);
    assert_eq!(resumed.next(T).await.unwrap().id.as_deref(), Some("5"));

    let bad = client
        .get(server.url("/v1/sessions/tail/live"))
        .header("Last-Event-ID", "x")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn bad_input_gets_a_json_error_and_writes_nothing() {
    let server = Server::start(&["--store", "memory", "--max-batch", "3"]);
    let client = Client::new();
    let events = server.url("/v1/sessions/s/events");
    let cases: Vec<(Value, StatusCode)> = vec![
        (json!({"events": [{"type": ""}]}), StatusCode::BAD_REQUEST),
        (
            json!({"events": [{"type": "t", "id": "x"}, {"type": "t", "id": "x"}]}),
            StatusCode::CONFLICT,
        ),
        (
            json!({"events": [{"type": "t", "cause": {"index": 7, "attempt": 1}}]}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"events": [{"type": "t"}, {"type": "t"}, {"type": "t"}, {"type": "t"}]}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"events": [{"type": "t", "extra": 1}]}),
            StatusCode::BAD_REQUEST,
        ),
        (json!({"events": "nope"}), StatusCode::BAD_REQUEST),
    ];
    for (body, status) in cases {
        let (got, error) = post(&client, events.clone(), body.clone()).await;
        assert_eq!(got, status, "{body}: {error}");
        assert!(error["error"]["code"].is_string(), "{error}");
        assert!(error["error"]["message"].is_string(), "{error}");
    }
    // Each message says what to do: the batch limit names its option, a
    // bare array of events names the object it belongs in.
    let four = json!({"events": [{"type": "t"}, {"type": "t"}, {"type": "t"}, {"type": "t"}]});
    let (_, error) = post(&client, events.clone(), four).await;
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("--max-batch"), "{message}");
    let (status, error) = post(&client, events.clone(), json!([{"type": "t"}])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("not an array") && message.contains("{\"events\": [...]}"),
        "{message}"
    );
    let response = client
        .post(events.clone())
        .header("content-type", "application/json")
        .body("{\"events\": [")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "InvalidArgument");
    let response = client.post(events.clone()).body("{}").send().await.unwrap();
    assert_eq!(response.status(), 415);
    let (status, error) = get(&client, server.url("/v1/nowhere")).await;
    assert_eq!(
        (status, error["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("NotFound"))
    );
    let response = client.patch(events.clone()).send().await.unwrap();
    assert_eq!(response.status(), 405);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "MethodNotAllowed");

    let (_, list) = get(&client, server.url("/v1/sessions")).await;
    assert_eq!(list["sessions"], json!([]), "nothing was written");
}

/// The default store is a SQLite file in the current folder; SIGTERM ends
/// open live feeds cleanly (their clients see the end of the stream, not
/// a broken connection) and the process exits successfully.
#[tokio::test]
async fn the_default_store_is_a_file_and_sigterm_ends_streams_cleanly() {
    let mut server = Server::start(&[]);
    let client = Client::new();
    let (status, _) = post(
        &client,
        server.url("/v1/sessions/kept/events"),
        json!({"events": [{"type": "t"}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(server.db().exists(), "a2.db in the current folder");
    let live = client
        .get(server.url("/v1/sessions/kept/live"))
        .send()
        .await
        .unwrap();
    let mut live = Reader::new(live);
    assert_eq!(live.next(T).await.unwrap().id.as_deref(), Some("1"));
    let presence = client
        .get(server.url("/v1/presence/kept/live"))
        .send()
        .await
        .unwrap();
    let mut presence = Reader::new(presence);
    assert_eq!(presence.next(T).await.unwrap().event, "snapshot");

    let (ok, stderr) = server.terminate(Duration::from_secs(10));
    assert!(ok, "a2 serve exits 0 on SIGTERM:\n{stderr}");
    assert!(stderr.contains("a2 serve: stopped"), "{stderr}");
    assert_eq!(live.next(T).await, None, "the session feed ended cleanly");
    assert_eq!(
        presence.next(T).await,
        None,
        "the presence feed ended cleanly"
    );

    // The events are still in the file.
    let store =
        a2::sqlite::SqliteStore::open(server.db(), a2::sqlite::SqliteOptions::default()).unwrap();
    use a2::Store;
    let rows = store.read("kept", a2::ReadRange::default()).await.unwrap();
    assert_eq!(rows.len(), 1);
}

#[tokio::test]
async fn memory_is_used_only_when_asked_and_writes_no_file() {
    let server = Server::start(&["--store", "memory"]);
    let (status, _) = post(
        &Client::new(),
        server.url("/v1/sessions/gone/events"),
        json!({"events": [{"type": "t"}]}),
    )
    .await;
    assert_eq!(status, 200);
    let files: Vec<_> = std::fs::read_dir(server.path()).unwrap().collect();
    assert!(files.is_empty(), "no file written: {files:?}");
}

/// Logs written to a file or a pipe carry no colour codes: stderr is not a
/// terminal here, and the request log is there (RUST_LOG=debug).
#[tokio::test]
async fn logs_to_a_pipe_carry_no_colour_codes() {
    let mut server = Server::start_with(&["--store", "memory"], &[("RUST_LOG", "a2_server=debug")]);
    let (status, _) = get(&Client::new(), server.url("/v1/sessions")).await;
    assert_eq!(status, StatusCode::OK);
    let (_, stderr) = server.terminate(T);
    assert!(
        stderr.contains("request answered") && stderr.contains("/v1/sessions"),
        "the request log: {stderr}"
    );
    assert!(
        !stderr.contains('\x1b'),
        "colour codes in a piped log: {stderr:?}"
    );
}

/// A12: the payload cap is an option of `a2 serve`; a payload over it is
/// refused with a message naming the limit and the option, nothing written.
#[tokio::test]
async fn the_payload_cap_is_an_option_and_its_error_names_it() {
    let server = crate::server::Server::start(&["--store", "memory", "--max-payload-bytes", "100"]);
    let client = reqwest::Client::new();
    let append = |text: String| {
        client
            .post(server.url("/v1/sessions/s/events"))
            .json(&serde_json::json!({"events": [{"type": "note", "payload": {"text": text}}]}))
            .send()
    };
    let refused = append("x".repeat(200)).await.unwrap();
    assert_eq!(refused.status(), 400);
    let body: serde_json::Value = refused.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("limit of 100") && message.contains("--max-payload-bytes"),
        "{body}"
    );
    assert_eq!(append("x".repeat(50)).await.unwrap().status(), 200);
    let page: serde_json::Value = client
        .get(server.url("/v1/sessions/s/events"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["events"].as_array().map(Vec::len), Some(1), "{page}");
}

/// A cancel's body is optional: `POST …/cancel` with no body at all (no
/// content type, no bytes) cancels as `{}` does; a body sent without a
/// JSON content type is still 415.
#[tokio::test]
async fn a_cancel_needs_no_body() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    let (status, _) = post(
        &client,
        server.url("/v1/sessions/s/events"),
        json!({"events": [{"type": "job"}, {"type": "job"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let response = client
        .post(server.url("/v1/sessions/s/events/1/cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let outcome: Value = response.json().await.unwrap();
    assert_eq!(outcome["outcome"], "cancelled", "{outcome}");
    let response = client
        .post(server.url("/v1/sessions/s/events/2/cancel"))
        .body("{\"reason\": \"x\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

/// The SSE feed of a session carries each event's lane and cause, as the
/// JSON reads do: a chat following it groups messages by lane and links a
/// reply (here a progress event of the attempt) to the message it answers.
#[tokio::test]
async fn the_live_feed_carries_lanes_and_causes() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    let events = server.url("/v1/sessions/chat/events");
    let (status, _) = post(
        &client,
        events.clone(),
        json!({"events": [{"type": "ask", "lane": "chat"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let live = client
        .get(server.url("/v1/sessions/chat/live"))
        .send()
        .await
        .unwrap();
    let mut live = Reader::new(live);
    let first = live.next(T).await.unwrap().json();
    assert_eq!(
        (&first["lane"], &first["cause"]),
        (&json!("chat"), &json!(null))
    );
    let (status, claimed) = post(
        &client,
        server.url("/v1/work/claim"),
        json!({"holder": "w", "ttl_ms": 60_000, "limit": 1}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    let (status, _) = post(
        &client,
        events,
        json!({"events": [{"type": "typing", "lane": "ui", "cause": {"index": 1, "attempt": 1}}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let progress = live.next(T).await.unwrap().json();
    assert_eq!(
        (&progress["lane"], &progress["cause"]),
        (&json!("ui"), &json!({"index": 1, "attempt": 1})),
        "{progress}"
    );
}
