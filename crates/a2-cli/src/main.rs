//! The `a2` command-line tool.
//!
//! - `a2 demo`: a small chat agent on a few sessions, with a live feed and a
//!   summary (memory store by default, `--redis URL` for Redis).
//! - `a2 worker --redis URL`: the demo's handlers as a standalone worker.
//! - `a2 inspect --redis URL [SESSION]`: sessions, or one session's events.

mod agent;
mod demo;
mod inspect;
mod style;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use a2::{MemoryStore, Store, StoreOptions};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "a2",
    version,
    about = "Durable sessions: demo, worker and inspection tool"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the demo chat agent and print its live feed and a summary.
    Demo {
        /// Use the Redis store at this URL instead of the in-memory store.
        #[arg(long, value_name = "URL")]
        redis: Option<String>,
        /// Key prefix on Redis.
        #[arg(long, default_value = "a2")]
        prefix: String,
        /// Pause between streamed reply chunks, in milliseconds.
        #[arg(long, default_value_t = 40)]
        think_ms: u64,
    },
    /// Run the demo application's handlers until SIGINT/SIGTERM.
    Worker {
        /// The Redis store's URL.
        #[arg(long, value_name = "URL")]
        redis: String,
        /// Key prefix on Redis.
        #[arg(long, default_value = "a2")]
        prefix: String,
        /// Lease holder id (default: random).
        #[arg(long)]
        holder: Option<String>,
        /// Handlers running at once.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// Lease ttl in milliseconds.
        #[arg(long, default_value_t = 30_000)]
        lease_ms: u64,
        /// How often to look for pending sessions, in milliseconds.
        #[arg(long, default_value_t = 1_000)]
        poll_ms: u64,
        /// Pause between streamed reply chunks, in milliseconds.
        #[arg(long, default_value_t = 40)]
        think_ms: u64,
        /// How long a shutdown waits for running handlers, in milliseconds.
        #[arg(long, default_value_t = 10_000)]
        grace_ms: u64,
    },
    /// List sessions with their counters, or a session's events.
    Inspect {
        /// The Redis store's URL.
        #[arg(long, value_name = "URL")]
        redis: String,
        /// Key prefix on Redis.
        #[arg(long, default_value = "a2")]
        prefix: String,
        /// Only sessions whose id starts with this.
        #[arg(long)]
        sessions: Option<String>,
        /// Show this session's events.
        session: Option<String>,
    },
}

async fn redis_store(
    url: &str,
    prefix: &str,
) -> Result<Arc<dyn Store>, Box<dyn std::error::Error>> {
    let options = a2::redis::RedisOptions::default().prefix(prefix);
    let store = a2::redis::RedisStore::connect(url, options)
        .await
        .map_err(|e| format!("cannot use the Redis store at {url}: {e}"))?;
    Ok(Arc::new(store))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("a2: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {
        Command::Demo {
            redis,
            prefix,
            think_ms,
        } => {
            let (store, session_prefix): (Arc<dyn Store>, String) = match redis {
                None => (
                    Arc::new(MemoryStore::new(StoreOptions::default())),
                    String::new(),
                ),
                Some(url) => {
                    // Each run gets its own sessions, so runs never mix.
                    let run = uuid::Uuid::new_v4().simple().to_string();
                    (
                        redis_store(&url, &prefix).await?,
                        format!("demo-{}/", &run[..8]),
                    )
                }
            };
            let args = demo::DemoArgs {
                think: Duration::from_millis(think_ms),
                prefix: session_prefix,
            };
            let result = demo::run(store.clone(), args).await;
            store.close().await;
            result
        }
        Command::Worker {
            redis,
            prefix,
            holder,
            concurrency,
            lease_ms,
            poll_ms,
            think_ms,
            grace_ms,
        } => {
            let store = redis_store(&redis, &prefix).await?;
            let args = worker::WorkerArgs {
                holder,
                concurrency,
                lease: Duration::from_millis(lease_ms.max(3)),
                poll: Duration::from_millis(poll_ms.max(1)),
                think: Duration::from_millis(think_ms),
                grace: Duration::from_millis(grace_ms),
            };
            let result = worker::run(store.clone(), args).await;
            store.close().await;
            result
        }
        Command::Inspect {
            redis,
            prefix,
            sessions,
            session,
        } => {
            let store = redis_store(&redis, &prefix).await?;
            let result = inspect::run(store.as_ref(), session.as_deref(), sessions).await;
            store.close().await;
            result
        }
    }
}
