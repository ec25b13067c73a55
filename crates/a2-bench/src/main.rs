//! `a2-bench`: a2 on the memory and Redis stores, side by side with what its
//! users would pick instead (raw Redis streams, BullMQ) and with what Redis
//! itself can do (one EVALSHA per write), all measured in the same run
//! against a `redis-server` it starts itself.
//!
//! Run with `cargo run -p a2-bench --release` (add `-- --json` for JSON,
//! `-- --quick` for the smoke mode the test suite runs). The table goes to
//! stdout, progress to stderr.
//!
//! # Layout
//! - `server`: starts and stops the private `redis-server`.
//! - `raw`: the raw-Redis baselines (EVALSHA ceiling, consumer group, XREAD).
//! - `bullmq`: the BullMQ baseline, through node.
//! - `scenarios`: the a2 side, against `Arc<dyn Store>`.
//! - `wiring`: constructors of a2's stores and runtime.
//! - `info`, `monitor`: commandstats, CLIENT LIST, SLOWLOG, MONITOR, RSS.
//! - `stats`, `report`: medians, percentiles, the table and the JSON.

mod bullmq;
mod info;
mod monitor;
mod raw;
mod report;
mod scenarios;
mod server;
mod stats;
mod wiring;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2::Store;
use clap::Parser;
use redis::aio::ConnectionManager;

use crate::report::{Bound, Report};
use crate::stats::{Latencies, rate};

/// Errors of the benchmark's own plumbing.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How many keys a2's append script touches for lane-less events: the log
/// stream, the summary hash, the pending and ready sets, the store-wide id
/// index, session list and pending-session list (lua/append.lua in a2-redis).
/// The EVALSHA ceiling touches as many.
const CEILING_KEYS: usize = 7;

#[derive(Debug, Parser)]
#[command(about = "Benchmarks a2 against raw Redis and BullMQ in one run")]
struct Args {
    /// Small sizes, no targets: a smoke run that finishes in seconds.
    #[arg(long)]
    quick: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// The redis-server binary to start.
    #[arg(long, default_value = "redis-server")]
    redis_server: PathBuf,
    /// Skip the BullMQ baseline (it needs node and the npm registry).
    #[arg(long)]
    no_bullmq: bool,
    /// Rounds of the append scenario (default 5, or 3 with --quick); the
    /// heavier scenarios run min(rounds, 3). Figures are medians over rounds.
    #[arg(long)]
    rounds: Option<usize>,
    /// Only these scenarios (comma-separated: append, cycle, live, fanout, commands).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Only these subjects of the append and work-cycle scenarios, for
    /// profiling one of them (comma-separated: "a2 memory", "a2 redis",
    /// "EVALSHA ceiling", "Redis consumer group").
    #[arg(long, value_delimiter = ',')]
    subjects: Vec<String>,
    /// Internal: run the fan-out of one store (`redis` or `memory`) in this
    /// fresh process, against the server at `--redis-url`, and print its rows
    /// as JSON. The parent uses it so resident memory is measured in a
    /// process whose heap no earlier scenario has churned.
    #[arg(long, hide = true)]
    fanout_child: Option<String>,
    /// Internal: which round a `--fanout-child` runs (keeps its keys apart).
    #[arg(long, hide = true, default_value_t = 0)]
    child_round: usize,
    /// Internal: the server a `--fanout-child` uses.
    #[arg(long, hide = true)]
    redis_url: Option<String>,
}

/// Sizes of one run.
#[derive(Debug, Clone, serde::Serialize)]
struct Sizes {
    rounds: usize,
    heavy_rounds: usize,
    redis_calls_batch1: u64,
    redis_calls_batch100: u64,
    memory_calls_batch1: u64,
    memory_calls_batch100: u64,
    cycle_events: u64,
    cycle_sessions: u64,
    cycle_concurrency: usize,
    bullmq_concurrency: usize,
    live_events: u64,
    live_interval_ms: u64,
    fanout_feeds: usize,
    fanout_sessions: usize,
    command_ops: u64,
}

impl Sizes {
    fn full(rounds: Option<usize>) -> Self {
        let rounds = rounds.unwrap_or(5).max(1);
        Self {
            rounds,
            heavy_rounds: rounds.min(3),
            redis_calls_batch1: 20_000,
            redis_calls_batch100: 640,
            memory_calls_batch1: 500_000,
            memory_calls_batch100: 6_400,
            cycle_events: 20_000,
            cycle_sessions: 100,
            cycle_concurrency: 64,
            bullmq_concurrency: 50,
            live_events: 2_000,
            live_interval_ms: 2,
            fanout_feeds: 10_000,
            fanout_sessions: 100,
            command_ops: 200,
        }
    }

