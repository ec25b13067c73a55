//! What a person sees without a browser: the inspector's server-rendered
//! pages, and the metrics a scraper reads.

use std::time::Duration;

use reqwest::Client;
use serde_json::json;

use crate::server::Server;
use crate::sse::Reader;

async fn text(client: &Client, url: String) -> (u16, String) {
    let response = client.get(url).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn the_inspector_lists_sessions_and_shows_events_with_their_state() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    for name in ["chat-<b>", "chat-2", "other"] {
        client
            .post(server.url(&format!("/v1/sessions/{}/events", urlencode(name))))
            .json(&json!({"events": [{"type": "user.message", "payload": {"text": "hi"}}, {"type": "note", "settled": true}]}))
            .send()
            .await
            .unwrap();
    }
    // One dead letter in chat-2.
    let claim: serde_json::Value = client
        .post(server.url("/v1/work/claim"))
        .json(&json!({"session": "chat-2", "holder": "w", "ttl_ms": 60000}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(claim["outcome"], "claimed");
    client
        .post(server.url("/v1/work/fail"))
        .json(&json!({"session": "chat-2", "index": 1, "attempt": 1, "error": "tool <crashed>", "max_failures": 1}))
        .send()
        .await
        .unwrap();

    let (status, home) = text(&client, server.url("/")).await;
    assert_eq!(status, 200);
    assert!(home.contains("<table id=\"sessions\">"), "{home}");
    assert!(
        home.contains("chat-&lt;b&gt;"),
        "session ids are escaped: {home}"
    );
    assert!(home.contains("href=\"/ui/sessions/chat-2\""), "{home}");
    let (_, found) = text(&client, server.url("/?prefix=oth")).await;
    assert!(
        found.contains("data-session=\"other\"") && !found.contains("chat-2"),
        "{found}"
    );

    let (status, page) = text(&client, server.url("/ui/sessions/chat-2")).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("<span class=\"state dead_lettered\">dead_lettered</span>"),
        "{page}"
    );
    assert!(
        page.contains("<span class=\"state processed\">processed</span>"),
        "{page}"
    );
    assert!(page.contains("tool &lt;crashed&gt;"), "{page}");
    for counter in [
        "\"event_count\">2 events<",
        "\"pending_count\">0 pending<",
        "\"failed_count\">1 dead-lettered<",
    ] {
        assert!(page.contains(counter), "{counter} in {page}");
    }
    assert!(page.contains("id=\"tail\""), "{page}");
    assert!(page.contains("id=\"presence\""), "{page}");
    let (status, script) = text(&client, server.url("/ui/inspector.js")).await;
    assert_eq!(status, 200);
    assert!(script.contains("new EventSource"));
}

#[tokio::test]
async fn with_tokens_the_inspector_asks_for_one() {
    let token = "inspector-0123456789abcdef";
    let server = Server::start_with(
        &["--store", "memory"],
        &[("A2_TOKENS", &format!("{token} read"))],
    );
    let client = Client::new();
    let (status, page) = text(&client, server.url("/")).await;
    assert_eq!(status, 401);
    assert!(page.contains("id=\"locked\""), "{page}");
    let response = client
        .get(server.url("/"))
        .header("cookie", format!("a2_token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("<table id=\"sessions\">")
    );
}

#[tokio::test]
async fn metrics_show_on_a_fresh_server_and_count_open_streams() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    let (status, metrics) = text(&client, server.url("/metrics")).await;
    assert_eq!(status, 200);
    let lines: Vec<&str> = metrics.lines().filter(|l| l.starts_with("a2_")).collect();
    assert!(lines.len() >= 8, "{metrics}");
    assert!(
        lines.contains(&"a2_open_streams{kind=\"session\"} 0"),
        "{metrics}"
    );

    let live = client
        .get(server.url("/v1/sessions/s/live"))
        .send()
        .await
        .unwrap();
    let _live = Reader::new(live);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, metrics) = text(&client, server.url("/metrics")).await;
        if metrics
            .lines()
            .any(|l| l == "a2_open_streams{kind=\"session\"} 1")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the open feed is counted:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test]
