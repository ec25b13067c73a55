//! a2's adapter for the third-party Postgres job-queue harness
//! (`hardbyte/postgresql-job-queue-benchmarking`): a long-running process
//! that the harness starts with its settings in the environment, feeds
//! `ENQUEUE <n>` lines on stdin (fixed rate) or leaves to hold a queue
//! depth (depth target), and reads samples from as JSON lines on stdout.
//! `crates/a2-bench/harness/README.md` says how to run it beside awa.
//!
//! A job is an event of type `job` appended to one of [`SESSIONS`]
//! sessions (round robin, one append per batch); an a2 runtime `App` with
//! `WORKER_COUNT` handlers at once runs them. Like the harness's awa
//! adapter, a job's claim latency is from its `produced_at_ms` to its
//! handler's start, and a job counts as completed when its handler returns
//! (the runtime then records the completion in the store).
//!
//! The process never exits on its own while the harness runs it: a lost
//! database is retried (appends, the depth query, the worker), and it
//! stops on SIGTERM or SIGINT.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use a2::{App, NewEvent, Store};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

/// The sessions jobs are spread over: enough that appends and completions
/// of different jobs rarely wait for the same session's row lock.
const SESSIONS: u64 = 64;

/// How far back the claim-latency percentiles look (as awa's adapter).
const LATENCY_WINDOW: Duration = Duration::from_secs(30);

/// The a2 schema the adapter uses, and its tables as the harness measures
/// them (hottest first: the harness' active readers scan the first).
const SCHEMA: &str = "a2";
const TABLES: [&str; 4] = ["a2.records", "a2.ready", "a2.sessions", "a2.events"];
const INDEXES: [&str; 4] = [
    "a2.ready_due",
    "a2.records_pkey",
    "a2.events_pkey",
    "a2.events_by_id",
];

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The harness' settings (`bench_harness/adapters.py`, `_base_env`).
#[derive(Debug, Clone)]
struct Settings {
    url: String,
    depth_target: bool,
    target_depth: u64,
    workers: usize,
    payload_bytes: usize,
    work: Duration,
    sample_every: Duration,
    instance: u64,
    batch_max: u64,
}

impl Settings {
    fn from_env() -> Result<Self, BoxError> {
        fn var(name: &str, default: &str) -> String {
            std::env::var(name).unwrap_or_else(|_| default.to_owned())
        }
        fn number<T: std::str::FromStr>(name: &str, default: &str) -> Result<T, BoxError> {
            let text = var(name, default);
            text.trim()
                .parse()
                .map_err(|_| format!("{name}={text:?} is not a number").into())
        }
        let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set")?;
        let mode = var("PRODUCER_MODE", "fixed");
        if mode != "fixed" && mode != "depth-target" {
            return Err(format!(
                "PRODUCER_MODE={mode:?}: a2's adapter knows fixed and depth-target"
            )
            .into());
        }
        let workers: usize = number("WORKER_COUNT", "32")?;
        let sample_s: f64 = number("SAMPLE_EVERY_S", "5")?;
        if workers == 0 || sample_s <= 0.0 {
            return Err("WORKER_COUNT and SAMPLE_EVERY_S must be above 0".into());
        }
        Ok(Self {
            url,
            depth_target: mode == "depth-target",
            target_depth: number("TARGET_DEPTH", "1000")?,
            workers,
            payload_bytes: number("JOB_PAYLOAD_BYTES", "256")?,
            work: Duration::from_millis(number("JOB_WORK_MS", "1")?),
            sample_every: Duration::from_secs_f64(sample_s),
            instance: number("BENCH_INSTANCE_ID", "0")?,
            batch_max: number::<u64>("PRODUCER_BATCH_MAX", "128")?.max(1),
        })
    }
}

