//! `a2 serve` fan-out: many SSE followers of `/v1/sessions/{s}/live` over
//! loopback HTTP, append to delivery, against in-process feeds of the same
//! store taking the same appends; and the memory an idle follower costs.
//!
//! The server (the `a2-server` router) runs in this process on a loopback
//! port, so the memory figure is this process's resident memory per idle
//! follower: the server's connection, task and feed, plus the client's end
//! of the connection (an upper bound of the server's share).

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2::{NewEvent, Store};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;

use crate::BoxError;
use crate::ctx::Ctx;
use crate::report::Report;
use crate::stats::Latencies;
use crate::wiring::Backend;

const S: &str = "serve fan-out";

/// The stores measured: one in memory, one durable.
const SUBJECTS: [Backend; 2] = [Backend::Memory, Backend::Sqlite];

/// Appends per round; one session at a time, round robin.
const fn events(quick: bool) -> u64 {
    if quick { 20 } else { 200 }
}

/// Pause between appends.
const INTERVAL: Duration = Duration::from_millis(5);

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    // The Durable Streams rows first: the protocol's face against the
    // servers built only for it.
    super::streams::run(ctx, report).await;
    let followers = if ctx.quick { 100 } else { 1_000 };
    let sessions = if ctx.quick { 10 } else { 100 };
    let case = format!("{followers} followers of {sessions} sessions");
    for round in 0..ctx.sizes.heavy_rounds {
        for backend in round_subjects(ctx, "serve fan-out", round) {
            let name = format!("serve{round}");
            let http = format!("{} over HTTP SSE", backend.subject());
            let feed = format!("{} in-process feed", backend.subject());
            match measure(ctx, backend, &name, followers, sessions).await {
                Ok(m) => {
                    rows(report, &case, &http, &m.http);
                    rows(report, &case, &feed, &m.feed);
                    report.round(
                        S,
                        &case,
                        &http,
                        "p99 / in-process p99",
                        m.http.p99 / m.feed.p99,
                    );
                    report.round(S, &case, &http, "KiB per idle follower", m.kib_per_follower);
                    eprintln!(
                        "  {http:<32} p99 {:.3} ms = {:.1} x in-process p99 {:.3} ms; {:.1} KiB per idle follower",
                        m.http.p99,
                        m.http.p99 / m.feed.p99,
                        m.feed.p99,
                        m.kib_per_follower
                    );
                }
                Err(e) => {
                    eprintln!("  {http:<32} {e}");
                    report.missing(S, &case, &http, "p99 ms", &e.to_string());
                }
            }
        }
    }
    let tasks = 32;
    let calls = if ctx.quick { 20 } else { 500 };
    let case = format!("single-event appends from {tasks} tasks");
    for round in 0..ctx.sizes.heavy_rounds {
        for backend in round_subjects(ctx, "serve appends", round) {
            let name = format!("serveappend{round}");
            let http = format!("{} over HTTP", backend.subject());
            let direct = format!("{} in-process", backend.subject());
            match appends(ctx, backend, &name, tasks, calls).await {
                Ok((over_http, in_process)) => {
                    report.round(S, &case, &http, "events/s", over_http);
                    report.round(S, &case, &direct, "events/s", in_process);
                    report.round(S, &case, &http, "HTTP / in-process", over_http / in_process);
                    eprintln!(
                        "  {http:<32} {over_http:.0} events/s = {:.2} x in-process {in_process:.0}",
                        over_http / in_process
                    );
                }
                Err(e) => {
                    eprintln!("  {http:<32} {e}");
                    report.missing(S, &case, &http, "events/s", &e.to_string());
                }
            }
        }
    }
    report.note(
        "serve appends: 32 tasks each append single events to a session of their own, over \
         HTTP (POST /v1/sessions/{s}/events, one keep-alive connection per task, the a2-server \
         router in this process) and then straight to the same store in process",
    );
    report.note(
        "serve fan-out: the a2-server router in this process on a loopback port; followers are \
         reqwest streams of /v1/sessions/{s}/live; the memory figure is this process's resident \
         memory per idle follower, server and client ends together",
    );
}

/// Announces round `round` of `what` and yields the subjects this run
/// measures.
fn round_subjects<'a>(
    ctx: &'a Ctx,
    what: &str,
    round: usize,
) -> impl Iterator<Item = Backend> + 'a {
    eprintln!("[{what}] round {}/{}", round + 1, ctx.sizes.heavy_rounds);
    SUBJECTS
        .into_iter()
        .filter(|backend| ctx.wants(&backend.subject()))
}

fn rows(report: &mut Report, case: &str, subject: &str, l: &Latencies) {
    report.round(S, case, subject, "p50 ms", l.p50);
    report.round(S, case, subject, "p99 ms", l.p99);
    report.round(S, case, subject, "max ms", l.max);
}

struct Measured {
    http: Latencies,
    feed: Latencies,
    kib_per_follower: f64,
}

/// Resident memory of this process, in KiB (Linux).
fn rss_kib() -> Option<f64> {
    crate::info::rss_bytes().map(|bytes| bytes as f64 / 1024.0)
}

