//! What the CLI tests share: several `a2 worker` processes draining one
//! store while one of them is killed (RT2, RT3, C5, C6, CO5), on any store
//! URL that other processes can share.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2::{ListSessionsOptions, NewEvent, ReadRange, Store, StoredEvent};
use serde_json::json;

pub const A2: &str = env!("CARGO_BIN_EXE_a2");

/// Runs `a2 ARGS` to success and returns its stdout.
pub fn a2(args: &[&str]) -> String {
    let output = Command::new(A2).args(args).output().expect("a2 runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "a2 {args:?} failed: {stderr}\n{stdout}"
    );
    stdout
}

/// Kills the worker processes still running when the test ends, whatever
/// way it ends.
pub struct Workers(pub Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A worker's stderr, read as it comes (a pipe nobody reads would block
/// the worker once full).
struct Log {
    text: Arc<std::sync::Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Log {
    /// Reads `child`'s stderr into the log until it closes.
    fn of(child: &mut Child) -> Self {
        use std::io::Read;
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let text = Arc::new(std::sync::Mutex::new(Vec::new()));
        let buffer = text.clone();
        let reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n @ 1..) = stderr.read(&mut chunk) {
                buffer.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        Log {
            text,
            reader: Some(reader),
        }
    }

    /// What was read so far.
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.text.lock().unwrap()).into_owned()
    }

    /// Everything, once the process has ended.
    fn all(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.text()
    }

    /// Its last `n` lines.
    fn tail(&self, n: usize) -> String {
        let text = self.text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// What is still pending, per session, with each pending event's lease and
/// retry state and the workers' last log lines: printed when the test times
/// out waiting for everything to settle.
async fn still_pending(store: &dyn Store, logs: &[(&str, Log)]) -> String {
    let mut out = String::new();
    for s in 0..SESSIONS {
        let rows = store
            .read(&format!("s{s:02}"), ReadRange::default())
            .await
            .unwrap();
        for r in rows.iter().filter(|r| r.is_pending()) {
            out.push_str(&format!(
                "s{s:02}#{} lane {:?} attempts {} holder {:?} expires {:?} retry {:?} failures {}\n",
                r.index(),
                r.event.lane,
                r.attempt_count,
                r.claim_holder,
                r.claim_expires_at,
                r.retry_at,
                r.failure_count
            ));
        }
    }
    for (name, log) in logs {
        out.push_str(&format!(
            "--- {name} stderr (last lines):\n{}\n",
            log.tail(20)
        ));
    }
    out
}

fn spawn_worker(url: &str, prefix: &str, holder: &str) -> Child {
    Command::new(A2)
        .args([
            "worker",
            "--store",
            url,
            "--key-prefix",
            prefix,
            "--holder",
            holder,
        ])
        .args([
            "--concurrency",
            "16",
            "--lease-ms",
            "1500",
            "--poll-ms",
            "100",
        ])
        .args(["--think-ms", "3", "--grace-ms", "5000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a2 worker starts")
}

/// Events and pending events over every session of the store.
async fn totals(store: &dyn Store) -> (u64, u64) {
    let page = store
        .list_sessions(ListSessionsOptions::new(1_000))
        .await
        .unwrap();
    page.sessions.iter().fold((0, 0), |(events, pending), s| {
        (events + s.event_count, pending + s.pending_count)
    })
}

/// Whether `holder` holds the lease of an unsettled event of a session.
async fn holds_leases(store: &dyn Store, holder: &str) -> bool {
    for s in 0..SESSIONS {
        let rows = store
            .read(&format!("s{s:02}"), ReadRange::default())
            .await
            .unwrap();
        if rows.iter().any(|r| {
            r.claim_holder.as_deref() == Some(holder)
                && r.processed_at.is_none()
                && r.failed_at.is_none()
        }) {
            return true;
        }
    }
    false
}

async fn wait_for<F, Fut>(what: &str, timeout: Duration, cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    assert!(
        wait_until(timeout, cond).await,
        "timed out waiting for {what}"
    );
}

/// Whether `cond` held within `timeout` (checked every 50 ms).
async fn wait_until<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !cond().await {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

const SESSIONS: usize = 50;
const PER_SESSION: usize = 40;
const LANES: usize = 4;

/// Whether the `n`-th message of session `s` is poisoned: one lane-less
/// message in every tenth session, so no lane is blocked by it.
fn poisoned(s: usize, n: usize) -> bool {
    s % 10 == 3 && n == PER_SESSION / 2
}

/// Three workers drain 2 000 messages over 50 sessions with lanes; one is
/// SIGKILLed mid-run. Afterwards every event is processed exactly once, in
/// lane order, nothing is pending or lost, and only the poisoned messages
/// are dead-lettered. `store` is the store at `url` (with key prefix
/// `prefix` on Redis), opened by the test.
pub async fn three_workers_one_killed(url: &str, prefix: &str, store: Arc<dyn Store>) {
    three_workers_one_killed_within(url, prefix, store, Duration::from_secs(45)).await;
}

/// [`three_workers_one_killed`], with `settle` as the deadline for
/// everything to be settled after the kill (two thirds of it for the first
/// quarter before it).
pub async fn three_workers_one_killed_within(
    url: &str,
    prefix: &str,
    store: Arc<dyn Store>,
    settle: Duration,
) {
    // 2 000 user messages: some ask about the weather (a tool call that
    // fails twice before it succeeds), five are poisoned.
    for s in 0..SESSIONS {
        let batch: Vec<NewEvent> = (0..PER_SESSION)
            .map(|n| {
                let text = if n % 7 == 3 {
                    format!("What's the weather in City{s}?")
                } else {
                    format!("message {n} of session {s}")
                };
                let poison = poisoned(s, n);
                let conversation = format!("c{}", n % LANES);
                let e = NewEvent::new(
                    "user.message",
                    json!({ "text": text, "conversation": conversation, "poison": poison }),
                );
                if poison { e } else { e.lane(conversation) }
            })
            .collect();
        store.append(&format!("s{s:02}"), batch).await.unwrap();
    }
    let poisoned_count = (0..SESSIONS)
        .filter(|s| poisoned(*s, PER_SESSION / 2))
        .count() as u64;

    let started = Instant::now();
    let mut workers = Workers(vec![
        spawn_worker(url, prefix, "w0"),
        spawn_worker(url, prefix, "w1"),
        spawn_worker(url, prefix, "w2"),
    ]);
    let mut logs: Vec<(&str, Log)> = ["w0", "w1", "w2"]
        .into_iter()
        .zip(workers.0.iter_mut().map(Log::of))
        .collect();

    // Kill w0 once a quarter of the messages is done, while it holds leases
    // (seen in the store just before the kill: a worker that started late
    // or was between claims would leave nothing to take over).
    let initial = (SESSIONS * PER_SESSION) as u64;
    wait_for(
        "a quarter processed, w0 holding leases",
        settle * 2 / 3,
        || async {
            let (_, pending) = totals(store.as_ref()).await;
            pending < initial * 3 / 4 && holds_leases(store.as_ref(), "w0").await
        },
    )
    .await;
    workers.0[0].kill().unwrap();
    workers.0[0].wait().unwrap();
    let (_, pending_at_kill) = totals(store.as_ref()).await;
    assert!(pending_at_kill > 0, "w0 was killed mid-run");

    let settled = wait_until(settle, || async {
        let (_, pending) = totals(store.as_ref()).await;
        pending == 0
    })
    .await;
    if !settled {
        let state = still_pending(store.as_ref(), &logs).await;
        panic!("timed out waiting for everything to settle; still pending:\n{state}");
    }

    // The survivors shut down gracefully on SIGTERM.
    for child in &mut workers.0[1..] {
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    for (mut child, (_, log)) in workers.0.drain(1..).zip(&mut logs[1..]) {
        let status = child.wait().unwrap();
        let stderr = log.all();
        assert!(status.success(), "worker failed: {stderr}");
        assert!(stderr.contains("stopped: claimed"), "{stderr}");
    }

    let mut user_messages = 0;
    let mut dead = 0;
    let mut taken_over = 0;
    for s in 0..SESSIONS {
        let rows = store
            .read(&format!("s{s:02}"), ReadRange::default())
            .await
            .unwrap();
        check_session(&rows);
        for r in &rows {
            if r.event.event_type == "user.message" {
                user_messages += 1;
            }
            if r.failed_at.is_some() {
                dead += 1;
                assert_eq!(
                    r.event.payload["poison"], true,
                    "only poisoned events are dead-lettered"
                );
                assert_eq!(r.failure_count, 3);
            }
            if r.processed_by_attempt.is_some_and(|a| a > 1) && r.failure_count == 0 {
                taken_over += 1;
            }
        }
    }
    assert_eq!(
        user_messages,
        SESSIONS * PER_SESSION,
        "no message lost or duplicated"
    );
    assert_eq!(dead, poisoned_count);
    assert!(
        taken_over > 0,
        "some attempts of the killed worker were taken over"
    );
    let logged: Vec<usize> = logs.iter().map(|(_, log)| log.text().len()).collect();
    eprintln!(
        "{user_messages} messages, {dead} dead-lettered, {taken_over} taken over, {:.1} s; \
         worker stderr bytes {logged:?}",
        started.elapsed().as_secs_f64()
    );
}

/// Exactly-once and lane order within one session.
fn check_session(rows: &[StoredEvent]) {
    let by_id: HashMap<&str, &StoredEvent> =
        rows.iter().map(|r| (r.event.id.as_str(), r)).collect();
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.index(), i as u64 + 1, "dense indexes");
        assert!(!r.is_pending(), "event {} still pending: {r:?}", r.index());
        // Returned events are appended once, by the processing attempt.
        if let Some(attempt) = r.processed_by_attempt {
            for id in &r.returned_event_ids {
                let returned = by_id.get(id.as_str()).expect("returned event exists");
                let cause = returned.event.cause.expect("returned event has a cause");
                assert_eq!((cause.index, cause.attempt), (r.index(), attempt));
            }
        }
        // Every caused event that is not a progress delta was returned by
        // the attempt that processed its cause: no second copy anywhere.
        if let Some(cause) = r
            .event
            .cause
            .filter(|_| r.event.event_type != "assistant.delta")
        {
            let origin = &rows[cause.index as usize - 1];
            assert_eq!(origin.processed_by_attempt, Some(cause.attempt));
            assert!(origin.returned_event_ids.contains(&r.event.id));
        }
    }
    // Lane order: the events of a lane completed in index order, so the
    // events each one returned were appended in index order too.
    let mut lanes: BTreeMap<&str, Vec<&StoredEvent>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.processed_by_attempt.is_some()) {
        if let Some(lane) = r.event.lane.as_deref() {
            lanes.entry(lane).or_default().push(r);
        }
    }
    for (lane, events) in lanes {
        let completion: Vec<u64> = events
            .iter()
            .map(|r| by_id[r.returned_event_ids[0].as_str()].index())
            .collect();
        assert!(
            completion.windows(2).all(|w| w[0] < w[1]),
            "lane {lane} completed out of order: {completion:?}"
        );
    }
}

/// PS2, RT2: with the listing an hour apart, each of 20 appends through
/// `writer` starts the handler of a worker on `worker_store` (another
/// store instance, as another process has) within 5 s: the wake-up came by
/// push. Prints the delays from append to handler start.
pub async fn woken_by_another_instance(writer: Arc<dyn Store>, worker_store: Arc<dyn Store>) {
    use a2::runtime::App;
    use serde_json::Value;

    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
    let app = App::builder(worker_store)
        .poll_interval(Duration::from_secs(3600))
        .handler("job", move |_ctx, _: Value| {
            let started = started.clone();
            async move {
                let _ = started.send(Instant::now());
                Ok(())
            }
        })
        .build()
        .unwrap();
    let worker = tokio::spawn({
        let app = app.clone();
        async move { app.run_worker().await }
    });
    // The worker's wake-ups are live before its first listing: work
    // appended from the moment it was spawned is found by that listing or
    // announced — with the listing an hour apart, never missed.
    let mut delays = Vec::new();
    for k in 0..20 {
        let appended = Instant::now();
        writer
            .append(&format!("job-{k}"), vec![NewEvent::new("job", json!(k))])
            .await
            .unwrap();
        let start = tokio::time::timeout(Duration::from_secs(5), starts.recv())
            .await
            .unwrap_or_else(|_| panic!("job {k}: no handler within 5 s of the append"))
            .expect("the worker runs");
        delays.push(start.saturating_duration_since(appended));
    }
    delays.sort();
    println!(
        "append in one store instance -> handler start in a worker on another: \
         median {:?}, max {:?} over {} appends",
        delays[delays.len() / 2],
        delays[delays.len() - 1],
        delays.len()
    );
    app.shutdown(Duration::from_secs(5)).await;
    worker.abort();
}
