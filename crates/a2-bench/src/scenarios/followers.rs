//! Followers: browsers following an agent's output live, the main use of
//! `a2 serve`. 1 000 SSE followers over 100 sessions (and 10 000 over
//! 1 000), a writer appending 200 events/s in total through
//! `POST /v1/sessions/{s}/events`; per store: delivery latency, the server
//! process's CPU per delivered event, the store reads per append
//! (`a2_feed_reads_total`, ST7) and the server's memory per follower. The
//! server is a process of its own (`a2-bench --serve-child`, the router
//! `a2 serve` runs), so its CPU and memory are its own. The same load on
//! library feeds in this process gives the in-process rows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2::{NewEvent, Store};
use futures::StreamExt;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use crate::BoxError;
use crate::ctx::Ctx;
use crate::raw_sqlite;
use crate::report::Report;
use crate::stats::Latencies;
use crate::wiring::Backend;

const S: &str = "followers";

/// Appends per second, over all sessions.
const RATE: u64 = 200;

/// The stores behind `a2 serve`, and the stores of the in-process rows.
const OVER_HTTP: [Backend; 2] = [Backend::Memory, Backend::Sqlite];
const IN_PROCESS: [Backend; 4] = [
    Backend::Memory,
    Backend::Sqlite,
    Backend::Redis,
    Backend::Rest,
];

/// One load: followers spread evenly over sessions.
#[derive(Clone, Copy)]
struct Load {
    followers: usize,
    sessions: usize,
}

impl Load {
    fn case(self) -> String {
        format!(
            "{} followers over {} sessions, {RATE} appends/s",
            self.followers, self.sessions
        )
    }
}

/// What one measurement found.
struct Figures {
    latency: Latencies,
    cpu_ms_per_delivery: f64,
    reads_per_append: f64,
    /// Deliveries out of order, repeated or missing (must be 0).
    wrong: u64,
    kib_per_follower: Option<f64>,
}

/// The anchor of the SQLite rows: what the disk alone costs an append.
const DISK: &str = "raw rusqlite commit at the same pace";

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    let (small, large) = if ctx.quick {
        (
            Load {
                followers: 100,
                sessions: 10,
            },
            Load {
                followers: 1_000,
                sessions: 100,
            },
        )
    } else {
        (
            Load {
                followers: 1_000,
                sessions: 100,
            },
            Load {
                followers: 10_000,
                sessions: 1_000,
            },
        )
    };
    let rounds = ctx.sizes.heavy_rounds;
    for round in 0..rounds {
        eprintln!("[followers] round {}/{rounds}", round + 1);
        // The smaller load first in every round: its rows come first.
        let mut runs: Vec<(Backend, Load)> = OVER_HTTP.iter().map(|b| (*b, small)).collect();
        runs.push((Backend::Sqlite, large));
        for (backend, load) in runs {
            let subject = format!("{} over HTTP", backend.subject());
            if !ctx.wants(&backend.subject()) {
                continue;
            }
            let name = format!("followers{round}{}{}", backend.name(), load.followers);
            let measured = over_http(ctx, backend, &name, load).await;
            record(report, &load.case(), &subject, measured, "server");
        }
        if ctx.wants(DISK) {
            let path = ctx.sqlite_path(&format!("followersdisk{round}"));
            let n = appends(ctx);
            let commits =
                tokio::task::spawn_blocking(move || raw_sqlite::paced_commits(&path, n, RATE))
                    .await
                    .map_err(|e| -> BoxError { e.to_string().into() })
                    .and_then(|r| r);
            match commits.map(|times| Latencies::of(&times)) {
                Ok(Some(l)) => {
                    report.round(S, &small.case(), DISK, "commit p50 ms", l.p50);
                    report.round(S, &small.case(), DISK, "commit p99 ms", l.p99);
                    eprintln!("  {DISK:<34} p50 {:.2} ms, p99 {:.2} ms", l.p50, l.p99);
                }
                Ok(None) => {}
                Err(e) => report.missing(S, &small.case(), DISK, "commit p99 ms", &e.to_string()),
            }
        }
        for backend in IN_PROCESS {
            if !ctx.wants(&backend.subject()) {
                continue;
            }
            let subject = format!("{} in-process feeds", backend.subject());
            let name = format!("followersin{round}{}", backend.name().replace(' ', ""));
            let measured = in_process(ctx, backend, &name, small).await;
            record(report, &small.case(), &subject, measured, "process");
        }
    }
    report.note(
        "followers: `a2 serve`'s router in a process of its own (a2-bench --serve-child, the \
         store's defaults as `a2 serve` has them) on loopback; followers are reqwest SSE streams \
         of /v1/sessions/{s}/live in the benchmark's process; one writer POSTs single events \
         round robin over the sessions at 200/s for 10 s. CPU = the server process's user+system \
         time over the appends and deliveries, per delivered event; reads per append = growth of \
         a2_feed_reads_total per append; KiB per follower = growth of the server's VmRSS from \
         before the followers connected to when all were idle. In-process rows: library feeds \
         (Store::stream) and appends in the benchmark's process, CPU of that process (a Redis \
         row leaves out redis-server's). The raw rusqlite row times bare single-row commits \
         (WAL, synchronous = FULL, one fsync each) at the same pace in the same directory: \
         the disk's part of a SQLite append's latency",
    );
}

