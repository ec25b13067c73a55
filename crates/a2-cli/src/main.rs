//! The `a2` command-line tool.
//!
//! - `a2 demo`: a small chat agent on a few sessions, with a live feed and a
//!   summary (memory store by default; `--store sqlite:PATH` keeps the
//!   sessions, and a second run continues them).
//! - `a2 worker --store URL`: the demo's handlers as a standalone worker.
//! - `a2 inspect --store URL [SESSION]`: sessions, or one session's events
//!   (`--server URL` reads them from a running `a2 serve`, with each
//!   session's live followers there).
//! - `a2 revive --store URL SESSION INDEX`: makes a dead letter pending again.
//! - `a2 cancel --store URL SESSION INDEX`: cancels an event; a handler
//!   running it is told to stop.
//! - `a2 close --store URL SESSION`: closes a session; its log is final.
//! - `a2 expire --store URL SESSION --ttl-ms MS | --at MS | --never`: sets
//!   when a session expires.
//! - `a2 trim --store URL SESSION THROUGH`: removes a session's settled
//!   events up to an index.
//! - `a2 serve [--store URL] [--listen ADDR]`: the HTTP API, live feeds,
//!   remote workers, web inspector and metrics (docs/http.md).
//!
//! The store is one URL everywhere (see `store`): `memory`, `sqlite:PATH`,
//! `redis://HOST:PORT`, `rediss://…` (TLS), `https://:TOKEN@HOST` (Redis over
//! REST, docs/rest.md), `postgres://USER:PASSWORD@HOST/DATABASE`
//! (docs/postgres-layout.md). `--redis URL` is kept as another name of
//! `--store`.

mod agent;
mod demo;
mod inspect;
mod lifecycle;
mod out;
mod serve;
mod store;
mod style;
mod worker;

use std::time::Duration;

use clap::{Parser, Subcommand};

use out::tell;

/// mimalloc: small blocks come and go on every request of `a2 serve`
/// (headers, JSON values, events), and its thread-local pages cost half
/// the instructions of the system allocator's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use store::StoreUrl;

#[derive(Parser)]
#[command(
    name = "a2",
    version,
    about = "Durable sessions: a demo, workers, inspection and an HTTP server",
    after_help = "Stores: memory, sqlite:PATH, redis://HOST:PORT, rediss://…, \
redis+cluster://H:P,H:P, redis+sentinel://H:P,…/SERVICE, https://:TOKEN@HOST (Redis over REST), \
postgres://USER:PASSWORD@HOST/DATABASE.\n\n\
Start with:\n  a2 demo\n  a2 serve            (then open http://127.0.0.1:7373/)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the demo chat agent and print its live feed and a summary.
    #[command(
        after_help = "Examples:\n  a2 demo\n  a2 demo --store sqlite:demo.db   \
(run it twice: the second run continues the sessions)\n  \
a2 demo --store redis://127.0.0.1:6379"
    )]
    Demo {
        /// The store: memory, sqlite:PATH, redis://HOST:PORT, rediss://…, redis+cluster://H:P,H:P, redis+sentinel://H:P,…/SERVICE or https://… (REST).
        #[arg(
            long,
            value_name = "URL",
            visible_alias = "redis",
            default_value = "memory"
        )]
        store: String,
        /// Key prefix on Redis (the other stores have none).
        #[arg(long = "key-prefix", value_name = "PREFIX", default_value = "a2")]
        key_prefix: String,
        /// Pause between streamed reply chunks, in milliseconds.
        #[arg(long, default_value_t = 40)]
        think_ms: u64,
    },
    /// Run the demo application's handlers until SIGINT/SIGTERM.
    #[command(after_help = "Examples:\n  a2 worker --store sqlite:a2.db\n  \