    fn quick(rounds: Option<usize>) -> Self {
        let rounds = rounds.unwrap_or(3).max(1);
        Self {
            rounds,
            heavy_rounds: rounds.min(3),
            redis_calls_batch1: 320,
            redis_calls_batch100: 32,
            memory_calls_batch1: 3_200,
            memory_calls_batch100: 64,
            cycle_events: 1_000,
            cycle_sessions: 10,
            cycle_concurrency: 64,
            bullmq_concurrency: 50,
            live_events: 50,
            live_interval_ms: 2,
            fanout_feeds: 200,
            fanout_sessions: 10,
            command_ops: 20,
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("a2-bench: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("a2-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Everything a scenario needs.
struct Ctx {
    sizes: Sizes,
    quick: bool,
    /// The server's URL and port.
    url: String,
    port: u16,
    /// The server this process started, stopped when dropped (`None` in a
    /// fan-out child, which uses its parent's).
    _server: Option<server::RedisServer>,
    client: redis::Client,
    con: ConnectionManager,
    /// Distinguishes this run's keys and prefixes.
    run_id: String,
    /// Only these subjects of the append and work-cycle scenarios (empty: all).
    subjects: Vec<String>,
}

impl Ctx {
    /// Whether `subject` is measured in this run (`--subjects`).
    fn wants(&self, subject: &str) -> bool {
        self.subjects.is_empty() || self.subjects.iter().any(|s| s == subject)
    }

    fn tag(&self, what: &str, round: usize) -> String {
        format!("{}-{what}-{round}", self.run_id)
    }
}

async fn run(args: Args) -> Result<(), BoxError> {
    let sizes = if args.quick {
        Sizes::quick(args.rounds)
    } else {
        Sizes::full(args.rounds)
    };
    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);

    let (server, url) = match &args.redis_url {
        Some(url) if args.fanout_child.is_some() => (None, url.clone()),
        _ => {
            eprintln!("a2-bench: starting {}", args.redis_server.display());
            let server = server::RedisServer::start(&args.redis_server)?;
            eprintln!(
                "a2-bench: redis-server {} on {}",
                server.version(),
                server.url()
            );
            let url = server.url();
            (Some(server), url)
        }
    };
    let port = match &server {
        Some(server) => server.port(),
        // redis://127.0.0.1:{port}/ as the parent passes it.
        None => url
            .trim_end_matches('/')
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or("--redis-url needs an explicit port")?,
    };
    let client = redis::Client::open(url.as_str())?;
    // The same client settings for every raw baseline; generous timeouts so
    // a noisy machine slows figures down instead of failing them.
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_secs(30)))
        .set_connection_timeout(Some(Duration::from_secs(5)));
    let con = client.get_connection_manager_with_config(config).await?;
    let run_id = match args.fanout_child {
        Some(_) => format!("{}c{}", std::process::id(), args.child_round),
        None => format!("{}", std::process::id()),
    };

    let mut report = Report::default();
    let mut ctx = Ctx {
        sizes,
        quick: args.quick,
        url,
        port,
        _server: server,
        client,
        con,
        run_id,
        subjects: args.subjects.clone(),
    };
    if let Some(which) = &args.fanout_child {
        fanout_child(&mut ctx, &mut report, which).await;
        println!("{}", report.to_json());
        return Ok(());
    }
    meta(&mut report, &args, &ctx.sizes, ctx._server.as_ref());
    let _ = info::take_slowlog(&mut ctx.con).await;

    let started = Instant::now();
    if wanted("append") {
        append_scenario(&mut ctx, &mut report).await;
        slowlog_note(&mut ctx, &mut report, "append").await;
    }
    if wanted("cycle") {
        cycle_scenario(&mut ctx, &mut report, args.no_bullmq).await;
        slowlog_note(&mut ctx, &mut report, "work cycle (BullMQ)").await;
    }
    if wanted("live") {
        live_scenario(&mut ctx, &mut report).await;
        slowlog_note(&mut ctx, &mut report, "live latency").await;
    }
    if wanted("fanout") {
        fanout_scenario(&mut ctx, &mut report).await;
        slowlog_note(&mut ctx, &mut report, "fan-out").await;
    }
    if wanted("commands") {
        commands_scenario(&mut ctx, &mut report).await;
    }
    if !ctx.quick && args.only.is_empty() {
        targets(&mut report, &ctx.sizes);
    }
    report
        .meta
        .insert("loadavg at end".into(), loadavg().into());
    report.meta.insert(
        "duration_s".into(),
        serde_json::json!((started.elapsed().as_secs_f64() * 10.0).round() / 10.0),
    );
    eprintln!("a2-bench: done in {:.1} s", started.elapsed().as_secs_f64());

    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_table());
    }
    Ok(())
}

fn meta(report: &mut Report, args: &Args, sizes: &Sizes, server: Option<&server::RedisServer>) {
    let command = |program: &str, arg: &str| {
        std::process::Command::new(program)
            .arg(arg)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".into())
    };
    let m = &mut report.meta;
    m.insert(
        "mode".into(),
        (if args.quick { "quick" } else { "full" }).into(),
    );
    m.insert("date".into(), command("date", "-u").into());
    m.insert("rustc".into(), command("rustc", "--version").into());
    m.insert(
        "redis-server".into(),
        server.map_or("unknown", |s| s.version()).into(),
    );
    m.insert(
        "node".into(),
        bullmq::node_version()
            .unwrap_or_else(|| "not found".into())
            .into(),
    );
    // How busy the (shared) machine was when the run began; the end of the
    // run adds its own reading.
    m.insert("loadavg at start".into(), loadavg().into());
    m.insert(
        "cpus".into(),
        std::thread::available_parallelism()
            .map_or(0, |n| n.get())
            .into(),
    );
    m.insert(
        "sizes".into(),
        serde_json::to_value(sizes).unwrap_or(serde_json::Value::Null),
    );
}

