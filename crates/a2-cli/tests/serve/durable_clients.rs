//! A Durable Stream that is also a2's work log, with clients no one here
//! wrote: `@durable-streams/client`'s idempotent producer (npm) writes jobs
//! to a stream of `a2 serve` (on its default store, SQLite), an a2
//! application in another process handles each job once, and two readers
//! follow the stream live — the npm client over SSE and the Python
//! `durable-streams` client (PyPI) — and see every job and every result
//! once, in order. Without node or python3 this fails when `CI` is set.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2::runtime::event;
use a2::sqlite::{SqliteOptions, SqliteStore};
use a2::{App, Store};
use a2_redis::testing::node;
use serde_json::{Value, json};

use crate::python_worker::{python_available, venv_with};
use crate::server::Server;

const CLIENT: &str = "@durable-streams/client@0.2.7";
const PYTHON_CLIENT: &str = "durable-streams==0.1.0";
/// Jobs the producer writes.
const JOBS: usize = 200;

/// Writes `JOBS` JSON jobs with an idempotent producer (batches of a few,
/// five in flight), then sends its first batch's sequence number again, as
/// a producer retrying after a lost answer would: acknowledged, not
/// written.
const PRODUCE: &str = r#"
const { DurableStream, IdempotentProducer } = require('@durable-streams/client');
(async () => {
  const url = process.env.STREAM_URL;
  const stream = new DurableStream({ url, contentType: 'application/json' });
  const producer = new IdempotentProducer(stream, 'jobs-writer', { lingerMs: 2, maxInFlight: 5 });
  for (let n = 0; n < Number(process.env.JOBS); n++) producer.append(JSON.stringify({ n }));
  await producer.flush();
  await producer.detach();
  const again = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'Producer-Id': 'jobs-writer', 'Producer-Epoch': '0', 'Producer-Seq': '0' },
    body: JSON.stringify({ n: 0 }),
  });
  console.log(JSON.stringify({ retry: again.status }));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
"#;

/// Follows the stream over SSE until it has seen `WANT` items.
const FOLLOW: &str = r#"
const { stream } = require('@durable-streams/client');
(async () => {
  const want = Number(process.env.WANT);
  const res = await stream({ url: process.env.STREAM_URL, offset: '-1', live: 'sse' });
  const seen = [];
  await new Promise((resolve, reject) => {
    res.subscribeJson(async (batch) => {
      for (const item of batch.items) seen.push(item);
      if (seen.length >= want) resolve();
    });
    res.closed.catch(reject);
  });
  res.cancel();
  console.log(JSON.stringify(seen));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
"#;

/// The Python client: reads the stream live until it has seen `WANT` items.
const READ_PY: &str = r#"
import json, os, sys
from durable_streams import stream
want = int(os.environ["WANT"])
seen = []
with stream(os.environ["STREAM_URL"], offset="-1", live="sse") as res:
    for item in res.iter_json():
        seen.append(item)
        if len(seen) >= want:
            break
print(json.dumps(seen))
"#;

fn finish(child: std::process::Child, who: &str) -> Value {
    let output = child.wait_with_output().expect("the client ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{who} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{who}: {e}: {stdout}"))
}

/// What a reader must have seen: every job once, in order, and every
/// job's result once, after its job.
fn check(who: &str, seen: &Value) {
    let items = seen.as_array().unwrap_or_else(|| panic!("{who}: {seen}"));
    let jobs: Vec<u64> = items
        .iter()
        .filter(|i| i.get("done").is_none())
        .map(|i| i["n"].as_u64().unwrap())
        .collect();
    assert_eq!(
        jobs,
        (0..JOBS as u64).collect::<Vec<_>>(),
        "{who}: every job once, in order"
    );
    let mut done: Vec<u64> = items
        .iter()
        .filter_map(|i| i.get("done").and_then(Value::as_u64))
        .collect();
    done.sort_unstable();
    assert_eq!(
        done,
        (0..JOBS as u64).collect::<Vec<_>>(),
        "{who}: every result once"
    );
    for (position, item) in items.iter().enumerate() {
        if let Some(n) = item.get("done").and_then(Value::as_u64) {
            let job = items
                .iter()
                .position(|i| i.get("done").is_none() && i["n"] == n);
            assert!(
                job.is_some_and(|j| j < position),
                "{who}: result {n} after its job"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_producer_feeds_a2_handlers_while_two_clients_follow() {
    if !node::node_available("an_idempotent_producer_feeds_a2_handlers_while_two_clients_follow")
        || !python_available("an_idempotent_producer_feeds_a2_handlers_while_two_clients_follow")
    {
        return;
    }
    let modules = node::npm_install(&[CLIENT]);
    let Some(venv) = venv_with(PYTHON_CLIENT, "the Durable Streams clients test") else {
        return;
    };
    let server = Server::start(&[]);
    let db = server.path().join("a2.db");
    let url = server.url("/v1/stream/jobs");
    let http = reqwest::Client::new();
    let created = http
        .put(&url)
        .header("content-type", "application/json")
        .header("a2-work", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    // The handlers: an a2 application in this process, on the file the
    // server writes.
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db, SqliteOptions::default()).unwrap());
    let app = App::builder(store.clone())
        .handler("message", |_ctx, job: Value| async move {
            Ok(event("message", json!({ "done": job["n"] }))?.settled())
        })
        .build()
        .unwrap();
    let worker = {
        let app = app.clone();
        tokio::spawn(async move { app.run_worker().await })
    };
    let dir = tempfile::tempdir().unwrap();
    let script = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let node_run = |path: &std::path::Path, want: usize| {
        Command::new("node")
            .arg(path)
            .env("NODE_PATH", modules.join("node_modules"))
            .env("STREAM_URL", &url)
            .env("JOBS", JOBS.to_string())
            .env("WANT", want.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node runs")
    };
    let follower = node_run(&script("follow.cjs", FOLLOW), 2 * JOBS);
    let reader = Command::new(venv.join("bin").join("python"))
        .arg(script("read.py", READ_PY))
        .env("STREAM_URL", &url)
        .env("WANT", (2 * JOBS).to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    let produced = node_run(&script("produce.cjs", PRODUCE), 0);
    let produced = tokio::task::spawn_blocking(move || finish(produced, "the producer"))
        .await
        .unwrap();
    assert_eq!(
        produced["retry"], 204,
        "a retried batch is acknowledged, not written"
    );

    // Every job handled once.
    let deadline = Instant::now() + Duration::from_secs(60);
    while app.stats().completed < JOBS as u64 {
        assert!(Instant::now() < deadline, "handled {:?}", app.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let follower = tokio::task::spawn_blocking(move || finish(follower, "the npm follower"));
    let reader = tokio::task::spawn_blocking(move || finish(reader, "the Python reader"));
    check("the npm follower", &follower.await.unwrap());
    check("the Python reader", &reader.await.unwrap());

    // The store holds each job once, processed by the handler.
    let rows = store.read("jobs", Default::default()).await.unwrap();
    let jobs: Vec<_> = rows
        .iter()
        .filter(|r| r.event.event_type == "message" && r.event.payload.get("done").is_none())
        .collect();
    assert_eq!(jobs.len(), JOBS, "each job stored once");
    assert!(
        jobs.iter()
            .all(|r| r.processed_at.is_some() && r.processed_by_attempt == Some(1))
    );
    app.shutdown(Duration::from_secs(5)).await;
    worker.await.unwrap().unwrap();
}
