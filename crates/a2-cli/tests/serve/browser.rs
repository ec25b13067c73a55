//! The inspector in a real browser: Debian's headless Chromium, driven
//! over the W3C WebDriver protocol through `chromedriver` (the protocol is
//! HTTP and JSON, so reqwest is the whole driver). It loads the sessions
//! page, follows a live tail while events are appended, watches presence
//! arrive, revives a dead letter with its button, forks the session from a
//! row's "fork here", checks the pages fit a phone's width, and saves
//! screenshots (target/inspector.png; docs/inspector.png
//! is one of them). Without chromium and chromedriver this fails when `CI`
//! is set (scripts/test.sh installs them).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use reqwest::Client;
use serde_json::{Value, json};

use crate::server::Server;

fn browser_available(test: &str) -> bool {
    let found = |p: &str| {
        Command::new(p)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if found("chromedriver") && found("chromium") {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{test} needs chromium and chromedriver (apt-get install chromium chromium-driver)");
    }
    eprintln!("SKIPPED {test}: chromium or chromedriver is missing (this fails when CI is set)");
    false
}

/// `chromedriver` on a free loopback port; killed when dropped.
struct Driver {
    child: Child,
    base: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    async fn start(client: &Client) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let driver = Driver {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = client.get(format!("{}/status", driver.base)).send().await
                && let Ok(status) = r.json::<Value>().await
                && status["value"]["ready"] == true
            {
                return driver;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One browser session.
struct Browser<'a> {
    client: &'a Client,
    url: String,
}

impl<'a> Browser<'a> {
    async fn open(client: &'a Client, driver: &Driver) -> Browser<'a> {
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,860"]
            }
        }}});
        let answer: Value = client
            .post(format!("{}/session", driver.base))
            .json(&capabilities)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {answer}"));
        Browser {
            client,
            url: format!("{}/session/{id}", driver.base),
        }
    }

    async fn command(&self, path: &str, body: Value) -> Value {
        let answer: Value = self
            .client
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["value"].clone()
    }

    async fn go(&self, url: &str) {
        self.command("/url", json!({ "url": url })).await;
    }

    async fn script(&self, script: &str) -> Value {
        self.command("/execute/sync", json!({"script": script, "args": []}))
            .await
    }

    /// Waits until `script` returns true in the page.
    async fn until(&self, what: &str, script: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.script(script).await == Value::Bool(true) {
                return;
            }
            let text = self.script("return document.body.innerText").await;
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the page shows:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn screenshot(&self) -> Vec<u8> {
        let answer: Value = self
            .client
            .get(format!("{}/screenshot", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(answer["value"].as_str().unwrap())
            .unwrap()
    }

    async fn close(self) {
        let _ = self.client.delete(&self.url).send().await;
    }
}

async fn post(client: &Client, server: &Server, path: &str, body: Value) -> Value {
    let response = client
        .post(server.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

#[tokio::test]
async fn the_inspector_follows_a_live_tail_in_chromium() {
    if !browser_available("the_inspector_follows_a_live_tail_in_chromium") {
        return;
    }
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();
    for (session, text) in [
        ("chat-alice", "Plan a weekend in Lisbon"),
        ("chat-bob", "What's the weather in Porto?"),
        ("support-42", "My invoice is wrong"),
    ] {
        post(
            &client,
            &server,
            &format!("/v1/sessions/{session}/events"),
            json!({"events": [
                {"type": "user.message", "payload": {"text": text}, "lane": "chat"},
                {"type": "assistant.reply", "payload": {"text": "On it."}, "settled": true},
                {"type": "tool.call", "payload": {"tool": "weather", "city": "Porto"}}
            ]}),
        )
        .await;
    }
    // One dead letter and one processed event in chat-bob.
    let claim = post(
        &client,
        &server,
        "/v1/work/claim",
        json!({"session": "chat-bob", "holder": "worker-1", "ttl_ms": 60000, "limit": 5}),
    )
    .await;
    assert_eq!(claim["events"].as_array().unwrap().len(), 2);
    post(
        &client,
        &server,
        "/v1/work/complete",
        json!({"session": "chat-bob", "index": 1, "attempt": 1}),
    )
    .await;
    post(&client, &server, "/v1/work/fail", json!({"session": "chat-bob", "index": 3, "attempt": 1, "error": "weather API timed out", "max_failures": 1})).await;

    let driver = Driver::start(&client).await;
    let browser = Browser::open(&client, &driver).await;

    browser.go(&server.url("/")).await;
    browser
        .until(
            "the sessions table",
            "return document.querySelectorAll('#sessions tbody tr[data-session]').length === 3",
        )
        .await;
    // The prefix search.
    browser.go(&server.url("/?prefix=chat-")).await;
    browser
        .until(
            "the chat sessions only",
            "return document.querySelectorAll('#sessions tbody tr[data-session]').length === 2",
        )
        .await;

    browser.go(&server.url("/ui/sessions/chat-bob")).await;
    browser
        .until(
            "the dead letter",
            "return document.querySelector('#dead-letters tbody tr[data-index=\"3\"]') !== null",
        )
        .await;
    browser
        .until(
            "the live tail to connect",
            "return document.getElementById('tail-status').textContent === 'live'",
        )
        .await;
    // The agent streams its answer while the page is open.
    for chunk in ["It is ", "sunny, ", "24 °C."] {
        post(
            &client,
            &server,
            "/v1/sessions/chat-bob/events",
            json!({"events": [
                {"type": "assistant.delta", "payload": {"text": chunk}, "settled": true}
            ]}),
        )
        .await;
    }
    browser
        .until(
            "three live events",
            "return document.querySelectorAll('#tail li').length === 3",
        )
        .await;
    let tail = browser.script("return Array.from(document.querySelectorAll('#tail li')).map(li => li.getAttribute('data-index'))").await;
    assert_eq!(tail, json!(["4", "5", "6"]));
    let response = client
        .put(server.url("/v1/presence/chat-bob/bob"))
        .json(&json!({"values": {"typing": true}, "ttl_ms": 600000}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    browser
        .until(
            "bob's presence",
            "return document.querySelector('#presence tbody').innerText.includes('typing')",
        )
        .await;

    // Filters: by state, then by type prefix, then none.
    let shown = "return Array.from(document.querySelectorAll('#events tbody tr[data-index]')).filter(r => !r.hidden).map(r => r.getAttribute('data-index'))";
    browser
        .script("var s = document.getElementById('filter-state'); s.value = 'dead_lettered'; s.dispatchEvent(new Event('change')); return true")
        .await;
    assert_eq!(
        browser.script(shown).await,
        json!(["3"]),
        "only the dead letter"
    );
    browser
        .script("var s = document.getElementById('filter-state'); s.value = ''; s.dispatchEvent(new Event('change')); var t = document.getElementById('filter-type'); t.value = 'user'; t.dispatchEvent(new Event('input')); return true")
        .await;
    assert_eq!(
        browser.script(shown).await,
        json!(["1"]),
        "only user.* events"
    );
    browser
        .script("var t = document.getElementById('filter-type'); t.value = ''; t.dispatchEvent(new Event('input')); return true")
        .await;
    assert_eq!(
        browser.script(shown).await,
        json!(["3", "2", "1"]),
        "newest first, all"
    );

    // Revive the dead letter with the page's button.
    let button = browser
        .command("/element", json!({"using": "css selector", "value": "#dead-letters button.revive[data-index=\"3\"]"}))
        .await;
    let element = button
        .as_object()
        .and_then(|o| o.values().next())
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no revive button: {button}"));
    browser
        .command(&format!("/element/{element}/click"), json!({}))
        .await;
    browser
        .until("the revive to succeed", "return document.querySelector('#dead-letters button[data-index=\"3\"]').textContent === 'revived'")
        .await;
    // The page follows: the row is pending again, the counters are read anew.
    browser
        .until(
            "the revived row to be pending",
            "return document.querySelector('#events tr[data-index=\"3\"]').getAttribute('data-state') === 'pending'",
        )
        .await;
    browser
        .until(
            "the counters to show the revive and the live events",
            "var c = document.querySelector('.counters').textContent; return c.includes('0 dead-lettered') && c.includes('6 events') && c.includes('1 pending')",
        )
        .await;
    let page: Value = client
        .get(server.url("/v1/sessions/chat-bob/events?after_index=2&limit=1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        page["events"][0]["state"], "pending",
        "revived through the page"
    );

    let png = browser.screenshot().await;
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG screenshot");
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("inspector.png");
    std::fs::write(&target, &png).unwrap();
    eprintln!("screenshot: {}", target.display());

    // Fork the chat after its second event with a row's "fork here": the
    // page opens the new session, which names its origin and holds the
    // first two events (FK1, FK5).
    let fork = browser
        .command(
            "/element",
            json!({"using": "css selector", "value": "#events button.fork[data-index=\"2\"]"}),
        )
        .await;
    let element = fork
        .as_object()
        .and_then(|o| o.values().next())
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no fork button: {fork}"));
    browser
        .command(&format!("/element/{element}/click"), json!({}))
        .await;
    assert_eq!(
        browser
            .script("return document.getElementById('fork-index').value")
            .await,
        json!("2"),
        "the row's button sets the index"
    );
    browser
        .script("document.getElementById('fork-target').value = 'chat-bob-retry'; document.getElementById('fork-submit').click(); return true")
        .await;
    browser
        .until(
            "the fork to open",
            "return location.pathname === '/ui/sessions/chat-bob-retry' && !!document.getElementById('forked')",
        )
        .await;
    assert_eq!(
        browser
            .script("return Array.from(document.querySelectorAll('#events tbody tr[data-index]')).map(r => r.getAttribute('data-index'))")
            .await,
        json!(["2", "1"]),
        "the fork holds the chat's first two events"
    );
    assert!(
        browser
            .script("return document.getElementById('forked').textContent")
            .await
            .as_str()
            .is_some_and(|t| t.contains("forked from chat-bob at #2")),
        "the fork names its origin"
    );

    // Stop and later (CN1, DL1): a delayed reminder shows its due time, and
    // the cancel button of alice's pending message cancels it.
    post(
        &client,
        &server,
        "/v1/sessions/chat-alice/events",
        json!({"events": [{"type": "reminder", "payload": {}, "delay_ms": 3_600_000}]}),
    )
    .await;
    browser.go(&server.url("/ui/sessions/chat-alice")).await;
    browser
        .until(
            "the delayed reminder",
            "var r = document.querySelector('#events tr[data-index=\"4\"]'); return r !== null && r.getAttribute('data-state') === 'delayed' && r.innerText.includes('until')",
        )
        .await;
    // The button sits at the end of a wide row (the table scrolls within
    // itself): the page's own click, as the fork form's submit above.
    assert_eq!(
        browser
            .script("var b = document.querySelector('#events button.cancel[data-index=\"1\"]'); if (!b) return false; b.click(); return true")
            .await,
        json!(true),
        "a cancel button on the pending message"
    );
    browser
        .until(
            "the cancelled row",
            "var r = document.querySelector('#events tr[data-index=\"1\"]'); return r.getAttribute('data-state') === 'cancelled' && !r.querySelector('button.cancel')",
        )
        .await;
    let (_, page) = crate::server::get(&client, server.url("/v1/sessions/chat-alice/events")).await;
    assert_eq!(
        page["events"][0]["state"], "cancelled",
        "cancelled through the page"
    );
    assert_eq!(
        page["events"][0]["cancel_reason"],
        "cancelled in the inspector"
    );

    // On a phone's width the page never scrolls sideways: the header and
    // forms wrap, and the wide tables scroll within themselves.
    browser
        .command("/window/rect", json!({"width": 390, "height": 844}))
        .await;
    let fits = "var d = document.documentElement; return d.scrollWidth <= d.clientWidth";
    for path in ["/", "/ui/sessions/chat-bob"] {
        browser.go(&server.url(path)).await;
        browser
            .until(&format!("{path} to fit a narrow screen"), fits)
            .await;
    }
    assert_eq!(
        browser
            .script("var t = document.getElementById('events'); return t.scrollWidth > t.clientWidth && getComputedStyle(t).overflowX === 'auto'")
            .await,
        json!(true),
        "the events table scrolls within itself"
    );
    let png = browser.screenshot().await;
    let narrow = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("inspector-narrow.png");
    std::fs::write(&narrow, &png).unwrap();
    eprintln!("screenshot: {}", narrow.display());
    browser.close().await;
}
