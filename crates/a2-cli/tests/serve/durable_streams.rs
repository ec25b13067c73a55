//! Session logs over the Durable Streams protocol, checked with clients no
//! one here wrote: the `@durable-streams/client` npm package follows a
//! session live (SSE and long-poll) while a2 appends, then resumes from its
//! saved offset; and the public `@durable-streams/server-conformance-tests`
//! suite runs against `a2 serve` (docs/http.md records its results). npm
//! packages are installed into a cache folder; without node this fails
//! when `CI` is set.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use a2_redis::testing::node;
use reqwest::Client;
use serde_json::{Value, json};

use crate::server::Server;

const CLIENT: &str = "@durable-streams/client@0.2.7";
const SUITE: &str = "@durable-streams/server-conformance-tests@0.3.6";

const FOLLOW: &str = r#"
const { stream } = require('@durable-streams/client');
(async () => {
  const want = Number(process.env.WANT);
  const res = await stream({ url: process.env.STREAM_URL, offset: process.env.OFFSET, live: process.env.LIVE });
  const seen = [];
  let offset;
  await new Promise((resolve, reject) => {
    res.subscribeJson(async (batch) => {
      for (const item of batch.items) seen.push(item);
      offset = batch.offset;
      if (seen.length >= want) resolve();
    });
    res.closed.catch(reject);
  });
  res.cancel();
  console.log(JSON.stringify({ seen, offset }));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
"#;

async fn append(client: &Client, server: &Server, session: &str, texts: &[&str]) {
    let events: Vec<Value> = texts
        .iter()
        .map(|t| json!({"type": "assistant.delta", "payload": {"text": t}, "settled": true}))
        .collect();
    let response = client
        .post(server.url(&format!("/v1/sessions/{session}/events")))
        .json(&json!({ "events": events }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// Waits until the server counts `n` open session feeds.
async fn open_feeds(client: &Client, server: &Server, n: u32) {
    let line = format!("a2_open_streams{{kind=\"session\"}} {n}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = client
            .get(server.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metrics.lines().any(|l| l == line) {
            return;
        }
        assert!(Instant::now() < deadline, "no {line} in\n{metrics}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn follow(
    modules: &std::path::Path,
    script: &std::path::Path,
    url: String,
    live: &str,
    offset: &str,
    want: usize,
) -> std::process::Child {
    Command::new("node")
        .arg(script)
        .env("NODE_PATH", modules.join("node_modules"))
        .env("STREAM_URL", url)
        .env("LIVE", live)
        .env("OFFSET", offset)
        .env("WANT", want.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs")
}

async fn finish(child: std::process::Child) -> Value {
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test]
async fn the_durable_streams_client_follows_a_session_live_and_resumes() {
    if !node::node_available("the_durable_streams_client_follows_a_session_live_and_resumes") {
        return;
    }
    let modules = node::npm_install(&[CLIENT]);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("follow.cjs");
    std::fs::write(&script, FOLLOW).unwrap();
    let server = Server::start(&["--store", "memory"]);
    let client = Client::new();

    for live in ["sse", "long-poll"] {
        let session = format!("agent-{live}");
        let url = server.url(&format!("/v1/stream/{session}"));
        append(&client, &server, &session, &["Hel", "lo"]).await;
        let child = follow(&modules, &script, url.clone(), live, "-1", 5);
        // Once the client waits live, the agent streams the rest.
        open_feeds(&client, &server, 1).await;
        for text in [",", " wor", "ld"] {
            append(&client, &server, &session, &[text]).await;
        }
        let first = finish(child).await;
        let texts: Vec<&str> = first["seen"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["Hel", "lo", ",", " wor", "ld"], "{live}");
        let saved = first["offset"].as_str().unwrap().to_owned();
        assert_eq!(saved, format!("{:016}_{:016}", 5, 0));

        // Later, from the saved offset: only what came after, nothing twice.
        open_feeds(&client, &server, 0).await;
        append(&client, &server, &session, &["!", " Bye."]).await;
        let second = finish(follow(&modules, &script, url, live, &saved, 2)).await;
        assert_eq!(
            second["seen"],
            json!([{"text": "!"}, {"text": " Bye."}]),
            "{live}"
        );
        assert_eq!(second["offset"], format!("{:016}_{:016}", 7, 0));
    }
}

const SUITE_TEST: &str = r#"
import { runConformanceTests } from "@durable-streams/server-conformance-tests"
runConformanceTests({ baseUrl: process.env.CONFORMANCE_TEST_URL, subscriptions: true })
"#;

/// Runs the whole suite against `server` and answers the titles of the
/// tests that passed and of those that failed, and how many it has.
fn run_suite(server: &Server) -> (Vec<String>, Vec<String>, u64) {
    let modules = node::npm_install(&[SUITE, CLIENT]);
    // ESM imports resolve from the file's folder, so the test file lives
    // beside the installed node_modules, under a name of its own.
    let name = format!(
        "a2-conformance-{}-{}.test.mjs",
        std::process::id(),
        server.base.rsplit(':').next().unwrap_or("0")
    );
    let test_file = modules.join(&name);
    std::fs::write(&test_file, SUITE_TEST).unwrap();
    let report = tempfile::NamedTempFile::new().unwrap();
    let output = Command::new(modules.join("node_modules/.bin/vitest"))
        // Some of the suite's tests race a reader against a writer under
        // a few seconds' timeouts; on a loaded two-core machine one of them
        // failed once in several runs. A failure is retried up to twice;
        // a test that never passes still fails.
        .args(["run", &name, "--reporter=json", "--retry=2"])
        .arg(format!("--outputFile={}", report.path().display()))
        .env("CONFORMANCE_TEST_URL", &server.base)
        .current_dir(&modules)
        .stdin(Stdio::null())
        .output()
        .expect("vitest runs");
    let _ = std::fs::remove_file(&test_file);
    let text = std::fs::read_to_string(report.path()).unwrap_or_default();
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "no vitest report ({e}):\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let mut passed = Vec::new();
    let mut failed = Vec::new();
    for file in report["testResults"].as_array().unwrap() {
        for test in file["assertionResults"].as_array().unwrap() {
            let title = test["title"].as_str().unwrap().to_owned();
            match test["status"].as_str() {
                Some("passed") => passed.push(title),
                Some("failed") => {
                    let why = test["failureMessages"][0].as_str().unwrap_or("");
                    failed.push(format!("{title}: {}", why.lines().next().unwrap_or("")));
                }
                _ => {}
            }
        }
    }
    eprintln!(
        "Durable Streams conformance: {} passed, {} failed, of {}",
        passed.len(),
        failed.len(),
        report["numTotalTests"]
    );
    let total = report["numTotalTests"].as_u64().unwrap_or(0);
    (passed, failed, total)
}

/// Every test of the suite passes, its subscription tests too (the suite
/// runs them when asked to, with webhook receivers on loopback);
/// docs/http.md records it.
fn the_suite_passes(store: &[&str]) {
    if !node::node_available("the_durable_streams_conformance_suite_passes") {
        return;
    }
    let mut args = store.to_vec();
    // The suite waits 5 s for a long-poll that times out.
    args.extend(["--cors-origin", "*", "--long-poll-ms", "3000"]);
    let server = Server::start(&args);
    let (passed, failed, total) = run_suite(&server);
    assert!(
        failed.is_empty(),
        "{} tests failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
    // Nothing skipped: every test the suite has ran and passed.
    assert!(total >= 338, "the suite has only {total} tests");
    assert_eq!(passed.len() as u64, total, "tests were skipped");
}

#[test]
fn the_durable_streams_conformance_suite_passes_on_memory() {
    the_suite_passes(&["--store", "memory"]);
}

/// The default store of `a2 serve` (SQLite, in the server's folder).
#[test]
fn the_durable_streams_conformance_suite_passes_on_the_default_store() {
    the_suite_passes(&[]);
}

#[test]
fn the_durable_streams_conformance_suite_passes_on_redis() {
    if !node::node_available("the_durable_streams_conformance_suite_passes_on_redis") {
        return;
    }
    let redis = a2_redis::testing::RedisServer::start();
    let url = redis.url();
    the_suite_passes(&["--store", &url]);
}