/// What the producer, the handlers and the sampler share.
#[derive(Default)]
struct Counters {
    enqueued: AtomicU64,
    completed: AtomicU64,
    /// (when observed, ms from `produced_at_ms` to the handler's start)
    latencies: Mutex<VecDeque<(Instant, f64)>>,
    /// The last queue depth read from the database.
    depth: AtomicU64,
    /// How many times it was read.
    depth_reads: AtomicU64,
    seq: AtomicU64,
    /// Counts appends: each goes to the next session, round robin.
    appends: AtomicU64,
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

fn timestamp() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[tokio::main]
async fn main() {
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("a2 harness adapter: {e}");
            std::process::exit(2);
        }
    };
    let store = connect(&settings).await;
    println!(
        "{}",
        json!({
            "kind": "descriptor",
            "system": "a2",
            "instance_id": settings.instance,
            "event_tables": TABLES,
            "event_indexes": INDEXES,
            "extensions": [],
            "version": env!("CARGO_PKG_VERSION"),
            "schema_version": a2::postgres::LAYOUT_VERSION.to_string(),
            "db_name": settings.url.rsplit('/').next().unwrap_or_default().split('?').next().unwrap_or_default(),
            "started_at": timestamp(),
        })
    );
    let counters = Arc::new(Counters::default());
    let app = build_app(&store, &settings, &counters);
    let worker = tokio::spawn(run_worker(app.clone()));
    let depth = tokio::spawn(poll_depth(settings.clone(), counters.clone()));
    let producer = if settings.depth_target {
        tokio::spawn(hold_depth(
            store.clone(),
            settings.clone(),
            counters.clone(),
        ))
    } else {
        tokio::spawn(enqueue_from_stdin(
            store.clone(),
            settings.clone(),
            counters.clone(),
        ))
    };
    let sampler = tokio::spawn(sample(settings.clone(), counters.clone()));
    stopped().await;
    eprintln!("a2 harness adapter: stopping");
    producer.abort();
    depth.abort();
    let report = app.shutdown(Duration::from_secs(3)).await;
    eprintln!("a2 harness adapter: {report:?}");
    worker.abort();
    sampler.abort();
}