fn record(
    report: &mut Report,
    case: &str,
    subject: &str,
    measured: Result<Figures, BoxError>,
    whose: &str,
) {
    match measured {
        Ok(m) => {
            report.round(S, case, subject, "delivery p50 ms", m.latency.p50);
            report.round(S, case, subject, "delivery p99 ms", m.latency.p99);
            report.round(
                S,
                case,
                subject,
                &format!("{whose} CPU ms per delivered event"),
                m.cpu_ms_per_delivery,
            );
            report.round(S, case, subject, "reads per append", m.reads_per_append);
            report.round(S, case, subject, "deliveries wrong", m.wrong as f64);
            if let Some(kib) = m.kib_per_follower {
                report.round(S, case, subject, "server KiB per follower", kib);
            }
            eprintln!(
                "  {subject:<34} {case}: p50 {:.2} ms, p99 {:.2} ms, {whose} CPU {:.4} ms/delivery, {:.2} reads/append, {} wrong",
                m.latency.p50, m.latency.p99, m.cpu_ms_per_delivery, m.reads_per_append, m.wrong
            );
        }
        Err(e) => {
            eprintln!("  {subject:<34} {case}: {e}");
            report.missing(S, case, subject, "delivery p99 ms", &e.to_string());
        }
    }
}

/// One delivery: latency, and whether it broke its follower's sequence.
struct Delivery {
    latency: Duration,
    in_order: bool,
}

/// Checks a follower's sequence: every index once, from 1, in order.
#[derive(Default)]
struct Sequence {
    last: u64,
}

impl Sequence {
    fn next(&mut self, index: u64) -> bool {
        let in_order = index == self.last + 1;
        self.last = self.last.max(index);
        in_order
    }
}

fn delivery(epoch: Instant, payload: &serde_json::Value, in_order: bool) -> Option<Delivery> {
    let sent = payload["t"].as_u64()?;
    Some(Delivery {
        latency: epoch.elapsed().saturating_sub(Duration::from_nanos(sent)),
        in_order,
    })
}

/// Collects `want` deliveries (30 s at most after the last append).
async fn collect(
    rx: &mut mpsc::UnboundedReceiver<Delivery>,
    want: usize,
) -> Result<(Latencies, u64), BoxError> {
    let mut samples = Vec::with_capacity(want);
    let mut wrong = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while samples.len() < want {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(d)) => {
                wrong += u64::from(!d.in_order);
                samples.push(d.latency);
            }
            _ => return Err(format!("{} of {want} deliveries arrived", samples.len()).into()),
        }
    }
    let latency = Latencies::of(&samples).ok_or("no samples")?;
    Ok((latency, wrong))
}

/// Appends `n` events round robin over `sessions`, `RATE` a second, each
/// carrying its send time; `append` does one.
async fn write<F, Fut>(n: u64, sessions: usize, epoch: Instant, append: F) -> Result<(), BoxError>
where
    F: Fn(String, NewEvent) -> Fut,
    Fut: std::future::Future<Output = Result<(), BoxError>>,
{
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / RATE));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in 0..n {
        tick.tick().await;
        let t = epoch.elapsed().as_nanos() as u64;
        let event = NewEvent::new("bench.token", json!({ "t": t })).settled();
        append(session_of(i as usize % sessions), event).await?;
    }
    Ok(())
}

