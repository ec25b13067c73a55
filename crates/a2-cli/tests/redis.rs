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
            "--key-prefix",
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
        "--key-prefix",
        &prefix,
    ]);
    assert!(
        stdout.contains("stored now: 45 events, 13 attempts, 5 failures, 1 dead letter"),
        "unexpected summary:\n{stdout}"
    );

    let listing = a2(&["inspect", "--redis", &url, "--key-prefix", &prefix]);
    let bob = listing
        .lines()
        .find(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|s| s.ends_with("/bob"))
        })
        .unwrap_or_else(|| panic!("bob's session listed:\n{listing}"));
    let columns: Vec<&str> = bob.split_whitespace().collect();
    // The demo said under which name it kept bob's session.
    let named = stdout
        .lines()
        .find(|l| l.contains("this run's sessions:"))
        .unwrap_or_else(|| panic!("the demo names its sessions:\n{stdout}"));
    assert!(named.contains(columns[0]), "{named} / {bob}");
    // events, from (the first retained index), pending, dead, attempts,
    // failures, log
    assert_eq!(columns[1..], ["12", "1", "0", "1", "5", "3", "open"]);
    assert!(listing.contains("3 sessions"));

    let events = a2(&[
        "inspect",
        "--redis",
        &url,
        "--key-prefix",
        &prefix,
        columns[0],
    ]);
    assert_eq!(
        events.matches("processed (attempt 1)").count(),
        2,
        "{events}"
    );
    assert_eq!(events.matches("dead_lettered").count(), 1, "{events}");
    assert!(events.contains("last error: message body is not valid UTF-8"));
    assert!(events.contains("processed (settled)"));
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

/// PS2, RT2: a worker learns of work that another process appended by a
/// wake-up, not by its periodic listing. With the listing an hour apart,
/// each append through another store instance (another connection, as
/// another process would have) starts the worker's handler within
/// seconds. Prints the delays from append to handler start it measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ps2_worker_is_woken_by_another_process_append() {
    let server = RedisServer::start();
    let options = RedisOptions::default().prefix(unique_prefix("wake"));
    let writer = RedisStore::connect(&server.url(), options.clone())
        .await
        .unwrap();
    let worker_store = RedisStore::connect(&server.url(), options).await.unwrap();
    common::woken_by_another_instance(Arc::new(writer), Arc::new(worker_store)).await;
}

/// RT17, CN5: a cancel made the moment a handler starts reaches it, in
/// every one of 40 applications started at once, each on a store instance
/// of its own (as 40 processes would be): an application claims nothing
/// before its subscription to cancels is live, so no cancel of an attempt
/// it runs can come before it listens. Renewals are a minute apart here:
/// only the subscription can tell a handler within the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt17_cancels_reach_the_handlers_of_many_apps_started_at_once() {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use a2::NewEvent;
    use a2::runtime::App;
    use serde_json::{Value, json};

    const APPS: usize = 40;
    let server = RedisServer::start();
    let url = server.url();
    let options = RedisOptions::default().prefix(unique_prefix("cancels"));
    let canceller = RedisStore::connect(&url, options.clone()).await.unwrap();
    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel::<String>();
    let (heard, mut hearings) = tokio::sync::mpsc::unbounded_channel::<String>();
    // Cancels each handler as soon as it starts.
    let cancels = tokio::spawn(async move {
        for _ in 0..APPS {
            let session = starts.recv().await.expect("a handler starts");
            let outcome = canceller.cancel(&session, 1, Some("stop".into())).await;
            assert!(
                matches!(outcome, Ok(a2::CancelOutcome::Cancelled(_))),
                "{session}: {outcome:?}"
            );
        }
    });
    let apps = futures::future::join_all((0..APPS).map(|n| {
        let (url, options) = (url.clone(), options.clone());
        let (started, heard) = (started.clone(), heard.clone());
        async move {
            let store = RedisStore::connect(&url, options).await.unwrap();
            let app = App::builder(store)
                .holder(format!("app-{n}"))
                .lease_ttl(Duration::from_secs(120))
                .renew_interval(Duration::from_secs(60))
                .cancel_grace(Duration::from_secs(120))
                .handler("generate", move |ctx, _: Value| {
                    let (started, heard) = (started.clone(), heard.clone());
                    async move {
                        let _ = started.send(ctx.session().to_owned());
                        ctx.cancelled().await;
                        let _ = heard.send(ctx.session().to_owned());
                        Ok(())
                    }
                })
                .build()
                .unwrap();
            app.append(
                &format!("chat-{n}"),
                vec![NewEvent::new("generate", json!({}))],
            )
            .await
            .unwrap();
            app
        }
    }))
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut told = BTreeSet::new();
    while told.len() < APPS {
        match tokio::time::timeout_at(deadline, hearings.recv()).await {
            Ok(Some(session)) => {
                told.insert(session);
            }
            _ => panic!(
                "RT17: {} of {APPS} handlers heard their cancel within 10 s: {told:?}",
                told.len()
            ),
        }
    }
    cancels.await.unwrap();
    for app in apps {
        app.shutdown(Duration::from_secs(5)).await;
    }
}