/// The Postgres store, connected once the database answers (retried: the
/// harness may start the adapter while Postgres restarts).
async fn connect(settings: &Settings) -> Arc<dyn Store> {
    let url = if settings.url.contains('?') {
        format!("{}&a2_schema={SCHEMA}", settings.url)
    } else {
        format!("{}?a2_schema={SCHEMA}", settings.url)
    };
    loop {
        let options = a2::postgres::PostgresOptions::default();
        match a2::postgres::PostgresStore::connect(&url, options, a2::StoreOptions::default()).await
        {
            Ok(store) => return Arc::new(store),
            Err(e) => {
                eprintln!("a2 harness adapter: cannot connect yet ({e}); retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

fn build_app(store: &Arc<dyn Store>, settings: &Settings, counters: &Arc<Counters>) -> App {
    let work = settings.work;
    let counters = counters.clone();
    App::builder(store.clone())
        .concurrency(settings.workers)
        .handler("job", move |_ctx, payload: Value| {
            let counters = counters.clone();
            async move {
                let produced = payload["produced_at_ms"].as_f64().unwrap_or(0.0);
                let latency = (now_ms() - produced).max(0.0);
                counters
                    .latencies
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_back((Instant::now(), latency));
                if !work.is_zero() {
                    tokio::time::sleep(work).await;
                }
                counters.completed.fetch_add(1, Ordering::Relaxed);
                Ok(Vec::<NewEvent>::new())
            }
        })
        .build()
        .expect("the adapter's App options are valid")
}

/// The runtime's worker loop, started again after an error (a lost
/// database ends it with `StoreUnavailable`).
async fn run_worker(app: App) {
    loop {
        match app.run_worker().await {
            Ok(()) => return,
            Err(e) => {
                eprintln!("a2 harness adapter: worker stopped ({e}); restarting in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// `n` new jobs.
fn jobs(n: u64, settings: &Settings, counters: &Counters) -> Vec<NewEvent> {
    let padding = "x".repeat(settings.payload_bytes.saturating_sub(32));
    (0..n)
        .map(|_| {
            let seq = counters.seq.fetch_add(1, Ordering::Relaxed);
            NewEvent::new(
                "job",
                json!({ "seq": seq, "produced_at_ms": now_ms(), "padding": padding }),
            )
        })
        .collect()
}

/// Appends `n` jobs as one batch to the next session, retrying while the
/// database is away; counted once appended.
async fn enqueue(store: &Arc<dyn Store>, n: u64, settings: &Settings, counters: &Counters) {
    let session = format!(
        "jobs-{}",
        counters.appends.fetch_add(1, Ordering::Relaxed) % SESSIONS
    );
    let events = jobs(n, settings, counters);
    loop {
        match store.append(&session, events.clone()).await {
            Ok(_) => {
                counters.enqueued.fetch_add(n, Ordering::Relaxed);
                return;
            }
            Err(e) if e.is_retryable() => {
                eprintln!("a2 harness adapter: append failed ({e}); retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => {
                eprintln!("a2 harness adapter: append refused ({e}); {n} jobs dropped");
                return;
            }
        }
    }
}

/// Fixed rate: `ENQUEUE <n>` lines on stdin, each `n` jobs, appended by
/// a few tasks at once so that one slow append does not hold the pace.
async fn enqueue_from_stdin(store: Arc<dyn Store>, settings: Settings, counters: Arc<Counters>) {
    let (tx, rx) = tokio::sync::mpsc::channel::<u64>(1024);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    for _ in 0..4 {
        let (store, settings, counters, rx) = (
            store.clone(),
            settings.clone(),
            counters.clone(),
            rx.clone(),
        );
        tokio::spawn(async move {
            loop {
                let Some(n) = rx.lock().await.recv().await else {
                    return;
                };
                let mut left = n;
                while left > 0 {
                    let now = left.min(settings.batch_max);
                    enqueue(&store, now, &settings, &counters).await;
                    left -= now;
                }
            }
        });
    }
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(n) = line
            .strip_prefix("ENQUEUE ")
            .and_then(|n| n.trim().parse::<u64>().ok())
            && n > 0
            && tx.send(n).await.is_err()
        {
            return;
        }
    }
}

/// Depth target: keeps about `TARGET_DEPTH` jobs waiting, by the depth
/// last read plus what was appended and completed since.
async fn hold_depth(store: Arc<dyn Store>, settings: Settings, counters: Arc<Counters>) {
    // (the read the estimate starts from, enqueued and completed then)
    let mut last = (u64::MAX, 0, 0);
    loop {
        let read = counters.depth_reads.load(Ordering::Relaxed);
        let depth = counters.depth.load(Ordering::Relaxed);
        let (enq, done) = (
            counters.enqueued.load(Ordering::Relaxed),
            counters.completed.load(Ordering::Relaxed),
        );
        if read != last.0 {
            last = (read, enq, done);
        }
        let estimate = (depth + (enq - last.1)).saturating_sub(done - last.2);
        if estimate < settings.target_depth {
            let n = (settings.target_depth - estimate).clamp(1, settings.batch_max);
            enqueue(&store, n, &settings, &counters).await;
        } else {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Reads the queue depth (jobs claimable now and not claimed) every
/// 200 ms on a connection of its own, reconnecting when it is lost.
async fn poll_depth(settings: Settings, counters: Arc<Counters>) {
    let statement = format!(
        "SELECT count(*) FROM {SCHEMA}.ready WHERE due_at <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    );
    loop {
        let client = match tokio_postgres::connect(&settings.url, tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                client
            }
            Err(e) => {
                eprintln!("a2 harness adapter: depth connection failed ({e})");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            match client.query_one(&statement, &[]).await {
                Ok(row) => {
                    let depth = row.get::<_, i64>(0).max(0) as u64;
                    counters.depth.store(depth, Ordering::Relaxed);
                    counters.depth_reads.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) if client.is_closed() => break,
                // The schema may not exist until the store made it.
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The samples the harness reads, every `SAMPLE_EVERY_S` on the wall
/// clock's multiples of it.
async fn sample(settings: Settings, counters: Arc<Counters>) {
    let every = settings.sample_every;
    let offset =
        Duration::from_secs_f64(every.as_secs_f64() - (now_ms() / 1e3) % every.as_secs_f64());
    tokio::time::sleep(offset).await;
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = (Instant::now(), 0, 0);
    loop {
        ticker.tick().await;
        let now = Instant::now();
        let enq = counters.enqueued.load(Ordering::Relaxed);
        let done = counters.completed.load(Ordering::Relaxed);
        let dt = now.duration_since(last.0).as_secs_f64().max(1e-3);
        let window = every.as_secs_f64();
        let t = timestamp();
        let emit = |metric: &str, value: f64, window_s: f64| {
            println!(
                "{}",
                json!({
                    "t": t, "system": "a2", "instance_id": settings.instance,
                    "kind": "adapter", "subject_kind": "adapter", "subject": "",
                    "metric": metric, "value": value, "window_s": window_s,
                })
            );
        };
        // Over the time the tick really took, so that rate × window is
        // the count (the harness sums them for jobs lost).
        emit("enqueue_rate", (enq - last.1) as f64 / dt, dt);
        emit("completion_rate", (done - last.2) as f64 / dt, dt);
        emit(
            "queue_depth",
            counters.depth.load(Ordering::Relaxed) as f64,
            0.0,
        );
        let mut latencies: Vec<f64> = {
            let mut held = counters.latencies.lock().unwrap_or_else(|p| p.into_inner());
            while held
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at) > LATENCY_WINDOW)
            {
                held.pop_front();
            }
            held.iter().map(|(_, ms)| *ms).collect()
        };
        if !latencies.is_empty() {
            latencies.sort_by(f64::total_cmp);
            for (metric, p) in [
                ("claim_p50_ms", 50.0),
                ("claim_p95_ms", 95.0),
                ("claim_p99_ms", 99.0),
            ] {
                let at = ((p / 100.0) * (latencies.len() - 1) as f64).round() as usize;
                emit(metric, latencies[at], window);
            }
        }
        last = (now, enq, done);
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn stopped() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler can be installed");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