a2 worker --store redis://127.0.0.1:6379 --concurrency 64 --quiet")]
    Worker {
        /// The store, shared with the processes that append:
        /// sqlite:PATH, redis://HOST:PORT, rediss://…, redis+cluster://H:P,H:P, redis+sentinel://H:P,…/SERVICE or https://… (REST).
        #[arg(long, value_name = "URL", visible_alias = "redis")]
        store: String,
        /// Key prefix on Redis (the other stores have none).
        #[arg(long = "key-prefix", value_name = "PREFIX", default_value = "a2")]
        key_prefix: String,
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
        /// How long a handler whose event was cancelled may go on after it
        /// was told, before it is dropped, in milliseconds.
        #[arg(long, default_value_t = 5_000)]
        cancel_grace_ms: u64,
        /// Seconds between the one-line summaries of what the worker did
        /// (none while it does nothing).
        #[arg(long, default_value_t = 10)]
        report_secs: u64,
        /// Only warnings and errors: no start, summary or retry lines.
        #[arg(long, short)]
        quiet: bool,
    },
    /// List sessions with their counters, or a session's events: from a
    /// store, or from a running `a2 serve` (which also shows how many live
    /// feeds follow each session there).
    #[command(
        group(clap::ArgGroup::new("source").args(["store", "server"])),
        after_help = "Examples:\n  a2 inspect --store sqlite:a2.db\n  \
a2 inspect --store sqlite:a2.db alice\n  a2 inspect --server http://127.0.0.1:7373 --prefix chat-"
    )]
    Inspect {
        /// The store: sqlite:PATH, redis://HOST:PORT, rediss://…, redis+cluster://H:P,H:P, redis+sentinel://H:P,…/SERVICE or https://… (REST). Default: sqlite:a2.db, as `a2 serve`.
        #[arg(long, value_name = "URL", visible_alias = "redis")]
        store: Option<String>,
        /// A running `a2 serve`, e.g. http://127.0.0.1:8080, instead of a store.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
        /// The bearer token for --server when it requires one (read scope).
        #[arg(long, env = "A2_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Key prefix on Redis (the other stores have none).
        #[arg(long = "key-prefix", value_name = "PREFIX", default_value = "a2")]
        key_prefix: String,
        /// Only sessions whose id starts with this (as `GET
        /// /v1/sessions?prefix=` filters them).
        #[arg(long, value_name = "PREFIX", visible_alias = "sessions")]
        prefix: Option<String>,
        /// Show this session's events.
        session: Option<String>,
    },
    /// Make a dead-lettered event pending again (failures reset), so
    /// workers run it anew and its lane moves on behind it.
    #[command(after_help = "Example:\n  a2 revive --store sqlite:a2.db alice 7   \