/// C5, RT3: when the process holding a lease is SIGKILLed, another
/// worker takes the event over once the lease expires. Two `a2 worker`
/// processes drain one session; the one holding its event is killed
/// mid-handler; the survivor, which has met the session and was told
/// `Busy{retry_at}`, claims the event right after the lease's expiry, not
/// after its next listing of pending sessions (a minute apart here).
/// Prints the delay from the lease's expiry to the second claim, both
/// read from the event's record in the store's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c5_a_killed_workers_lease_is_taken_over_right_after_it_expires() {
    use std::process::{Child, Stdio};
    use std::time::{Duration, Instant};

    use a2::{NewEvent, ReadEventsOptions, StoredEvent};
    use serde_json::json;

    let server = RedisServer::start();
    let url = server.url();
    let prefix = unique_prefix("takeover");
    let store = RedisStore::connect(&url, RedisOptions::default().prefix(prefix.clone()))
        .await
        .unwrap();
    let worker = |holder: &str, think_ms: &str| -> Child {
        Command::new(A2)
            .args(["worker", "--store", &url, "--key-prefix", &prefix])
            .args(["--holder", holder, "--lease-ms", "1500"])
            .args(["--poll-ms", "60000", "--think-ms", think_ms])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("a2 worker starts")
    };
    // Waits (with a deadline) for a worker's line on stderr that contains
    // `text`; the rest of its output is drained in the background.
    async fn said(child: &mut Child, text: &'static str) {
        use std::io::BufRead;
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains(text)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(());
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(20), rx)
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for the worker to say {text:?}"))
            .expect("the worker said it");
    }
    async fn event(store: &RedisStore) -> Option<StoredEvent> {
        let page = store
            .read_events("t", ReadEventsOptions::new(1))
            .await
            .unwrap();
        page.events.into_iter().next()
    }
    async fn until(what: &str, mut check: impl AsyncFnMut() -> Option<StoredEvent>) -> StoredEvent {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(found) = check().await {
                return found;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    // The victim starts alone, so it is the one that claims; its handler
    // thinks for a minute between reply chunks.
    let mut victim = worker("victim", "60000");
    said(&mut victim, "started").await;
    // It lists only once a minute: what wakes it is its subscription to
    // the work channels (PS2), live once the server shows it.
    subscribed(&server, &prefix).await;
    store
        .append(
            "t",
            vec![NewEvent::new("user.message", json!({ "text": "hi" }))],
        )
        .await
        .unwrap();
    let first = until("the victim's claim", async || {
        event(&store)
            .await
            .filter(|e| e.claim_holder.as_deref() == Some("victim"))
    })
    .await;
    // The survivor lists pending sessions as it starts, finds the session
    // and is told the lease's expiry; then the victim dies.
    let mut survivor = worker("survivor", "1");
    said(&mut survivor, "1 session with pending events").await;
    victim.kill().unwrap();
    victim.wait().unwrap();
    // The lease as the victim last renewed it (it renews every 500 ms,
    // and at least a second of it is left).
    let held = event(&store).await.expect("the event");
    assert_eq!(
        held.attempt_count, first.attempt_count,
        "not taken over yet"
    );
    let expired_at = held.claim_expires_at.expect("a lease");
    let second = until("the survivor's claim", async || {
        event(&store)
            .await
            .filter(|e| e.attempt_count >= 2 && e.last_claimed_at.is_some())
    })
    .await;
    survivor.kill().unwrap();
    survivor.wait().unwrap();
    let claimed_at = second.last_claimed_at.unwrap();
    let delay = claimed_at - expired_at;
    println!("lease expiry -> the survivor's claim: {delay} ms");
    assert!(
        delay >= 0,
        "claimed again before the lease expired ({delay} ms)"
    );
    assert!(
        delay < 1_000,
        "the survivor took {delay} ms after the lease expired: it waited for a listing"
    );
}

/// A worker says what happens to it, at info level by default: it starts,
/// the store goes away (one warning, not one per listing), the store comes
/// back, and a summary of the work it did; `--quiet` keeps only warnings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_tells_of_an_outage_once_and_of_its_work() {
    use a2::NewEvent;
    use serde_json::json;
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;

    let mut server = RedisServer::start();
    let prefix = unique_prefix("outage");
    let url = server.url();
    let mut child = Command::new(A2)
        .args(["worker", "--store", &url, "--key-prefix", &prefix])
        .args(["--poll-ms", "100", "--report-secs", "1", "--think-ms", "0"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a2 worker starts");
    let (tx, lines) = mpsc::channel::<String>();
    let stderr = child.stderr.take().expect("piped stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    until(&lines, &mut seen, "started");
    server.kill();
    let outage = until(&lines, &mut seen, "the store is unreachable");
    server.restart();
    let back = until(&lines, &mut seen, "listing pending sessions works again");
    assert!(
        seen[outage..back - 1]
            .iter()
            .all(|line| !line.contains("unreachable")),
        "one warning per outage, not one per listing:\n{}",
        seen.join("\n")
    );
    // And it listens for wake-ups again (PS2): its subscription to the
    // work channels is back on the restarted server.
    subscribed(&server, &prefix).await;
    let store = RedisStore::connect(&url, RedisOptions::default().prefix(&prefix))
        .await
        .unwrap();
    store
        .append(
            "chat",
            vec![NewEvent::new("user.message", json!({"text": "hello"}))],
        )
        .await
        .unwrap();
    until(&lines, &mut seen, "completed");
    terminate(&mut child);
    println!("{}", seen.join("\n"));
}

/// Reads `lines` into `seen` until one contains `what` (20 s at most);
/// how many lines were seen then.
fn until(lines: &std::sync::mpsc::Receiver<String>, seen: &mut Vec<String>, what: &str) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(what);
                seen.push(line);
                if found {
                    return seen.len();
                }
            }
            Err(_) => panic!("no line with {what:?} within 20 s:\n{}", seen.join("\n")),
        }
    }
}

/// Waits (20 s at most) until `server` has a subscriber on every work
/// channel of `prefix`: a worker's wake-ups (PS2) are live.
async fn subscribed(server: &RedisServer, prefix: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let channels = Command::new("redis-cli")
            .args(["-p", &server.port().to_string(), "PUBSUB", "CHANNELS", "*"])
            .output()
            .expect("redis-cli (Debian's redis-tools, beside redis-server) runs");
        // Every partition's work channel: a worker subscribes them one by
        // one, beside others (its cancel channels, CN5).
        let work = String::from_utf8_lossy(&channels.stdout)
            .lines()
            .filter(|c| c.starts_with(&format!("{prefix}:")) && c.ends_with(":work"))
            .count();
        if work == usize::from(RedisOptions::default().partitions) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no subscription to every work channel of {prefix} within 20 s ({work} so far)"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// SIGTERM, then waits for the process.
fn terminate(child: &mut std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}
