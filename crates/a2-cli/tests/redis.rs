//! The `a2` binary against a real `redis-server` the tests start themselves:
//! `a2 demo --redis`, and several `a2 worker` processes draining one store
//! while one of them is killed (RT2, RT3, C5, C6, CO5).

mod common;

use std::sync::Arc;

use a2::Store;
use a2::redis::{RedisOptions, RedisStore};
use a2_redis::testing::{RedisServer, unique_prefix};

use common::{A2, a2};
use std::process::Command;

/// `a2 inspect URL SESSION` for a session that does not exist says so and
/// exits non-zero, instead of printing an empty table.
#[test]
fn inspect_of_a_missing_session_says_so_and_fails() {
    let server = RedisServer::start();
    let url = server.url();
    let prefix = unique_prefix("inspect");
    let output = Command::new(A2)
        .args([
            "inspect",
            "--redis",
            &url,
            "--prefix",
            &prefix,
            "no-such-session",
        ])
        .output()
        .expect("a2 runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a2 inspect succeeded: {stderr}");
    assert!(
        stderr.contains("\"no-such-session\" does not exist"),
        "the message names the session: {stderr}"
    );
}

/// `a2 demo --redis` completes with the same summary as on the memory
/// store, and `a2 inspect` shows its sessions and their events' states.
#[test]
fn demo_runs_to_completion_on_redis_and_inspect_shows_it() {
    let server = RedisServer::start();
    let url = server.url();
    let prefix = unique_prefix("demo");
    let stdout = a2(&[
        "demo",
        "--think-ms",
        "5",
        "--redis",
        &url,
        "--prefix",
        &prefix,
    ]);
    assert!(
        stdout.contains("demo finished: events 45, attempts 13, failures 5, dead letters 1,"),
        "unexpected summary:\n{stdout}"
    );

    let listing = a2(&["inspect", "--redis", &url, "--prefix", &prefix]);
    let bob = listing
        .lines()
        .find(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|s| s.ends_with("/bob"))
        })
        .unwrap_or_else(|| panic!("bob's session listed:\n{listing}"));
    let columns: Vec<&str> = bob.split_whitespace().collect();
    // events, pending, dead, attempts, failures
    assert_eq!(columns[1..], ["12", "0", "1", "5", "3"]);
    assert!(listing.contains("3 sessions"));

    let events = a2(&["inspect", "--redis", &url, "--prefix", &prefix, columns[0]]);
    assert_eq!(
        events.matches("processed by attempt 1").count(),
        2,
        "{events}"
    );
    assert_eq!(events.matches("dead-lettered").count(), 1, "{events}");
    assert!(events.contains("last error: message body is not valid UTF-8"));
    assert!(events.contains("settled"));
}

/// Three `a2 worker` processes on one Redis, one of them killed mid-run:
/// every event is processed exactly once (see `common`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_one_killed_process_everything_exactly_once() {
    let server = RedisServer::start();
    let url = server.url();
    let prefix = unique_prefix("workers");
    let store: Arc<dyn Store> = Arc::new(
        RedisStore::connect(&url, RedisOptions::default().prefix(prefix.clone()))
            .await
            .unwrap(),
    );
    common::three_workers_one_killed(&url, &prefix, store).await;
}