fn session_of(i: usize) -> String {
    format!("s{i}")
}

fn appends(ctx: &Ctx) -> u64 {
    RATE * if ctx.quick { 2 } else { 10 }
}

/// Waits (at most 60 s) until `done` answers true.
async fn until<F, Fut>(what: &str, done: F) -> Result<(), BoxError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<bool, BoxError>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done().await? {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("{what}: not within 60 s").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn over_http(
    ctx: &Ctx,
    backend: Backend,
    name: &str,
    load: Load,
) -> Result<Figures, BoxError> {
    let server = ServeChild::start(backend, &ctx.sqlite_path(name)).await?;
    let epoch = Instant::now();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let rss_before = server.rss_kib();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut followers = Vec::with_capacity(load.followers);
    for f in 0..load.followers {
        let url = server.url(&format!(
            "/v1/sessions/{}/live",
            session_of(f % load.sessions)
        ));
        followers.push(tokio::spawn(sse_follower(
            client.clone(),
            url,
            epoch,
            tx.clone(),
        )));
    }
    let readers = load.sessions as f64;
    until("the followers connect", || async {
        let m = server.metrics(&client).await?;
        Ok(sample(&m, "a2_feed_followers")? == load.followers as f64
            && sample(&m, "a2_feed_readers")? == readers)
    })
    .await?;
    let rss_after = server.rss_kib();
    let before = server.metrics(&client).await?;
    let cpu_before = server.cpu_ms();
    let n = appends(ctx);
    let writer = reqwest::Client::new();
    write(n, load.sessions, epoch, |session, event| {
        let writer = writer.clone();
        let url = server.url(&format!("/v1/sessions/{session}/events"));
        async move {
            let body = json!({ "events": [{ "type": event.event_type, "payload": event.payload, "settled": true }] });
            let response = writer
                .post(url)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await?;
            if !response.status().is_success() {
                return Err(format!("append answered {}", response.status()).into());
            }
            Ok(())
        }
    })
    .await?;
    let per_session = load.followers / load.sessions;
    let (latency, wrong) = collect(&mut rx, n as usize * per_session).await?;
    let cpu_after = server.cpu_ms();
    let after = server.metrics(&client).await?;
    for follower in &followers {
        follower.abort();
    }
    let deliveries = (n as usize * per_session) as f64;
    let reads = sample(&after, "a2_feed_reads_total")? - sample(&before, "a2_feed_reads_total")?;
    Ok(Figures {
        latency,
        cpu_ms_per_delivery: (cpu_after? - cpu_before?) / deliveries,
        reads_per_append: reads / n as f64,
        wrong,
        kib_per_follower: match (rss_before, rss_after) {
            (Some(b), Some(a)) => Some((a - b).max(0.0) / load.followers as f64),
            _ => None,
        },
    })
}

/// One SSE follower: parses `event` messages and reports each delivery.
async fn sse_follower(
    client: reqwest::Client,
    url: String,
    epoch: Instant,
    tx: mpsc::UnboundedSender<Delivery>,
) -> Result<(), BoxError> {
    let response = client.get(url).send().await?;
    if !response.status().is_success() {
        return Err(format!("a follower got {}", response.status()).into());
    }
    let mut body = response.bytes_stream();
    let mut buffer = Vec::new();
    let mut sequence = Sequence::default();
    while let Some(chunk) = body.next().await {
        buffer.extend_from_slice(&chunk?);
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buffer.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&block);
            let Some(data) = text.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            let event: serde_json::Value = serde_json::from_str(data)?;
            let in_order = sequence.next(event["index"].as_u64().unwrap_or(0));
            if let Some(d) = delivery(epoch, &event["payload"], in_order) {
                let _ = tx.send(d);
            }
        }
    }
    Ok(())
}