async fn the_inspector_says_when_a_session_does_not_exist() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    let (status, page) = text(&client, server.url("/ui/sessions/nobody-here")).await;
    assert_eq!(status, 404);
    assert!(page.contains("id=\"no-session\""), "{page}");
    assert!(
        page.contains("There is no session <code>nobody-here</code>"),
        "{page}"
    );
    assert!(
        !page.contains("Live tail"),
        "no live tail of nothing: {page}"
    );
}

/// The indexes of the `#events` rows of an inspector page, in page order.
fn row_indexes(page: &str) -> Vec<u64> {
    let table = &page[page.find("id=\"events\"").expect("an events table")..];
    let table = &table[..table.find("</table>").expect("the table ends")];
    table
        .split("<tr data-index=\"")
        .skip(1)
        .filter_map(|row| row.split('"').next()?.parse().ok())
        .collect()
}

/// The href of the link with this id, unescaped.
fn link(page: &str, id: &str) -> Option<String> {
    let at = page.find(&format!("id=\"{id}\" href=\""))?;
    let rest = &page[at + format!("id=\"{id}\" href=\"").len()..];
    Some(rest[..rest.find('"')?].replace("&amp;", "&"))
}

#[tokio::test]
async fn the_inspector_opens_at_the_newest_events_and_pages_both_ways() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    let events: Vec<_> = (0..250)
        .map(|n| json!({"type": "note", "payload": n, "settled": true}))
        .collect();
    let response = client
        .post(server.url("/v1/sessions/long/events"))
        .json(&json!({ "events": events }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (status, first) = text(&client, server.url("/ui/sessions/long")).await;
    assert_eq!(status, 200);
    assert_eq!(
        row_indexes(&first),
        (151..=250).rev().collect::<Vec<u64>>(),
        "newest first"
    );
    assert!(
        link(&first, "newer-page").is_none(),
        "nothing newer than the newest"
    );
    // Appended after the first page: paging stays on the frozen frontier.
    client
        .post(server.url("/v1/sessions/long/events"))
        .json(&json!({"events": [{"type": "note", "payload": "late", "settled": true}]}))
        .send()
        .await
        .unwrap();
    let older = link(&first, "older-page").expect("an older page");
    let (_, second) = text(&client, server.url(&older)).await;
    assert_eq!(row_indexes(&second), (51..=150).rev().collect::<Vec<u64>>());
    let (_, third) = text(
        &client,
        server.url(&link(&second, "older-page").expect("older")),
    )
    .await;
    assert_eq!(row_indexes(&third), (1..=50).rev().collect::<Vec<u64>>());
    assert!(
        link(&third, "older-page").is_none(),
        "nothing older than event 1"
    );
    let (_, back) = text(
        &client,
        server.url(&link(&third, "newer-page").expect("newer")),
    )
    .await;
    assert_eq!(row_indexes(&back), (51..=150).rev().collect::<Vec<u64>>());
    let (_, newest) = text(
        &client,
        server.url(&link(&back, "newest-page").expect("newest")),
    )
    .await;
    assert_eq!(
        row_indexes(&newest),
        (152..=251).rev().collect::<Vec<u64>>(),
        "the newest, with the late event"
    );
}

#[tokio::test]
async fn a_long_payload_opens_to_the_whole_value() {
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    let long = "word ".repeat(60);
    client
        .post(server.url("/v1/sessions/s/events"))
        .json(&json!({"events": [
            {"type": "short", "payload": {"text": "hi"}},
            {"type": "long", "payload": {"text": long.clone()}}
        ]}))
        .send()
        .await
        .unwrap();
    let (_, page) = text(&client, server.url("/ui/sessions/s")).await;
    let rows: Vec<&str> = page.split("<tr data-index=").skip(1).collect();
    let long_row = rows
        .iter()
        .find(|r| r.contains("data-type=\"long\""))
        .expect("the long event");
    assert!(
        long_row.contains("<details class=\"payload\">"),
        "{long_row}"
    );
    assert!(
        long_row.contains(long.trim_end()),
        "the whole value is there to open: {long_row}"
    );
    let short_row = rows
        .iter()
        .find(|r| r.contains("data-type=\"short\""))
        .expect("the short event");
    assert!(
        !short_row.contains("<details"),
        "a short payload shows whole: {short_row}"
    );
}