(see the dead letters with: a2 inspect --store sqlite:a2.db alice)")]
    Revive {
        /// The store: sqlite:PATH, redis://HOST:PORT, rediss://…, redis+cluster://H:P,H:P, redis+sentinel://H:P,…/SERVICE or https://… (REST).
        #[arg(long, value_name = "URL", visible_alias = "redis")]
        store: String,
        /// Key prefix on Redis (the other stores have none).
        #[arg(long = "key-prefix", value_name = "PREFIX", default_value = "a2")]
        key_prefix: String,
        /// The session.
        session: String,
        /// The dead-lettered event's index.
        index: u64,
    },
    /// Cancel an event: pending, delayed, running or dead-lettered, it is
    /// settled as cancelled and its lane moves on; a handler running it, in
    /// any process, is told to stop.
    #[command(
        after_help = "Example:\n  a2 cancel --store sqlite:a2.db alice 7 --reason \"the user pressed stop\""
    )]
    Cancel {
        /// The store: sqlite:PATH, redis://HOST:PORT, rediss://…, redis+cluster://H:P,H:P, redis+sentinel://H:P,…/SERVICE or https://… (REST).
        #[arg(long, value_name = "URL", visible_alias = "redis")]
        store: String,
        /// Key prefix on Redis (the other stores have none).
        #[arg(long = "key-prefix", value_name = "PREFIX", default_value = "a2")]
        key_prefix: String,
        /// The session.
        session: String,
        /// The event's index.
        index: u64,
        /// Why, kept with the event (at most 1 024 bytes).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Close a session: later appends are refused, pending events still
    /// run, live feeds end after the last event.
    #[command(after_help = "Example:\n  a2 close --store sqlite:a2.db alice")]
    Close {
        /// The store: sqlite:PATH, redis://HOST:PORT, rediss://…, redis+cluster://H:P,H:P, redis+sentinel://H:P,…/SERVICE or https://… (REST).
        #[arg(long, value_name = "URL", visible_alias = "redis")]
        store: String,
        /// Key prefix on Redis (the other stores have none).
        #[arg(long = "key-prefix", value_name = "PREFIX", default_value = "a2")]
        key_prefix: String,
        /// The session.
        session: String,
    },
    /// Remove a session's settled events up to an index; later events keep
    /// their indexes. Refused (nothing removed) when an event in the range
    /// is pending or dead-lettered, or when a reducer's snapshot is older
    /// than the trim point (its state could no longer be read).
    #[command(after_help = "Example:\n  a2 trim --store sqlite:a2.db alice 1000   \
(see the first retained index with: a2 inspect --store sqlite:a2.db)")]
    Trim {
        /// The store: sqlite:PATH, redis://HOST:PORT, rediss://…, redis+cluster://H:P,H:P, redis+sentinel://H:P,…/SERVICE or https://… (REST).
        #[arg(long, value_name = "URL", visible_alias = "redis")]
        store: String,
        /// Key prefix on Redis (the other stores have none).
        #[arg(long = "key-prefix", value_name = "PREFIX", default_value = "a2")]
        key_prefix: String,
        /// The session.
        session: String,
        /// The last index to remove.
        through: u64,
        /// Trim even when some reducers' snapshots are older than the trim
        /// point: their state can no longer be read afterwards (without
        /// it the trim is refused, naming them).
        #[arg(long)]
        allow_stale_snapshots: bool,
    },
    /// Set when a session expires: a sliding ttl (that long after its last
    /// write), a time, or never. At its deadline the session is gone.
    #[command(
        after_help = "Examples:\n  a2 expire --store sqlite:a2.db alice --ttl-ms 86400000\n  \
a2 expire --store sqlite:a2.db alice --never"
    )]
    Expire {
        /// The store: sqlite:PATH, redis://HOST:PORT, rediss://…, redis+cluster://H:P,H:P, redis+sentinel://H:P,…/SERVICE or https://… (REST).
        #[arg(long, value_name = "URL", visible_alias = "redis")]
        store: String,
        /// Key prefix on Redis (the other stores have none).
        #[arg(long = "key-prefix", value_name = "PREFIX", default_value = "a2")]
        key_prefix: String,
        /// The session.
        session: String,
        /// Expire this many milliseconds after the session's last write.
        #[arg(long, value_name = "MS")]
        ttl_ms: Option<u64>,
        /// Expire at this time (milliseconds since the epoch) at the latest.
        #[arg(long, value_name = "MS")]
        at: Option<i64>,
        /// Keep the session until it is deleted.
        #[arg(long, conflicts_with_all = ["ttl_ms", "at"])]
        never: bool,
    },
    /// Branch a session: a new session TARGET holding SOURCE's events up to
    /// INDEX (with their processing state, leases released, and snapshots),
    /// which then goes its own way. SOURCE is not changed.
    #[command(
        after_help = "Example:\n  a2 fork --store sqlite:a2.db chat 12 chat-retry   \
(see the indexes with: a2 inspect --store sqlite:a2.db chat)"
    )]
    Fork {
        /// The store: sqlite:PATH, redis://HOST:PORT, rediss://…, redis+cluster://H:P,H:P, redis+sentinel://H:P,…/SERVICE or https://… (REST).
        #[arg(long, value_name = "URL", visible_alias = "redis")]
        store: String,
        /// Key prefix on Redis (the other stores have none).
        #[arg(long = "key-prefix", value_name = "PREFIX", default_value = "a2")]
        key_prefix: String,
        /// The session to branch from.
        source: String,
        /// The last index the new session takes from it.
        index: u64,
        /// The new session.
        target: String,
    },
    /// Serve the store over HTTP until SIGINT/SIGTERM (docs/http.md).
    #[command(after_help = "Examples:\n  a2 serve                                  \