async fn in_process(
    ctx: &Ctx,
    backend: Backend,
    name: &str,
    load: Load,
) -> Result<Figures, BoxError> {
    let store = ctx.open(backend, name).await?;
    let epoch = Instant::now();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut followers = Vec::with_capacity(load.followers);
    for f in 0..load.followers {
        let mut feed = store.stream(&session_of(f % load.sessions), 0);
        let tx = tx.clone();
        followers.push(tokio::spawn(async move {
            let mut sequence = Sequence::default();
            while let Some(Ok(event)) = feed.next().await {
                let in_order = sequence.next(event.index);
                if let Some(d) = delivery(epoch, &event.payload, in_order) {
                    let _ = tx.send(d);
                }
            }
        }));
    }
    until("the feeds start", || async {
        Ok(store.feed_stats().readers == load.sessions as u64)
    })
    .await?;
    let before = store.feed_stats();
    let cpu_before = cpu_ms("self");
    let n = appends(ctx);
    let writer: Arc<dyn Store> = store.clone();
    write(n, load.sessions, epoch, |session, event| {
        let writer = writer.clone();
        async move {
            writer.append(&session, vec![event]).await?;
            Ok(())
        }
    })
    .await?;
    let per_session = load.followers / load.sessions;
    let (latency, wrong) = collect(&mut rx, n as usize * per_session).await?;
    let cpu_after = cpu_ms("self");
    let after = store.feed_stats();
    for follower in &followers {
        follower.abort();
    }
    store.close().await;
    Ok(Figures {
        latency,
        cpu_ms_per_delivery: (cpu_after? - cpu_before?) / (n as usize * per_session) as f64,
        reads_per_append: (after.reads - before.reads) as f64 / n as f64,
        wrong,
        kib_per_follower: None,
    })
}

/// The value of the unlabelled sample `name` in a Prometheus text.
fn sample(metrics: &str, name: &str) -> Result<f64, BoxError> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .ok_or_else(|| format!("no sample {name} at /metrics").into())
}

/// User plus system CPU time of process `pid` (a number, or `self`), in ms.
fn cpu_ms(pid: &str) -> Result<f64, BoxError> {
    crate::info::process_cpu_seconds_of(pid)
        .map(|seconds| seconds * 1000.0)
        .ok_or_else(|| format!("cannot read /proc/{pid}/stat").into())
}

/// `a2 serve`'s router in a child process (`a2-bench --serve-child`).
struct ServeChild {
    child: tokio::process::Child,
    base: String,
}

impl ServeChild {
    async fn start(backend: Backend, db: &std::path::Path) -> Result<Self, BoxError> {
        let exe = std::env::current_exe()?;
        let mut child = tokio::process::Command::new(exe)
            .args(["--serve-child", backend.name()])
            .arg("--serve-db")
            .arg(db)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .map_err(|_| "the server did not start within 30 s")??
            .ok_or("the server exited before listening")?;
        let addr = line
            .strip_prefix("listening ")
            .ok_or_else(|| format!("the server said {line:?}"))?;
        Ok(Self {
            base: format!("http://{addr}"),
            child,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn pid(&self) -> Result<u32, BoxError> {
        self.child.id().ok_or_else(|| "the server exited".into())
    }

    fn cpu_ms(&self) -> Result<f64, BoxError> {
        cpu_ms(&self.pid()?.to_string())
    }

    fn rss_kib(&self) -> Option<f64> {
        let bytes = crate::info::rss_bytes_of(&self.pid().ok()?.to_string())?;
        Some(bytes as f64 / 1024.0)
    }

    async fn metrics(&self, client: &reqwest::Client) -> Result<String, BoxError> {
        Ok(client
            .get(self.url("/metrics"))
            .send()
            .await?
            .text()
            .await?)
    }
}

/// The child's side: serves `backend` (memory, or SQLite at `db`) on a
/// loopback port, says `listening ADDR` on stdout, and stops when its
/// stdin closes (the parent dropped it).
pub async fn serve_child(backend: Backend, db: &std::path::Path) -> Result<(), BoxError> {
    use tokio::io::AsyncReadExt;
    let store: Arc<dyn Store> = match backend {
        Backend::Memory => Arc::new(a2::MemoryStore::new(a2::StoreOptions::default())),
        Backend::Sqlite => Arc::new(a2::sqlite::SqliteStore::open(
            db,
            a2::sqlite::SqliteOptions::default(),
        )?),
        other => {
            return Err(format!(
                "--serve-child serves memory or sqlite, not {}",
                other.name()
            )
            .into());
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening {}", listener.local_addr()?);
    let stop = async {
        let mut byte = [0u8; 1];
        let _ = tokio::io::stdin().read(&mut byte).await;
    };
    a2_server::serve(listener, store, a2_server::Config::default(), stop).await?;
    Ok(())
}
