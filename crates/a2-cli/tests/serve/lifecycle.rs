//! Closing and trimming a session over HTTP (CL1, CL2, CL4, TR1, TR2,
//! TR3), on the default store (SQLite), as a browser and a client see it.

use std::time::Duration;

use reqwest::Client;
use serde_json::json;

use crate::server::{Server, get, ids, post};
use crate::sse::Reader;

const T: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_closed_session_refuses_appends_and_its_feed_ends_with_an_end_message() {
    let server = Server::start(&[]);
    let client = Client::new();
    let events = server.url("/v1/sessions/chat/events");
    let (status, _) = post(
        &client,
        events.clone(),
        json!({"events": [{"id": "q", "type": "user.message", "settled": true}]}),
    )
    .await;
    assert_eq!(status, 200);
    let live = client
        .get(server.url("/v1/sessions/chat/live"))
        .send()
        .await
        .unwrap();
    let mut live = Reader::new(live);
    assert_eq!(live.next(T).await.unwrap().id.as_deref(), Some("1"));
    post(
        &client,
        events.clone(),
        json!({"events": [{"id": "a", "type": "agent.reply", "settled": true}]}),
    )
    .await;

    let close = server.url("/v1/sessions/chat/close");
    let (status, closed) = post(&client, close.clone(), json!(null)).await;
    assert_eq!(status, 200, "{closed}");
    assert_eq!(closed["outcome"], "closed");
    assert_eq!(closed["frontier"], 2);
    let (_, again) = post(&client, close, json!(null)).await;
    assert_eq!(again["outcome"], "already_closed");
    assert_eq!(again["closed_at"], closed["closed_at"]);

    // The browser gets the rest, then `end`, then the stream ends.
    assert_eq!(live.next(T).await.unwrap().id.as_deref(), Some("2"));
    let end = live.next(T).await.unwrap();
    assert_eq!(end.event, "end", "{end:?}");
    assert!(live.next(T).await.is_none(), "the stream ends after `end`");

    let (status, refused) = post(
        &client,
        events.clone(),
        json!({"events": [{"type": "user.message"}]}),
    )
    .await;
    assert_eq!(status, 409);
    assert_eq!(refused["error"]["code"], "SessionClosed");
    // A replay of a stored batch still answers its rows (A5).
    let (status, replay) = post(
        &client,
        events,
        json!({"events": [{"id": "a", "type": "agent.reply", "settled": true}]}),
    )
    .await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(ids(&replay["events"]), ["a"]);
    let (_, listed) = get(&client, server.url("/v1/sessions")).await;
    assert_eq!(listed["sessions"][0]["closed_at"], closed["closed_at"]);
    let (status, nothing) = post(
        &client,
        server.url("/v1/sessions/nobody/close"),
        json!(null),
    )
    .await;
    assert_eq!(status, 400, "{nothing}");
}

#[tokio::test]
async fn a_trimmed_session_reads_from_its_first_retained_index() {
    let server = Server::start(&[]);
    let client = Client::new();
    let events = server.url("/v1/sessions/log/events");
    let batch: Vec<_> = (1..=5)
        .map(|n| json!({"id": format!("e{n}"), "type": "note", "settled": n != 5}))
        .collect();
    post(&client, events.clone(), json!({ "events": batch })).await;
    let trim = server.url("/v1/sessions/log/trim");

    let (status, refused) = post(&client, trim.clone(), json!({"through_index": 5})).await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("event 5") && message.contains("pending"),
        "{message}"
    );
    let (status, _) = post(&client, trim.clone(), json!({"through_index": 9})).await;
    assert_eq!(status, 400);
    let (status, _) = post(&client, trim.clone(), json!({"through": 3})).await;
    assert_eq!(status, 400, "an unknown field is refused");

    // RT19: a snapshot older than the trim point would be left unreadable:
    // refused, naming the reducer, nothing written, unless allowed.
    let status = client
        .put(server.url("/v1/sessions/log/state/count"))
        .json(&json!({"index": 2, "state": 2}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 204);
    let (status, refused) = post(&client, trim.clone(), json!({"through_index": 3})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "SnapshotsBehind");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"count\" (at #2)") && message.contains("allow_stale_snapshots"),
        "{message}"
    );
    let (_, listed) = get(&client, server.url("/v1/sessions")).await;
    assert_eq!(
        listed["sessions"][0]["first_index"], 1,
        "RT19: nothing trimmed"
    );

    let (status, trimmed) = post(
        &client,
        trim,
        json!({"through_index": 3, "allow_stale_snapshots": true}),
    )
    .await;
    assert_eq!(status, 200, "{trimmed}");
    assert_eq!(trimmed["first_index"], 4);
    let (status, stale) = get(&client, server.url("/v1/sessions/log/state/count")).await;
    assert_eq!(
        status, 410,
        "TR3: the stale snapshot no longer reads: {stale}"
    );
    let (status, gone) = get(&client, events.clone()).await;
    assert_eq!(status, 410, "{gone}");
    assert_eq!(gone["error"]["code"], "Trimmed");
    let (_, page) = get(&client, format!("{events}?after_index=3")).await;
    assert_eq!(ids(&page["events"]), ["e4", "e5"]);
    let (_, history) = get(&client, server.url("/v1/sessions/log/history")).await;
    assert_eq!(ids(&history["events"]), ["e4", "e5"]);
    assert_eq!(history["has_more"], false);
    assert_eq!(history["first_index"], 4);
    let (_, listed) = get(&client, server.url("/v1/sessions")).await;
    assert_eq!(listed["sessions"][0]["first_index"], 4);
    assert_eq!(listed["sessions"][0]["event_count"], 5);

    // A feed from before the trim point fails with the code and ends.
    let live = client
        .get(server.url("/v1/sessions/log/live?after_index=0"))
        .send()
        .await
        .unwrap();
    let mut live = Reader::new(live);
    let error = live.next(T).await.unwrap();
    assert_eq!(error.event, "error");
    assert_eq!(error.json()["error"]["code"], "Trimmed");
    assert!(live.next(T).await.is_none());
}