/// The first three fields of /proc/loadavg (1, 5 and 15 minutes).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

async fn slowlog_note(ctx: &mut Ctx, report: &mut Report, scenario: &str) {
    match info::take_slowlog(&mut ctx.con).await {
        Ok(entries) if entries.is_empty() => {
            report.note(format!("SLOWLOG during {scenario}: no command over 1 ms"))
        }
        Ok(entries) => report.note(format!(
            "SLOWLOG during {scenario}: {}",
            info::summarize_slowlog(&entries).join("; ")
        )),
        Err(e) => report.note(format!("SLOWLOG during {scenario}: unreadable ({e})")),
    }
}

async fn redis_store(ctx: &Ctx, name: &str) -> Result<Arc<dyn Store>, String> {
    wiring::redis_store(&ctx.url, &format!("bench{}{name}", ctx.run_id)).await
}

// ---------------------------------------------------------------- append

async fn append_scenario(ctx: &mut Ctx, report: &mut Report) {
    const S: &str = "append";
    let cases = [(1usize, 1usize), (1, 32), (100, 1), (100, 32)];
    for round in 0..ctx.sizes.rounds {
        eprintln!("[append] round {}/{}", round + 1, ctx.sizes.rounds);
        for (batch, tasks) in cases {
            let case = append_case(batch, tasks);
            let redis_calls = if batch == 1 {
                ctx.sizes.redis_calls_batch1
            } else {
                ctx.sizes.redis_calls_batch100
            };
            let memory_calls = if batch == 1 {
                ctx.sizes.memory_calls_batch1
            } else {
                ctx.sizes.memory_calls_batch100
            };
            let tag = ctx.tag(&format!("a{batch}x{tasks}"), round);
            // Each subject's events per second; baseline first, then a2.
            if ctx.wants("EVALSHA ceiling") {
                let ceiling =
                    raw::evalsha_append(&ctx.con, CEILING_KEYS, batch, tasks, redis_calls, &tag)
                        .await;
                record(
                    report,
                    S,
                    &case,
                    "EVALSHA ceiling",
                    "events/s",
                    ceiling,
                    redis_calls * batch as u64,
                );
            }
            if ctx.wants("a2 redis") {
                let redis = match redis_store(ctx, &format!("a{round}")).await {
                    Ok(store) => {
                        let r = scenarios::append(&store, batch, tasks, redis_calls, &tag).await;
                        store.close().await;
                        r
                    }
                    Err(e) => Err(e.into()),
                };
                record(
                    report,
                    S,
                    &case,
                    "a2 redis",
                    "events/s",
                    redis,
                    redis_calls * batch as u64,
                );
            }
            if ctx.wants("a2 memory") {
                let memory = match wiring::memory_store() {
                    Ok(store) => scenarios::append(&store, batch, tasks, memory_calls, &tag).await,
                    Err(e) => Err(e.into()),
                };
                record(
                    report,
                    S,
                    &case,
                    "a2 memory",
                    "events/s",
                    memory,
                    memory_calls * batch as u64,
                );
            }
        }
    }
    report.note(format!(
        "append: each task appends to its own session; the EVALSHA ceiling script touches {CEILING_KEYS} keys \
         per call (XADD and an id-index HSET per event, a counter per other key), called with the same \
         redis client (one multiplexed connection) and the same number of tasks"
    ));
}

/// Adds one round's rate (`count` per elapsed second), or the reason it is missing.
fn record(
    report: &mut Report,
    scenario: &str,
    case: &str,
    subject: &str,
    metric: &str,
    result: Result<Duration, BoxError>,
    count: u64,
) -> bool {
    match result {
        Ok(elapsed) => {
            let r = rate(count, elapsed);
            eprintln!("  {case:<22} {subject:<18} {:>12.0} {metric}", r);
            report.round(scenario, case, subject, metric, r);
            true
        }
        Err(e) => {
            eprintln!("  {case:<22} {subject:<18} {e}");
            report.missing(scenario, case, subject, metric, &e.to_string());
            false
        }
    }
}

// ---------------------------------------------------------------- work cycle

