//! `a2-bench`: a2 on the memory, Redis (RESP and REST) and SQLite stores,
//! side by side with what its users would pick instead (raw Redis streams,
//! BullMQ) and with what Redis and SQLite themselves can do (one EVALSHA per
//! write, group-committed INSERTs), all measured in the same run against a
//! `redis-server` it starts itself.
//!
//! Run with `cargo run -p a2-bench --release` (add `-- --json` for JSON,
//! `-- --quick` for the smoke mode the test suite runs). The table goes to
//! stdout, progress to stderr.
//!
//! # Layout
//! - `main` (this file): the flags, the run loop, the report's header.
//! - `ctx`: what every scenario gets: sizes, the server, its stores.
//! - `scenarios`: one module per scenario (`append`, `cycle`, `live`,
//!   `fanout`, `commands`, `read`, `serve`), each listing its subjects in
//!   one place.
//! - `targets`: the ratios a full run is judged by.
//! - `a2_side`: what a2 does in each scenario, against `Arc<dyn Store>`.
//! - `raw`: the raw-Redis baselines (EVALSHA ceiling, consumer group, XREAD).
//! - `raw_sqlite`: the raw `rusqlite` baselines (group-committed INSERTs, a
//!   read of the store's rows without decoding them).
//! - `bullmq`: the BullMQ baseline, through node.
//! - `wiring`: the stores measured (`Backend`), their constructors, the runtime.
//! - `server`: starts and stops the private `redis-server`.
//! - `info`, `monitor`: commandstats, CLIENT LIST, SLOWLOG, MONITOR, RSS.
//! - `load`: the serve scenario's load client (hyper, one connection per client).
//! - `stats`, `report`: medians, percentiles, the table and the JSON.

mod a2_side;
mod awa_side;
mod bullmq;
mod ctx;
mod info;
mod load;
mod monitor;
mod raw;
mod raw_postgres;
mod raw_sqlite;
mod report;
mod scenarios;
mod server;
mod stats;
mod targets;
mod wiring;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::ctx::{Ctx, Sizes};
use crate::report::Report;
use crate::server::RedisServer;
use crate::wiring::Backend;

/// The allocator of the `a2` binary, so the serve child (this binary)
/// runs `a2 serve` as shipped. The client side of every subject shares it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Errors of the benchmark's own plumbing.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
    /// Only these scenarios (comma-separated: append, cycle, live, idle,
    /// fanout, commands, read, serve, followers, retention, fork, cancel,
    /// delay, scale).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Only these subjects of the append, work-cycle, live-latency, read, scale
    /// and Durable Streams scenarios, for profiling one of them
    /// (comma-separated: "a2 memory", "a2 redis", "a2 sqlite", "a2 rest",
    /// "a2 rest polling", "EVALSHA ceiling", "raw rusqlite", "raw rusqlite
    /// commit at the same pace", "Redis consumer group", "XADD -> blocked
    /// XREAD", "a2 memory over HTTP", "durable-streams-server memory",
    /// "@durable-streams/server memory", …).
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
    /// Internal: serve one store (`memory` or `sqlite`) over HTTP in this
    /// fresh process, for the followers scenario, until stdin closes.
    #[arg(long, hide = true)]
    serve_child: Option<String>,
    /// Internal: the SQLite file a `--serve-child` serves.
    #[arg(long, hide = true)]
    serve_db: Option<PathBuf>,
    /// Internal: follow the idle scenario's killed-follower sessions under
    /// this key prefix on `--redis-url`, until killed.
    #[arg(long, hide = true)]
    follow_child: Option<String>,
    /// Internal: run the cancel scenario's worker on this SQLite file in
    /// this process, until stdin closes.
    #[arg(long, hide = true)]
    cancel_child: Option<PathBuf>,
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

async fn run(args: Args) -> Result<(), BoxError> {
    if let Some(prefix) = &args.follow_child {
        let url = args
            .redis_url
            .as_deref()
            .ok_or("--follow-child needs --redis-url")?;
        return scenarios::lapse::child(url, prefix).await;
    }
    if let Some(db) = &args.cancel_child {
        return scenarios::cancel::child(db).await;
    }
    if let Some(name) = &args.serve_child {
        let backend = Backend::from_name(name)
            .ok_or_else(|| format!("--serve-child takes a store's name, not {name:?}"))?;
        let db = args
            .serve_db
            .clone()
            .unwrap_or_else(|| PathBuf::from("a2.db"));
        return scenarios::followers::serve_child(backend, &db).await;
    }
    let sizes = if args.quick {
        Sizes::quick(args.rounds)
    } else {
        Sizes::full(args.rounds)
    };
    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    let fanout_child = match &args.fanout_child {
        Some(name) => Some(
            Backend::from_name(name)
                .ok_or_else(|| format!("--fanout-child takes a store's name, not {name:?}"))?,
        ),
        None => None,
    };

    let (server, url) = match &args.redis_url {
        Some(url) if fanout_child.is_some() => (None, url.clone()),
        _ => {
            eprintln!("a2-bench: starting {}", args.redis_server.display());
            let server = RedisServer::start(&args.redis_server)?;
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
    let run_id = match fanout_child {
        Some(_) => format!("{}c{}", std::process::id(), args.child_round),
        None => format!("{}", std::process::id()),
    };

    let mut report = Report::default();
    let mut ctx = Ctx {
        sizes,
        quick: args.quick,
        bullmq: !args.no_bullmq,
        redis_bin: args.redis_server.clone(),
        url,
        port,
        server,
        client,
        con,
        run_id,
        subjects: args.subjects.clone(),
        sqlite_dir: sqlite_dir()?,
        rest_gateway: Default::default(),
        polling_gateway: Default::default(),
        cluster: Default::default(),
        postgres: Default::default(),
    };
    if let Some(backend) = fanout_child {
        scenarios::fanout::child(&mut ctx, &mut report, backend).await;
        println!("{}", report.to_json());
        return Ok(());
    }
    meta(&mut report, &args, &ctx.sizes, ctx.server.as_ref());
    let _ = info::take_slowlog(&mut ctx.con).await;

    let started = Instant::now();
    for name in scenarios::ALL {
        if wanted(name) {
            scenarios::run(name, &mut ctx, &mut report).await;
        }
    }
    if !ctx.quick && args.only.is_empty() {
        targets::add(&mut report, &ctx.sizes);
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

fn meta(report: &mut Report, args: &Args, sizes: &Sizes, server: Option<&RedisServer>) {
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

/// A fresh directory for the run's SQLite files, removed when dropped:
/// beside the binary (in the target directory, on the disk the project is
/// built on, where an fsync costs what it costs a user, whereas `/tmp` may
/// be a tmpfs), else in the system's temporary directory.
fn sqlite_dir() -> std::io::Result<tempfile::TempDir> {
    let builder = tempfile::Builder::new().prefix("a2-bench-sqlite-").clone();
    let beside_binary = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.to_path_buf()))
        .and_then(|dir| builder.tempdir_in(dir).ok());
    match beside_binary {
        Some(dir) => Ok(dir),
        None => builder.tempdir(),
    }
}

/// The first three fields of /proc/loadavg (1, 5 and 15 minutes).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}