(SQLite a2.db here, http://127.0.0.1:7373/)\n  \
a2 serve --store redis://127.0.0.1:6379 --listen 0.0.0.0:8080 --tokens tokens.txt")]
    Serve {
        /// The store: sqlite:PATH, memory, redis://HOST:PORT, rediss://…, redis+cluster://H:P,H:P, redis+sentinel://H:P,…/SERVICE or https://… (REST).
        #[arg(long, value_name = "URL", default_value = DEFAULT_STORE)]
        store: String,
        /// Key prefix on Redis (the other stores have none).
        #[arg(long = "key-prefix", value_name = "PREFIX", default_value = "a2")]
        key_prefix: String,
        /// Address to listen on. Without tokens only a loopback address is allowed.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7373")]
        listen: String,
        /// Bearer tokens with scopes, one `TOKEN SCOPE[,SCOPE…]` a line
        /// (default: the A2_TOKENS variable, same format).
        #[arg(long, value_name = "FILE")]
        tokens: Option<std::path::PathBuf>,
        /// An origin whose pages may call the API (CORS); repeatable; `*` for any.
        #[arg(long = "cors-origin", value_name = "ORIGIN")]
        cors_origins: Vec<String>,
        /// Largest request body, in bytes.
        #[arg(long, default_value_t = 4 * 1024 * 1024)]
        max_body_bytes: usize,
        /// Most events in one append or completion.
        #[arg(long, default_value_t = 1_000)]
        max_batch: usize,
        /// Largest event payload, in bytes of compact JSON.
        #[arg(long, default_value_t = 1024 * 1024)]
        max_payload_bytes: usize,
        /// Sessions created without an expiry of their own expire this long
        /// after their last write (default: kept until deleted).
        #[arg(long, value_name = "MS")]
        session_ttl_ms: Option<u64>,
        /// How long a Durable Streams long-poll waits for data before it
        /// answers 204, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 10_000)]
        long_poll_ms: u64,
        /// On Redis: how often the server refreshes, in one request, the
        /// marks that make followed sessions publish wake-ups; a crashed
        /// server's marks lapse after three periods (docs/rest.md).
        #[arg(long, value_name = "MS", default_value_t = 2_000)]
        follow_refresh_ms: u64,
    },
}