async fn cycle_scenario(ctx: &mut Ctx, report: &mut Report, no_bullmq: bool) {
    const S: &str = "work cycle";
    let (events, sessions, concurrency) = (
        ctx.sizes.cycle_events,
        ctx.sizes.cycle_sessions,
        ctx.sizes.cycle_concurrency,
    );
    let case = cycle_case(&ctx.sizes);
    for round in 0..ctx.sizes.heavy_rounds {
        eprintln!(
            "[work cycle] round {}/{}",
            round + 1,
            ctx.sizes.heavy_rounds
        );
        let tag = ctx.tag("cycle", round);
        if ctx.wants("Redis consumer group") {
            let cpu = CpuMeter::start(ctx).await;
            let cg = raw::consumer_group_cycle(&ctx.con, events, sessions, concurrency, &tag).await;
            let ok = record(
                report,
                S,
                &case,
                "Redis consumer group",
                "events/s",
                cg,
                events,
            );
            cpu.record(ctx, report, S, &case, "Redis consumer group", events, ok)
                .await;
        }
        if ctx.wants("a2 redis") {
            let cpu = CpuMeter::start(ctx).await;
            let redis = match redis_store(ctx, &format!("c{round}")).await {
                Ok(store) => {
                    wiring::runtime_cycle(store, events, sessions, concurrency, &tag).await
                }
                Err(e) => Err(e.into()),
            };
            let ok = record(
                report,
                S,
                &case,
                "a2 redis (runtime)",
                "events/s",
                redis,
                events,
            );
            cpu.record(ctx, report, S, &case, "a2 redis (runtime)", events, ok)
                .await;
        }
        if ctx.wants("a2 memory") {
            let memory = match wiring::memory_store() {
                Ok(store) => {
                    wiring::runtime_cycle(store, events, sessions, concurrency, &tag).await
                }
                Err(e) => Err(e.into()),
            };
            record(
                report,
                S,
                &case,
                "a2 memory (runtime)",
                "events/s",
                memory,
                events,
            );
        }
    }
    report.note(
        "work cycle: the consumer group runs 64 producer tasks (XADD) and 64 consumer tasks \
         (XREADGROUP COUNT 100 on one stream at a time, then one XACK per entry) on one multiplexed \
         connection; a2 appends one event per call from 64 tasks through the runtime, whose no-op \
         handler runs with the same concurrency",
    );

    slowlog_note(ctx, report, "work cycle (a2 and the consumer group)").await;
    let bull_case = bull_case(&ctx.sizes);
    if no_bullmq {
        report.missing(S, &bull_case, "BullMQ", "jobs/s", "skipped (--no-bullmq)");
        return;
    }
    if bullmq::node_version().is_none() {
        eprintln!("[work cycle] BullMQ skipped: node is not installed");
        report.missing(
            S,
            &bull_case,
            "BullMQ",
            "jobs/s",
            "skipped: node is not installed",
        );
        return;
    }
    eprintln!("[work cycle] BullMQ: npm install bullmq into a temporary folder");
    let (port, rounds, conc) = (
        ctx.port,
        ctx.sizes.heavy_rounds,
        ctx.sizes.bullmq_concurrency,
    );
    let result = tokio::task::spawn_blocking(move || bullmq::run(port, events, conc, rounds)).await;
    match result {
        Ok(Ok(run)) => {
            report
                .meta
                .insert("bullmq".into(), run.version.clone().into());
            for r in run.rounds {
                report.round(S, &bull_case, "BullMQ", "jobs/s", r);
            }
            report.note(
                "BullMQ: jobs added with addBulk (1 000 a time, removeOnComplete) while one no-op Worker \
                 runs them; timed from the first add to the last completion",
            );
        }
        Ok(Err(e)) => {
            eprintln!("  BullMQ: {e}");
            report.missing(S, &bull_case, "BullMQ", "jobs/s", &format!("failed: {e}"));
        }
        Err(e) => report.missing(S, &bull_case, "BullMQ", "jobs/s", &format!("failed: {e}")),
    }
}

/// CPU time of the server and of this process over one measured run: tells
/// whether a slow figure is spent in Redis, in the client, or waiting.
struct CpuMeter {
    server: Option<f64>,
    process: Option<f64>,
}

