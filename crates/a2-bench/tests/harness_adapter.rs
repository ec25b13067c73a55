//! The harness adapter as the harness runs it: a process with its settings
//! in the environment, `ENQUEUE n` lines on stdin, a descriptor and then
//! JSON samples on stdout, against a real Postgres server.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use a2_postgres::testing::PostgresServer;
use serde_json::Value;

/// An adapter process on `server`, with `settings` on top of a small
/// worker pool and one-second samples, its stdout read line by line.
struct Adapter {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Adapter {
    fn start(server: &PostgresServer, settings: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_a2-harness-adapter"))
            .env("DATABASE_URL", server.url())
            .env("WORKER_COUNT", "8")
            .env("SAMPLE_EVERY_S", "1")
            .envs(settings.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the adapter");
        let (lines_tx, lines) = mpsc::channel::<String>();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// The next line, as JSON, before `deadline`.
    fn next(&self, deadline: Instant) -> Value {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = self
            .lines
            .recv_timeout(left)
            .expect("a line before the deadline");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?} is not JSON: {e}"))
    }

    fn stop(mut self) {
        drop(self.child.stdin.take());
        self.child.kill().expect("stop the adapter");
        self.child.wait().expect("the adapter ends");
    }
}

#[test]
fn the_adapter_runs_the_jobs_it_is_fed_and_reports_them() {
    let server = PostgresServer::start();
    let mut adapter = Adapter::start(
        &server,
        &[
            ("PRODUCER_MODE", "fixed"),
            ("JOB_WORK_MS", "1"),
            ("BENCH_INSTANCE_ID", "3"),
        ],
    );
    let descriptor = adapter.next(Instant::now() + Duration::from_secs(60));
    assert_eq!(descriptor["kind"], "descriptor");
    assert_eq!(descriptor["system"], "a2");
    assert_eq!(descriptor["instance_id"], 3);
    let manifest: Value = serde_json::from_str(include_str!("../harness/adapter.json")).unwrap();
    // The harness aborts a run whose descriptor drops a declared table.
    for table in manifest["event_tables"].as_array().unwrap() {
        assert!(
            descriptor["event_tables"]
                .as_array()
                .unwrap()
                .contains(table),
            "{table} declared but not described"
        );
    }

    let stdin = adapter.child.stdin.as_mut().expect("stdin");
    for _ in 0..5 {
        stdin.write_all(b"ENQUEUE 40\n").unwrap();
    }
    stdin.flush().unwrap();
    // Every sample names the instance and a window; the rates add up to
    // the 200 jobs fed, enqueued and completed, with their claim latency.
    let (mut enqueued, mut completed, mut latency) = (0.0, 0.0, false);
    let deadline = Instant::now() + Duration::from_secs(60);
    while enqueued < 199.5 || completed < 199.5 || !latency {
        let sample = adapter.next(deadline);
        assert_eq!(sample["kind"], "adapter", "{sample}");
        assert_eq!(sample["instance_id"], 3, "{sample}");
        let (value, window) = (
            sample["value"].as_f64().unwrap(),
            sample["window_s"].as_f64().unwrap(),
        );
        match sample["metric"].as_str().unwrap() {
            "enqueue_rate" => enqueued += value * window,
            "completion_rate" => completed += value * window,
            "claim_p99_ms" => latency = value >= 0.0,
            "claim_p50_ms" | "claim_p95_ms" | "queue_depth" => {}
            other => panic!("unknown metric {other}"),
        }
    }
    assert!(
        enqueued < 200.5 && completed < 200.5,
        "{enqueued} / {completed}"
    );
    adapter.stop();
}

#[test]
fn with_a_depth_target_the_adapter_keeps_producing_and_running_jobs() {
    let server = PostgresServer::start();
    let adapter = Adapter::start(
        &server,
        &[("PRODUCER_MODE", "depth-target"), ("TARGET_DEPTH", "50")],
    );
    let (mut enqueued, mut completed, mut deepest) = (0.0, 0.0, 0.0_f64);
    // A missing line fails `next` at the deadline: 500 jobs within a minute.
    let deadline = Instant::now() + Duration::from_secs(60);
    while enqueued < 500.0 || completed < 500.0 {
        let sample = adapter.next(deadline);
        let value = sample["value"].as_f64().unwrap_or(0.0);
        let window = sample["window_s"].as_f64().unwrap_or(0.0);
        match sample["metric"].as_str() {
            Some("enqueue_rate") => enqueued += value * window,
            Some("completion_rate") => completed += value * window,
            Some("queue_depth") => deepest = deepest.max(value),
            _ => {}
        }
    }
    // Produced in batches toward the target, never far past it.
    assert!(deepest <= 50.0 + 128.0, "depth reached {deepest}");
    assert!(
        enqueued >= 500.0 && completed >= 500.0,
        "{enqueued} / {completed}"
    );
    adapter.stop();
}