#[tokio::test]
async fn a_session_expires_on_its_own_and_its_feed_says_so() {
    // Every session created without an expiry gets --session-ttl-ms.
    let server = Server::start(&["--session-ttl-ms", "600000"]);
    let client = Client::new();
    let (status, _) = post(
        &client,
        server.url("/v1/sessions/kept/events"),
        json!({"events": [{"type": "note"}]}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, short) = post(
        &client,
        server.url("/v1/sessions/short/events"),
        json!({"events": [{"type": "note"}], "expiry": {"ttl_ms": 400}}),
    )
    .await;
    assert_eq!(status, 200, "{short}");
    let (_, listed) = get(&client, server.url("/v1/sessions")).await;
    let deadline = |name: &str| {
        listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["session_id"] == name)
            .map(|s| s["deadline"].as_i64().unwrap())
            .unwrap()
    };
    assert!(deadline("kept") - deadline("short") > 500_000, "{listed}");

    // A bad expiry is refused, nothing written.
    let response = client
        .put(server.url("/v1/sessions/kept/expiry"))
        .json(&json!({"ttl_ms": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let response = client
        .put(server.url("/v1/sessions/kept/expiry"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        body["deadline"],
        serde_json::Value::Null,
        "kept until deleted"
    );

    // Nobody writes to `short` again: its feed ends at its deadline.
    let live = client
        .get(server.url("/v1/sessions/short/live"))
        .send()
        .await
        .unwrap();
    let mut live = Reader::new(live);
    assert_eq!(live.next(T).await.unwrap().id.as_deref(), Some("1"));
    let error = live.next(T).await.unwrap();
    assert_eq!(error.event, "error", "{error:?}");
    assert_eq!(error.json()["error"]["code"], "SessionExpired");
    assert!(live.next(T).await.is_none());
    let (status, page) = get(&client, server.url("/v1/sessions/short/events")).await;
    assert_eq!(status, 200);
    assert_eq!(page["events"], json!([]), "gone as after a delete");
}

/// A fork over HTTP (FK1, FK3, FK4, FK5): `POST …/fork` branches a chat
/// before its reply; a browser following the new session sees the copied
/// events and then its own, the listing names the origin, the same fork
/// again is `already_forked`, another is `SessionExists` (409) and a bad
/// index is refused (400) with nothing written.
#[tokio::test]
async fn a_fork_branches_a_chat_and_follows_its_own_log() {
    let server = Server::start(&[]);
    let client = Client::new();
    let batch: Vec<_> = ["q", "a", "q2"]
        .iter()
        .map(|id| json!({"id": id, "type": "message", "settled": true}))
        .collect();
    post(
        &client,
        server.url("/v1/sessions/chat/events"),
        json!({ "events": batch }),
    )
    .await;
    let fork = server.url("/v1/sessions/chat/fork");
    let (status, forked) = post(
        &client,
        fork.clone(),
        json!({"at_index": 1, "target": "retry"}),
    )
    .await;
    assert_eq!(status, 200, "{forked}");
    assert_eq!(forked["outcome"], "forked");
    assert_eq!(forked["first_index"], 1);
    let (_, again) = post(
        &client,
        fork.clone(),
        json!({"at_index": 1, "target": "retry"}),
    )
    .await;
    assert_eq!(again["outcome"], "already_forked");
    let (status, exists) = post(
        &client,
        fork.clone(),
        json!({"at_index": 2, "target": "retry"}),
    )
    .await;
    assert_eq!(status, 409, "{exists}");
    assert_eq!(exists["error"]["code"], "SessionExists");
    let (status, bad) = post(&client, fork, json!({"at_index": 7, "target": "other"})).await;
    assert_eq!(status, 400, "{bad}");

    let live = client
        .get(server.url("/v1/sessions/retry/live"))
        .send()
        .await
        .unwrap();
    let mut live = Reader::new(live);
    assert_eq!(live.next(T).await.unwrap().id.as_deref(), Some("1"));
    post(
        &client,
        server.url("/v1/sessions/retry/events"),
        json!({"events": [{"id": "a-again", "type": "message", "settled": true}]}),
    )
    .await;
    let next = live.next(T).await.unwrap();
    assert_eq!(next.id.as_deref(), Some("2"));
    assert!(next.data.contains("a-again"), "{next:?}");
    let (_, page) = get(&client, server.url("/v1/sessions/chat/events")).await;
    assert_eq!(
        ids(&page["events"]),
        ["q", "a", "q2"],
        "the source is untouched"
    );
    let (_, listed) = get(&client, server.url("/v1/sessions")).await;
    let retry = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == "retry")
        .unwrap();
    assert_eq!(retry["forked_from"], json!({"session": "chat", "index": 1}));
    assert!(
        !listed.to_string().contains("\"other\""),
        "nothing written: {listed}"
    );
}