async fn measure(
    ctx: &Ctx,
    backend: Backend,
    name: &str,
    followers: usize,
    sessions: usize,
) -> Result<Measured, BoxError> {
    let store = ctx.open(backend, name).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let config = a2_server::Config::default();
    let shutdown = config.shutdown.clone();
    let server = tokio::spawn(a2_server::serve(
        listener,
        store.clone(),
        config,
        std::future::pending(),
    ));
    let session = |i: usize| format!("{name}-s{i}");
    let epoch = Instant::now();

    // Over HTTP: every follower reports each event's latency.
    let before = rss_kib();
    let (tx, mut rx) = mpsc::unbounded_channel::<Duration>();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let mut tasks = Vec::with_capacity(followers);
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<()>();
    for f in 0..followers {
        let url = format!("{base}/v1/sessions/{}/live", session(f % sessions));
        let client = client.clone();
        let tx = tx.clone();
        let ready = ready_tx.clone();
        tasks.push(tokio::spawn(async move {
            let response = client.get(url).send().await?;
            let _ = ready.send(());
            let mut body = response.bytes_stream();
            let mut buffer = Vec::new();
            while let Some(chunk) = body.next().await {
                buffer.extend_from_slice(&chunk?);
                while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
                    let block: Vec<u8> = buffer.drain(..end + 2).collect();
                    let text = String::from_utf8_lossy(&block);
                    if let Some(data) = text.lines().find_map(|l| l.strip_prefix("data: ")) {
                        let event: serde_json::Value = serde_json::from_str(data)?;
                        if let Some(sent) = event["payload"]["t"].as_u64() {
                            let now = epoch.elapsed();
                            let _ = tx.send(now.saturating_sub(Duration::from_nanos(sent)));
                        }
                    }
                }
            }
            Ok::<(), BoxError>(())
        }));
    }
    for _ in 0..followers {
        ready_rx
            .recv()
            .await
            .ok_or("a follower failed to connect")?;
    }
    // Let the server's side of every feed settle into waiting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = rss_kib();
    let kib_per_follower = match (before, after) {
        (Some(b), Some(a)) => (a - b).max(0.0) / followers as f64,
        _ => f64::NAN,
    };
    let n = events(ctx.quick);
    let http = deliver(&store, &session, sessions, n, epoch, followers, &mut rx).await?;
    for task in &tasks {
        task.abort();
    }
    shutdown.cancel();
    let _ = server.await;

    // In process: the same number of feeds on the same store.
    let (tx, mut rx) = mpsc::unbounded_channel::<Duration>();
    let mut feeds = Vec::with_capacity(followers);
    let frontier: Vec<u64> = {
        let mut f = Vec::with_capacity(sessions);
        for i in 0..sessions {
            let page = store
                .read_history(&session(i), a2::HistoryOptions::new(1))
                .await?;
            f.push(page.events.last().map_or(0, |e| e.index()));
        }
        f
    };
    for f in 0..followers {
        let mut feed = store.stream(&session(f % sessions), frontier[f % sessions]);
        let tx = tx.clone();
        feeds.push(tokio::spawn(async move {
            while let Some(Ok(event)) = feed.next().await {
                if let Some(sent) = event.payload["t"].as_u64() {
                    let _ = tx.send(epoch.elapsed().saturating_sub(Duration::from_nanos(sent)));
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let feed = deliver(&store, &session, sessions, n, epoch, followers, &mut rx).await?;
    for task in &feeds {
        task.abort();
    }
    store.close().await;
    Ok(Measured {
        http,
        feed,
        kib_per_follower,
    })
}

/// Appends `n` events round robin over the sessions, each carrying its
/// send time, and collects every delivery (each event reaches
/// `followers / sessions` followers).
async fn deliver(
    store: &Arc<dyn Store>,
    session: &impl Fn(usize) -> String,
    sessions: usize,
    n: u64,
    epoch: Instant,
    followers: usize,
    rx: &mut mpsc::UnboundedReceiver<Duration>,
) -> Result<Latencies, BoxError> {
    let per_event = followers / sessions;
    for i in 0..n {
        let t = epoch.elapsed().as_nanos() as u64;
        let event = NewEvent::new("bench.tick", json!({ "t": t })).settled();
        store
            .append(&session(i as usize % sessions), vec![event])
            .await?;
        tokio::time::sleep(INTERVAL).await;
    }
    let want = n as usize * per_event;
    let mut samples = Vec::with_capacity(want);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while samples.len() < want {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(d)) => samples.push(d),
            _ => {
                return Err(format!("{} of {want} deliveries arrived", samples.len()).into());
            }
        }
    }
    Latencies::of(&samples).ok_or_else(|| "no samples".into())
}

/// Events per second of `calls` single-event appends from each of `tasks`
/// tasks, over HTTP with a keep-alive connection per task, then in process
/// on the same store.
async fn appends(
    ctx: &Ctx,
    backend: Backend,
    name: &str,
    tasks: usize,
    calls: usize,
) -> Result<(f64, f64), BoxError> {
    let store = ctx.open(backend, name).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let config = a2_server::Config::default();
    let shutdown = config.shutdown.clone();
    let server = tokio::spawn(a2_server::serve(
        listener,
        store.clone(),
        config,
        std::future::pending(),
    ));
    let started = Instant::now();
    let mut running = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let url = format!("{base}/v1/sessions/{name}-http-{t}/events");
        running.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            for k in 0..calls {
                let body = json!({ "events": [{ "type": "bench", "payload": { "n": k } }] });
                let response = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await?;
                if !response.status().is_success() {
                    return Err(format!("append answered {}", response.status()).into());
                }
            }
            Ok::<(), BoxError>(())
        }));
    }
    for task in running {
        task.await??;
    }
    let over_http = (tasks * calls) as f64 / started.elapsed().as_secs_f64();
    shutdown.cancel();
    let _ = server.await;

    let started = Instant::now();
    let mut running = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let store = store.clone();
        let session = format!("{name}-direct-{t}");
        running.push(tokio::spawn(async move {
            for k in 0..calls {
                let event = NewEvent::new("bench", json!({ "n": k }));
                store.append(&session, vec![event]).await?;
            }
            Ok::<(), BoxError>(())
        }));
    }
    for task in running {
        task.await??;
    }
    let in_process = (tasks * calls) as f64 / started.elapsed().as_secs_f64();
    store.close().await;
    Ok((over_http, in_process))
}
