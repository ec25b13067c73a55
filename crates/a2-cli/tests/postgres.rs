//! The `a2` binary against a real Postgres server the tests start
//! themselves (Debian's `postgresql` package): `a2 demo` and `a2 inspect`
//! with a `postgres://` URL, several `a2 worker` processes draining one
//! database while one of them is killed (RT2, RT3, C5, C6, CO5), and a
//! worker woken by another process's append through LISTEN/NOTIFY (PS2).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use a2::postgres::{PostgresOptions, PostgresStore};
use a2::{Store, StoreOptions};
use a2_postgres::testing::shared;
use common::a2;

/// A `postgres://` URL of the shared test server with a schema of its own.
fn url(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let schema = format!("cli_{name}_{}_{n}", std::process::id());
    format!("{}&a2_schema={schema}", shared().url())
}

async fn store(url: &str) -> PostgresStore {
    PostgresStore::connect(url, PostgresOptions::default(), StoreOptions::default())
        .await
        .unwrap()
}

/// `a2 demo --store postgres://…` completes with the same summary as on
/// the other stores, and `a2 inspect` shows its sessions and their events.
#[test]
fn demo_runs_to_completion_on_postgres_and_inspect_shows_it() {
    let url = url("demo");
    let stdout = a2(&["demo", "--think-ms", "5", "--store", &url]);
    assert!(
        stdout.contains("stored now: 45 events, 13 attempts, 5 failures, 1 dead letter"),
        "unexpected summary:\n{stdout}"
    );
    let listing = a2(&["inspect", "--store", &url]);
    let bob = listing
        .lines()
        .find(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|s| s.ends_with("/bob"))
        })
        .unwrap_or_else(|| panic!("bob's session listed:\n{listing}"));
    let columns: Vec<&str> = bob.split_whitespace().collect();
    // events, from, pending, dead, attempts, failures, log
    assert_eq!(columns[1..], ["12", "1", "0", "1", "5", "3", "open"]);
    assert!(listing.contains("3 sessions"), "{listing}");
    let events = a2(&["inspect", "--store", &url, columns[0]]);
    assert_eq!(events.matches("dead_lettered").count(), 1, "{events}");
    assert!(events.contains("last error: message body is not valid UTF-8"));
}

/// A URL naming a database that does not exist is refused with the
/// server's reason, and the password is not printed.
#[test]
fn a_wrong_database_is_refused_with_its_reason() {
    let server = shared().url();
    let wrong = server.replacen("/postgres?", "/no_such_db?", 1);
    assert_ne!(wrong, server, "the test server's URL names its database");
    let wrong = wrong.replacen("postgres@", "postgres:hunter2@", 1);
    let output = std::process::Command::new(common::A2)
        .args(["inspect", "--store", &wrong])
        .output()
        .expect("a2 runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a2 inspect succeeded: {stderr}");
    assert!(
        stderr.contains("no_such_db"),
        "names the database: {stderr}"
    );
    assert!(!stderr.contains("hunter2"), "prints the password: {stderr}");
}

/// Three `a2 worker` processes on one database, one of them killed
/// mid-run: every event is processed exactly once (see `common`). The
/// deadline is longer than on Redis: each operation is a transaction of
/// several round trips under its session's row lock, and the three
/// workers drain the same 50 sessions, so they take turns (about 90
/// messages a second here, against about 500 on Redis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_one_killed_process_everything_exactly_once_on_postgres() {
    let url = url("workers");
    let store: Arc<dyn Store> = Arc::new(store(&url).await);
    let settle = Duration::from_secs(120);
    common::three_workers_one_killed_within(&url, "a2", store, settle).await;
}

/// PS2, RT2: with the listing an hour apart, each append through another
/// store instance (another pool and listener, as another process) starts
/// the worker's handler within seconds: the wake-up came by NOTIFY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ps2_worker_is_woken_by_another_process_append_on_postgres() {
    let url = url("wake");
    let writer: Arc<dyn Store> = Arc::new(store(&url).await);
    let worker: Arc<dyn Store> = Arc::new(store(&url).await);
    common::woken_by_another_instance(writer, worker).await;
}