/// A store other processes share: a worker or an inspection of the memory
/// store of a process of its own would see nothing.
fn shared(url: &str, command: &str) -> Result<StoreUrl, String> {
    let parsed = StoreUrl::parse(url)?;
    if !parsed.is_shared() {
        return Err(format!(
            "a2 {command} needs a store other processes share: sqlite:PATH or redis://HOST:PORT"
        ));
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // A worker tells what it does (starts, outages, failures, a summary
    // every few seconds) unless --quiet; the other commands print their
    // own output and log only errors. RUST_LOG overrides either.
    let default_filter = match &cli.command {
        Command::Worker { quiet: false, .. } => "warn,a2=info,a2_runtime=info",
        Command::Worker { quiet: true, .. } => "warn",
        _ => "error",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        // Colour only on a terminal: logs written to a file or a pipe
        // carry no escape codes.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // Bad input: the message says what is wrong and what to do; the
            // contract's code name ("invalid argument") adds nothing here.
            match error.downcast_ref::<a2::Error>() {
                Some(a2::Error::InvalidArgument { message, .. }) => tell!("a2: {message}"),
                _ => tell!("a2: {error}"),
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// The store `a2 serve` and `a2 inspect` use when none is given: the
/// SQLite file `a2.db` in the current folder.
const DEFAULT_STORE: &str = "sqlite:a2.db";

async fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {
        Command::Demo {
            store,
            key_prefix,
            think_ms,
        } => demo_command(&store, &key_prefix, think_ms).await,
        Command::Worker {
            store,
            key_prefix,
            holder,
            concurrency,
            lease_ms,
            poll_ms,
            think_ms,
            grace_ms,
            cancel_grace_ms,
            report_secs,
            quiet,
        } => {
            let args = worker::WorkerArgs {
                holder,
                concurrency,
                lease: Duration::from_millis(lease_ms.max(3)),
                poll: Duration::from_millis(poll_ms.max(1)),
                think: Duration::from_millis(think_ms),
                grace: Duration::from_millis(grace_ms),
                cancel_grace: Duration::from_millis(cancel_grace_ms),
                report: Duration::from_secs(report_secs.max(1)),
                quiet,
            };
            let store = shared(&store, "worker")?.open(&key_prefix).await?;
            let result = worker::run(store.clone(), args).await;
            store.close().await;
            result
        }
        Command::Inspect {
            store,
            server,
            token,
            key_prefix,
            prefix,
            session,
        } => {
            if let Some(url) = server {
                let source = inspect::Source::Server(inspect::Server::new(&url, token)?);
                return inspect::run(&source, session.as_deref(), prefix).await;
            }
            // The store `a2 serve` uses by default: the SQLite file a2.db here.
            let store = store.unwrap_or_else(|| DEFAULT_STORE.to_owned());
            with_existing(&store, &key_prefix, "inspect", async |store| {
                let source = inspect::Source::Store(store);
                inspect::run(&source, session.as_deref(), prefix).await
            })
            .await
        }
        Command::Revive {
            store,
            key_prefix,
            session,
            index,
        } => {
            with_existing(&store, &key_prefix, "revive", async |store| {
                lifecycle::revive(store, &session, index).await
            })
            .await
        }
        Command::Cancel {
            store,
            key_prefix,
            session,
            index,
            reason,
        } => {
            with_existing(&store, &key_prefix, "cancel", async |store| {
                lifecycle::cancel(store, &session, index, reason).await
            })
            .await
        }
        Command::Close {
            store,
            key_prefix,
            session,
        } => {
            with_existing(&store, &key_prefix, "close", async |store| {
                lifecycle::close(store, &session).await
            })
            .await
        }
        Command::Trim {
            store,
            key_prefix,
            session,
            through,
            allow_stale_snapshots,
        } => {
            with_existing(&store, &key_prefix, "trim", async |store| {
                lifecycle::trim(store, &session, through, allow_stale_snapshots).await
            })
            .await
        }
        Command::Fork {
            store,
            key_prefix,
            source,
            index,
            target,
        } => {
            with_existing(&store, &key_prefix, "fork", async |store| {
                lifecycle::fork(store, &source, index, &target).await
            })
            .await
        }
        Command::Serve {
            store,
            key_prefix,
            listen,
            tokens,
            cors_origins,
            max_body_bytes,
            max_batch,
            max_payload_bytes,
            session_ttl_ms,
            long_poll_ms,
            follow_refresh_ms,
        } => {
            serve::run(serve::ServeArgs {
                store,
                key_prefix,
                listen,
                tokens,
                cors_origins,
                max_body_bytes,
                max_batch,
                max_payload_bytes,
                session_ttl_ms,
                long_poll_ms,
                follow_refresh_ms,
            })
            .await
        }
        Command::Expire {
            store,
            key_prefix,
            session,
            ttl_ms,
            at,
            never,
        } => {
            if ttl_ms.is_none() && at.is_none() && !never {
                return Err("give --ttl-ms MS, --at MS or --never".into());
            }
            let expiry = a2::Expiry {
                ttl_ms,
                expires_at: at,
            };
            with_existing(&store, &key_prefix, "expire", async |store| {
                lifecycle::expire(store, &session, expiry).await
            })
            .await
        }
    }
}

/// `a2 demo`: the demo application on the store at `store`.
async fn demo_command(
    store: &str,
    prefix: &str,
    think_ms: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let url = StoreUrl::parse(store)?;
    let session_prefix = match url {
        // On a server each run gets its own sessions, so runs of several
        // people on one server never mix.
        StoreUrl::Redis(_) | StoreUrl::Postgres(_) => {
            let run = uuid::Uuid::new_v4().simple().to_string();
            format!("demo-{}/", &run[..8])
        }
        // A database file is the user's own: a second run continues the
        // sessions of the first.
        StoreUrl::Memory | StoreUrl::Sqlite(_) => String::new(),
    };
    let store = url.open(prefix).await?;
    let args = demo::DemoArgs {
        think: Duration::from_millis(think_ms),
        prefix: session_prefix,
    };
    let result = demo::run(store.clone(), args).await;
    store.close().await;
    result
}

/// `url`, unless it names a SQLite file that does not exist: looking at a
/// store must not create an empty database by mistake.
/// Opens the existing shared store at `url` for `a2 {command}`, runs `work`
/// on it, and closes the store whatever `work` answered.
async fn with_existing(
    url: &str,
    prefix: &str,
    command: &str,
    work: impl AsyncFnOnce(&dyn a2::Store) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let store = existing(shared(url, command)?)?.open(prefix).await?;
    let result = work(store.as_ref()).await;
    store.close().await;
    result
}

fn existing(url: StoreUrl) -> Result<StoreUrl, Box<dyn std::error::Error>> {
    if let StoreUrl::Sqlite(path) = &url
        && !path.exists()
    {
        return Err(format!("no SQLite database at {}", path.display()).into());
    }
    Ok(url)
}