impl CpuMeter {
    async fn start(ctx: &mut Ctx) -> Self {
        Self {
            server: info::server_cpu_seconds(&mut ctx.con).await.ok(),
            process: info::process_cpu_seconds(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn record(
        self,
        ctx: &mut Ctx,
        report: &mut Report,
        scenario: &str,
        case: &str,
        subject: &str,
        events: u64,
        ok: bool,
    ) {
        if !ok {
            return;
        }
        let per_event = |before: Option<f64>, after: Option<f64>| match (before, after) {
            (Some(b), Some(a)) => Some((a - b) * 1e6 / events.max(1) as f64),
            _ => None,
        };
        let server = per_event(
            self.server,
            info::server_cpu_seconds(&mut ctx.con).await.ok(),
        );
        let process = per_event(self.process, info::process_cpu_seconds());
        if let Some(us) = server {
            report.round(scenario, case, subject, "redis-server CPU us/event", us);
        }
        if let Some(us) = process {
            report.round(scenario, case, subject, "client CPU us/event", us);
        }
    }
}

// ---------------------------------------------------------------- live latency

async fn live_scenario(ctx: &mut Ctx, report: &mut Report) {
    const S: &str = "live latency";
    let events = ctx.sizes.live_events;
    let interval = Duration::from_millis(ctx.sizes.live_interval_ms);
    let case = live_case(&ctx.sizes);
    for round in 0..ctx.sizes.heavy_rounds {
        eprintln!(
            "[live latency] round {}/{}",
            round + 1,
            ctx.sizes.heavy_rounds
        );
        let tag = ctx.tag("live", round);
        let xread = raw::xread_latency(&ctx.client, &ctx.con, events, interval, &tag).await;
        latency_rows(report, S, &case, "XADD -> blocked XREAD", xread);
        let feed = async {
            let writer = redis_store(ctx, &format!("lw{round}")).await?;
            let reader = redis_store(ctx, &format!("lw{round}")).await?;
            let r = scenarios::feed_latency(&writer, &reader, events, interval, &tag).await;
            writer.close().await;
            reader.close().await;
            r
        };
        let feed = feed.await;
        latency_rows(report, S, &case, "a2 redis feed (other instance)", feed);
    }
}

fn latency_rows(
    report: &mut Report,
    s: &str,
    case: &str,
    subject: &str,
    result: Result<(Vec<Duration>, Vec<Duration>), BoxError>,
) {
    let result = result.and_then(|(deliveries, writes)| {
        let d = Latencies::of(&deliveries).ok_or("no samples")?;
        let w = Latencies::of(&writes).ok_or("no samples")?;
        Ok::<_, BoxError>((d, w))
    });
    match result {
        Ok((l, w)) => {
            eprintln!(
                "  {subject:<32} p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  (write call p99 {:.3} ms)",
                l.p50, l.p99, l.max, w.p99
            );
            report.round(s, case, subject, "p50 ms", l.p50);
            report.round(s, case, subject, "p99 ms", l.p99);
            report.round(s, case, subject, "max ms", l.max);
            report.round(s, case, subject, "write call p50 ms", w.p50);
            report.round(s, case, subject, "write call p99 ms", w.p99);
        }
        Err(e) => {
            eprintln!("  {subject:<32} {e}");
            for metric in ["p50 ms", "p99 ms", "max ms"] {
                report.missing(s, case, subject, metric, &e.to_string());
            }
        }
    }
}

// ---------------------------------------------------------------- fan-out

async fn fanout_scenario(ctx: &mut Ctx, report: &mut Report) {
    const S: &str = "fan-out";
    let case = fanout_case(&ctx.sizes);
    let rounds = ctx.sizes.heavy_rounds;
    for which in ["redis", "memory"] {
        let subject = format!("a2 {which}");
        for round in 0..rounds {
            eprintln!(
                "[fan-out] a2 {which}, round {}/{rounds} (in a fresh process)",
                round + 1
            );
            match fanout_in_child(ctx, which, round).await {
                Ok(child) => {
                    for row in child.rows {
                        match row.value {
                            Some(_) => {
                                for v in row.rounds {
                                    report.round(
                                        &row.scenario,
                                        &row.case,
                                        &row.subject,
                                        &row.metric,
                                        v,
                                    );
                                }
                            }
                            None => report.missing(
                                &row.scenario,
                                &row.case,
                                &row.subject,
                                &row.metric,
                                row.note.as_deref().unwrap_or("not measured"),
                            ),
                        }
                    }
                    for note in child.notes {
                        if !report.notes.contains(&note) {
                            report.note(note);
                        }
                    }
                }
                Err(e) => {
                    eprintln!("  {subject} fan-out: {e}");
                    for metric in FANOUT_METRICS {
                        report.missing(S, &case, &subject, metric, &format!("failed: {e}"));
                    }
                }
            }
        }
    }
    report.note(
        "fan-out: each store runs in a fresh process (a2-bench --fanout-child) so its heap is not \
         shaped by earlier scenarios. RSS per idle feed = growth of that process's VmRSS from before \
         the feeds were opened to when all were live and idle, divided by the feeds; it includes the \
         benchmark's own task and channel sender per feed. Delivery: one event appended (by a second \
         instance) to each session in turn, timed until all of that session's feeds have it",
    );
}

fn fanout_case(sizes: &Sizes) -> String {
    format!(
        "{} feeds over {} sessions",
        sizes.fanout_feeds, sizes.fanout_sessions
    )
}

/// Runs `a2-bench --fanout-child which` and reads back its report.
async fn fanout_in_child(ctx: &Ctx, which: &str, round: usize) -> Result<Report, BoxError> {
    let exe = std::env::current_exe()?;
    let mut cmd = tokio::process::Command::new(exe);
    // One delivery round per process; the parent takes the median over processes.
    cmd.args(["--fanout-child", which, "--redis-url", &ctx.url])
        .args(["--rounds", "1", "--child-round", &round.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    if ctx.quick {
        cmd.arg("--quick");
    }
    let child = cmd.spawn()?;
    let out = tokio::time::timeout(Duration::from_secs(600), child.wait_with_output()).await??;
    if !out.status.success() {
        return Err(format!("the fan-out process failed ({})", out.status).into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The child side of [`fanout_in_child`].
async fn fanout_child(ctx: &mut Ctx, report: &mut Report, which: &str) {
    const S: &str = "fan-out";
    let case = fanout_case(&ctx.sizes);
    let subject = format!("a2 {which}");
    let stores = match which {
        "redis" => {
            async {
                let writer = redis_store(ctx, "fw").await?;
                let reader = redis_store(ctx, "fw").await?;
                Ok::<_, String>((writer, reader))
            }
            .await
        }
        _ => wiring::memory_store().map(|s| (s.clone(), s)),
    };
    match stores {
        Ok((writer, reader)) => {
            let on_redis = which == "redis";
            if let Err(e) =
                fanout_one(ctx, report, &case, &subject, &writer, &reader, on_redis).await
            {
                eprintln!("  {subject} fan-out: {e}");
                for metric in FANOUT_METRICS {
                    report.missing(S, &case, &subject, metric, &format!("failed: {e}"));
                }
            }
            writer.close().await;
            reader.close().await;
        }
        Err(e) => {
            for metric in FANOUT_METRICS {
                report.missing(S, &case, &subject, metric, &e);
            }
        }
    }
}

const FANOUT_METRICS: [&str; 4] = [
    "subscriber connections",
    "RSS bytes per idle feed",
    "delivery p50 ms",
    "delivery p99 ms",
];

async fn fanout_one(
    ctx: &mut Ctx,
    report: &mut Report,
    case: &str,
    subject: &str,
    writer: &Arc<dyn Store>,
    reader: &Arc<dyn Store>,
    on_redis: bool,
) -> Result<(), BoxError> {
    const S: &str = "fan-out";
    let (feeds, sessions) = (ctx.sizes.fanout_feeds, ctx.sizes.fanout_sessions);
    let before_clients = info::clients(&mut ctx.con).await?;
    let rss_before = info::rss_bytes().ok_or("cannot read /proc/self/status")?;
    let tag = ctx.tag(&format!("fanout-{}", subject.replace(' ', "-")), 0);
    let mut fan = scenarios::FanOut::open(reader, writer, feeds, sessions, &tag).await?;
    let rss_after = info::rss_bytes().ok_or("cannot read /proc/self/status")?;
    let per_feed = rss_after.saturating_sub(rss_before) as f64 / feeds as f64;
    report.round(S, case, subject, "RSS bytes per idle feed", per_feed);
    if on_redis {
        let after = info::clients(&mut ctx.con).await?;
        let new_subscribers = after
            .iter()
            .filter(|c| c.is_subscriber() && !before_clients.iter().any(|b| b.id == c.id))
            .count();
        report.round(
            S,
            case,
            subject,
            "subscriber connections",
            new_subscribers as f64,
        );
        eprintln!("  subscriber connections opened for {feeds} feeds: {new_subscribers}");
    } else {
        report.missing(
            S,
            case,
            subject,
            "subscriber connections",
            "n/a (in-process)",
        );
    }
    eprintln!("  RSS per idle feed: {per_feed:.0} bytes");
    for round in 0..ctx.sizes.heavy_rounds {
        let samples = fan.deliver_round(writer).await?;
        let l = Latencies::of(&samples).ok_or("no deliveries")?;
        eprintln!(
            "  delivery round {}/{}: p50 {:.3} ms  p99 {:.3} ms",
            round + 1,
            ctx.sizes.heavy_rounds,
            l.p50,
            l.p99
        );
        report.round(S, case, subject, "delivery p50 ms", l.p50);
        report.round(S, case, subject, "delivery p99 ms", l.p99);
    }
    fan.close();
    Ok(())
}

// ---------------------------------------------------------------- commands

async fn commands_scenario(ctx: &mut Ctx, report: &mut Report) {
    eprintln!("[commands] INFO commandstats and MONITOR per operation");
    // Two passes: one times the scripts, one counts commands under MONITOR.
    for monitored in [false, true] {
        if let Err(e) = commands_a2(ctx, report, monitored).await {
            eprintln!("  a2 redis: {e}");
            for case in [
                "per append",
                "per claimed event",
                "per completed event",
                "per delivered event",
            ] {
                report.missing(
                    "commands",
                    case,
                    "a2 redis",
                    "commands (commandstats)",
                    &e.to_string(),
                );
            }
        }
        if let Err(e) = commands_baselines(ctx, report, monitored).await {
            eprintln!("  baselines: {e}");
            report.note(format!("commands: baselines failed: {e}"));
        }
    }
    report.note(
        "commands: `commands (commandstats)` counts every command Redis ran, including those inside \
         scripts; MONITOR splits them into `script calls` and `other client commands` (sent by the \
         client) and what ran inside scripts. Per delivered event = the window of appends to a \
         followed session minus the same number of plain appends. Claims take up to 100 events per call",
    );
}

/// Runs one window of command counting: `body`, then a marker through MONITOR.
struct Counter {
    /// `None` for a timing pass: MONITOR slows every command down.
    monitor: Option<monitor::Monitor>,
    before: info::CommandCounts,
    before_micros: u64,
    /// Server time in script calls during the last window, in µs.
    last_micros: u64,
    marks: usize,
}

impl Counter {
    async fn start(ctx: &mut Ctx, monitored: bool) -> Result<Self, BoxError> {
        let monitor = if monitored {
            Some(monitor::Monitor::start(ctx.port).await?)
        } else {
            None
        };
        let before = info::command_counts(&mut ctx.con).await?;
        let before_micros = info::script_micros(&mut ctx.con).await?;
        Ok(Self {
            monitor,
            before,
            before_micros,
            last_micros: 0,
            marks: 0,
        })
    }

    /// Cuts the window here: the commandstats delta and the MONITOR split
    /// since the last cut, client commands only from `only` when given.
    async fn cut(
        &mut self,
        ctx: &mut Ctx,
        only: Option<&[String]>,
    ) -> Result<(info::CommandCounts, monitor::Split), BoxError> {
        self.marks += 1;
        let marker = format!("a2-bench-mark-{}-{}", ctx.run_id, self.marks);
        let _: String = redis::cmd("ECHO")
            .arg(&marker)
            .query_async(&mut ctx.con)
            .await?;
        let split = match &mut self.monitor {
            Some(m) => m.until(&marker, only).await?,
            None => monitor::Split::default(),
        };
        let now = info::command_counts(&mut ctx.con).await?;
        let mut delta = info::delta(&self.before, &now);
        delta.remove("echo");
        self.before = now;
        let micros = info::script_micros(&mut ctx.con).await?;
        self.last_micros = micros.saturating_sub(self.before_micros);
        self.before_micros = micros;
        Ok((delta, split))
    }
}

/// Server time spent in script calls per operation (commandstats `usec`).
fn script_time_row(
    monitored: bool,
    report: &mut Report,
    case: &str,
    subject: &str,
    micros: u64,
    per: u64,
) {
    if monitored {
        return;
    }
    let us = micros as f64 / per.max(1) as f64;
    eprintln!("  {subject:<22} {case:<22} {us:.1} us in scripts per op");
    report.add("commands", case, subject, "server us in scripts", vec![us]);
}

/// The rows of one operation in the commands scenario: its command counts in
/// the monitored pass, its server time in scripts in the other.
#[allow(clippy::too_many_arguments)]
fn operation_rows(
    monitored: bool,
    report: &mut Report,
    case: &str,
    subject: &str,
    per: u64,
    stats: &info::CommandCounts,
    split: &monitor::Split,
    micros: u64,
) {
    command_rows(monitored, report, case, subject, per, stats, split);
    script_time_row(monitored, report, case, subject, micros, per);
}

fn command_rows(
    monitored: bool,
    report: &mut Report,
    case: &str,
    subject: &str,
    per: u64,
    stats: &info::CommandCounts,
    split: &monitor::Split,
) {
    if !monitored {
        return;
    }
    const S: &str = "commands";
    let per_f = per.max(1) as f64;
    let total: u64 = stats.values().sum();
    let is_script = |name: &str| name.starts_with("eval") || name.starts_with("fcall");
    let scripts: u64 = split
        .client
        .iter()
        .filter(|(k, _)| is_script(k))
        .map(|(_, v)| v)
        .sum();
    let others: Vec<(&String, &u64)> = split.client.iter().filter(|(k, _)| !is_script(k)).collect();
    let other_total: u64 = others.iter().map(|(_, v)| **v).sum();
    let list = |items: Vec<(String, f64)>| {
        items
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    report.add(
        S,
        case,
        subject,
        "commands (commandstats)",
        vec![total as f64 / per_f],
    );
    report.note_last(list(info::per_operation(stats, per)));
    report.add(
        S,
        case,
        subject,
        "script calls",
        vec![scripts as f64 / per_f],
    );
    report.add(
        S,
        case,
        subject,
        "other client commands",
        vec![other_total as f64 / per_f],
    );
    if other_total > 0 {
        let items: info::CommandCounts = others.into_iter().map(|(k, v)| (k.clone(), *v)).collect();
        report.note_last(list(info::per_operation(&items, per)));
    }
    eprintln!(
        "  {subject:<22} {case:<22} {:.2} commands ({:.2} script calls, {:.2} other)",
        total as f64 / per_f,
        scripts as f64 / per_f,
        other_total as f64 / per_f
    );
}

/// The a2 command windows. With `monitored`, counts commands (MONITOR);
/// without, times the server's script calls (MONITOR would slow them).
async fn commands_a2(ctx: &mut Ctx, report: &mut Report, monitored: bool) -> Result<(), BoxError> {
    let writer = redis_store(ctx, "cw").await?;
    let ops = ctx.sizes.command_ops;
    let mut steps = scenarios::CommandSteps::new(writer.clone(), &ctx.tag("cmds", 0));
    // Scripts load on first use (NOSCRIPT, SCRIPT LOAD): keep that out.
    steps.warm_up().await?;
    let mut counter = Counter::start(ctx, monitored).await?;

    let n = steps.appends(ops).await?;
    let (append_stats, append_split) = counter.cut(ctx, None).await?;
    operation_rows(
        monitored,
        report,
        "per append",
        "a2 redis",
        n,
        &append_stats,
        &append_split,
        counter.last_micros,
    );

    let n = steps.claims().await?;
    let (stats, split) = counter.cut(ctx, None).await?;
    operation_rows(
        monitored,
        report,
        "per claimed event",
        "a2 redis",
        n,
        &stats,
        &split,
        counter.last_micros,
    );

    let n = steps.completes().await?;
    let (stats, split) = counter.cut(ctx, None).await?;
    operation_rows(
        monitored,
        report,
        "per completed event",
        "a2 redis",
        n,
        &stats,
        &split,
        counter.last_micros,
    );

    // The feed lives in a second instance; its connections are the ones
    // that appear while it is created and opened.
    let known = info::clients(&mut ctx.con).await?;
    let reader = redis_store(ctx, "cw").await?;
    steps.open_feed(&reader).await?;
    let reader_addrs: Vec<String> = info::clients(&mut ctx.con)
        .await?
        .into_iter()
        .filter(|c| !known.iter().any(|k| k.id == c.id))
        .map(|c| c.addr)
        .collect();
    let _ = counter.cut(ctx, None).await?;
    let n = steps.deliveries(ops).await?;
    let (stats, split) = counter.cut(ctx, Some(&reader_addrs)).await?;
    // commandstats cannot tell clients apart: take the writer's appends out
    // (as many as in the append window) and what is left is the feed's.
    let factor = n as f64 / ops.max(1) as f64;
    let stats: info::CommandCounts = stats
        .iter()
        .map(|(k, v)| {
            let minus = append_stats.get(k).map_or(0.0, |a| *a as f64 * factor);
            (k.clone(), (*v as f64 - minus).round().max(0.0) as u64)
        })
        .filter(|(_, v)| *v > 0)
        .collect();
    let in_script = split.minus_scaled(&append_split, factor).in_script;
    let split = monitor::Split {
        client: split.client,
        in_script,
    };
    steps.close_feed();
    command_rows(
        monitored,
        report,
        "per delivered event",
        "a2 redis",
        n,
        &stats,
        &split,
    );

    // The whole work cycle through the runtime, per processed event.
    let events = ops * 10;
    let cycle_store = redis_store(ctx, "cc").await?;
    let _ = counter.cut(ctx, None).await?;
    let tag = ctx.tag("cmds-cycle", 0);
    wiring::runtime_cycle(
        cycle_store.clone(),
        events,
        10,
        ctx.sizes.cycle_concurrency,
        &tag,
    )
    .await?;
    let (stats, split) = counter.cut(ctx, None).await?;
    operation_rows(
        monitored,
        report,
        "per processed event (runtime work cycle)",
        "a2 redis",
        events,
        &stats,
        &split,
        counter.last_micros,
    );
    cycle_store.close().await;
    if monitored {
        report.note(format!(
            "commands per delivered event: client commands counted from the feed instance's own {} \
         connection(s) only (MONITOR by address)",
            reader_addrs.len()
        ));
    }
    writer.close().await;
    reader.close().await;
    Ok(())
}

async fn commands_baselines(
    ctx: &mut Ctx,
    report: &mut Report,
    monitored: bool,
) -> Result<(), BoxError> {
    let ops = ctx.sizes.command_ops;
    let mut counter = Counter::start(ctx, monitored).await?;
    raw::evalsha_append(
        &ctx.con,
        CEILING_KEYS,
        1,
        1,
        ops,
        &ctx.tag("cmds-ceiling", 0),
    )
    .await?;
    let (stats, split) = counter.cut(ctx, None).await?;
    // The script load (SCRIPT LOAD) is outside the per-append figure.
    let mut stats = stats;
    stats.remove("script|load");
    let mut split = split;
    split.client.remove("script");
    operation_rows(
        monitored,
        report,
        "per append",
        "EVALSHA ceiling",
        ops,
        &stats,
        &split,
        counter.last_micros,
    );

    raw::consumer_group_cycle(&ctx.con, ops * 10, 10, 8, &ctx.tag("cmds-cg", 0)).await?;
    let (mut stats, mut split) = counter.cut(ctx, None).await?;
    // Setup and cleanup (XGROUP CREATE, DEL) are not part of the cycle.
    stats.remove("xgroup|create");
    stats.remove("del");
    split.client.remove("xgroup");
    split.client.remove("del");
    command_rows(
        monitored,
        report,
        "per processed event",
        "Redis consumer group",
        ops * 10,
        &stats,
        &split,
    );
    Ok(())
}

// ---------------------------------------------------------------- targets

fn append_case(batch: usize, tasks: usize) -> String {
    format!(
        "batch {batch}, {tasks} task{}",
        if tasks == 1 { "" } else { "s" }
    )
}

fn cycle_case(sizes: &Sizes) -> String {
    format!(
        "{} events, {} sessions, concurrency {}",
        sizes.cycle_events, sizes.cycle_sessions, sizes.cycle_concurrency
    )
}

fn bull_case(sizes: &Sizes) -> String {
    format!(
        "{} jobs, Worker concurrency {}",
        sizes.cycle_events, sizes.bullmq_concurrency
    )
}

fn live_case(sizes: &Sizes) -> String {
    format!(
        "{} events, 1 every {} ms",
        sizes.live_events, sizes.live_interval_ms
    )
}

fn targets(report: &mut Report, sizes: &Sizes) {
    report.target(
        "Redis work cycle >= 3x BullMQ jobs/s",
        report.value(
            "work cycle",
            &cycle_case(sizes),
            "a2 redis (runtime)",
            "events/s",
        ),
        report.value("work cycle", &bull_case(sizes), "BullMQ", "jobs/s"),
        Bound::AtLeast(3.0),
    );
    for batch in [1, 100] {
        let case = append_case(batch, 32);
        report.target(
            &format!("Redis append, {case} >= 60% of EVALSHA ceiling"),
            report.value("append", &case, "a2 redis", "events/s"),
            report.value("append", &case, "EVALSHA ceiling", "events/s"),
            Bound::AtLeast(0.6),
        );
    }
    report.target(
        "feed p99 <= 2x XREAD p99",
        report.value(
            "live latency",
            &live_case(sizes),
            "a2 redis feed (other instance)",
            "p99 ms",
        ),
        report.value(
            "live latency",
            &live_case(sizes),
            "XADD -> blocked XREAD",
            "p99 ms",
        ),
        Bound::AtMost(2.0),
    );
    report.target(
        "memory store >= 500 000 single-event appends/s, 1 task",
        report.value("append", &append_case(1, 1), "a2 memory", "events/s"),
        Some(500_000.0),
        Bound::AtLeast(1.0),
    );
}
