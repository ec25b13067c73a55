//! How the benchmark gets a2's stores and runtime. The one place that knows
//! their constructors.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use a2::redis::rest::{LiveMode, RestOptions};
use a2::redis::{RedisOptions, RedisStore};
use a2::runtime::{App, Context, HandlerError};
use a2::sqlite::{SqliteOptions, SqliteStore};
use a2::{NewEvent, Store};
use serde_json::json;

use crate::BoxError;

/// The a2 stores the benchmark measures. A new store is a variant here, a
/// constructor in [`crate::ctx::Ctx::open`], and an entry in the subject list
/// of each scenario that should run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `a2::MemoryStore`, in this process.
    Memory,
    /// `a2::redis::RedisStore` on the benchmark's `redis-server`.
    Redis,
    /// `a2::sqlite::SqliteStore` on a file in the run's temporary directory,
    /// with its default durability (WAL, `synchronous = FULL`).
    Sqlite,
    /// `a2::redis::RedisStore` over REST (the Upstash protocol) through the
    /// test gateway in front of the benchmark's `redis-server`, with live
    /// feeds over server-sent events.
    Rest,
    /// As [`Backend::Rest`], through a gateway without subscriptions, so
    /// live feeds fall back to polling.
    RestPolling,
    /// `a2::redis::RedisStore` on a Redis Cluster of three masters with a
    /// replica each (`redis+cluster://`), started on first use.
    Cluster,
    /// `a2::postgres::PostgresStore` on a throwaway Postgres server of the
    /// run (Debian's package), started on first use; a schema per name.
    Postgres,
}

/// How a store's appends are paced, which sets how many calls a case of the
/// append scenario is timed over (see [`crate::ctx::Sizes::append_calls`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// A round trip to a server per call.
    Network,
    /// Memory only: orders of magnitude more calls per second.
    InMemory,
    /// An fsync per commit: one task pays one per call, concurrent tasks
    /// share them.
    Fsync,
}

impl Backend {
    /// Every store, in the order `--fanout-child` names are listed.
    pub const ALL: [Backend; 7] = [
        Backend::Memory,
        Backend::Redis,
        Backend::Sqlite,
        Backend::Rest,
        Backend::RestPolling,
        Backend::Cluster,
        Backend::Postgres,
    ];

    /// The store's short name: what `--fanout-child` takes, and its subject
    /// after `a2 `.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Redis => "redis",
            Backend::Sqlite => "sqlite",
            Backend::Rest => "rest",
            Backend::RestPolling => "rest polling",
            Backend::Cluster => "redis cluster",
            Backend::Postgres => "postgres",
        }
    }

    /// The store named `name` (see [`Backend::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The subject its rows carry: `a2 memory`, `a2 redis`, `a2 sqlite`,
    /// `a2 rest`, `a2 rest polling`, `a2 redis cluster`.
    pub fn subject(self) -> String {
        format!("a2 {}", self.name())
    }

    /// Whether the store lives in this process: no server, no connections,
    /// no server CPU to measure.
    pub fn in_process(self) -> bool {
        matches!(self, Backend::Memory | Backend::Sqlite)
    }

    /// How its appends are paced.
    pub fn pace(self) -> Pace {
        match self {
            Backend::Memory => Pace::InMemory,
            Backend::Sqlite => Pace::Fsync,
            Backend::Redis
            | Backend::Rest
            | Backend::RestPolling
            | Backend::Cluster
            | Backend::Postgres => Pace::Network,
        }
    }
}

/// A fresh in-memory store.
pub fn memory_store() -> Result<Arc<dyn Store>, String> {
    Ok(Arc::new(a2::MemoryStore::new(a2::StoreOptions::default())))
}

/// A fresh Redis store instance on `url` with key prefix `prefix`.
pub async fn redis_store(url: &str, prefix: &str) -> Result<Arc<dyn Store>, String> {
    let options = RedisOptions::default().prefix(prefix);
    match RedisStore::connect(url, options).await {
        Ok(store) => Ok(Arc::new(store)),
        Err(e) => Err(format!("cannot connect the Redis store: {e}")),
    }
}

/// A Redis store instance over REST at the gateway `url`, with key prefix
/// `prefix`; its live feeds use `live`.
pub async fn rest_store(url: &str, prefix: &str, live: LiveMode) -> Result<Arc<dyn Store>, String> {
    let options = RedisOptions::default().prefix(prefix);
    match RedisStore::connect_rest(url, options, RestOptions::default().live(live)).await {
        Ok(store) => Ok(Arc::new(store)),
        Err(e) => Err(format!("cannot connect the REST store: {e}")),
    }
}

/// How often a polling REST store checks its watched sessions: the
/// default, what a user gets.
pub fn rest_poll_interval() -> Duration {
    RestOptions::default().poll_interval
}

/// A Postgres store instance on the database `url` names (its schema in
/// the URL), with the default pool.
pub async fn postgres_store(url: &str) -> Result<Arc<dyn Store>, String> {
    let options = a2::postgres::PostgresOptions::default();
    match a2::postgres::PostgresStore::connect(url, options, a2::StoreOptions::default()).await {
        Ok(store) => Ok(Arc::new(store)),
        Err(e) => Err(format!("cannot connect the Postgres store: {e}")),
    }
}

/// A SQLite store instance on the file at `path` (created when missing),
/// with the default options: WAL, `synchronous = FULL`, group commit.
pub fn sqlite_store(path: &std::path::Path) -> Result<Arc<dyn Store>, String> {
    match SqliteStore::open(path, SqliteOptions::default()) {
        Ok(store) => Ok(Arc::new(store)),
        Err(e) => Err(format!("cannot open the SQLite store: {e}")),
    }
}

/// The work cycle through the runtime: `events` single-event appends over
/// `sessions` sessions from `concurrency` tasks, each drained in-process by a
/// no-op handler; at most `concurrency` handlers run at once. Returns the
/// time from the first append until every event is processed.
pub async fn runtime_cycle(
    store: Arc<dyn Store>,
    events: u64,
    sessions: u64,
    concurrency: usize,
    tag: &str,
    retention: Option<a2::runtime::Retention>,
) -> Result<Duration, BoxError> {
    let app = no_op_app(store, concurrency, retention)?;
    let names: Arc<Vec<String>> = Arc::new(
        (0..sessions)
            .map(|s| format!("bench:cycle:{tag}:{s}"))
            .collect(),
    );
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut appenders = Vec::new();
    for _ in 0..concurrency {
        let (app, names, next) = (app.clone(), names.clone(), next.clone());
        appenders.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= events {
                    return Ok::<_, a2::Error>(());
                }
                let session = &names[(i % names.len() as u64) as usize];
                app.append(session, vec![NewEvent::new("bench", json!({ "n": i }))])
                    .await?;
            }
        }));
    }
    for a in appenders {
        a.await??;
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        app.idle().await;
        let stats = app.stats();
        if stats.completed >= events {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "only {} of {events} events completed within 600 s ({stats:?})",
                stats.completed
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    let stats = app.stats();
    app.shutdown(Duration::from_secs(5)).await;
    if stats.completed != events || stats.failed > 0 || stats.store_errors > 0 {
        return Err(format!("unexpected outcome counts: {stats:?}").into());
    }
    Ok(elapsed)
}

/// The work cycle's runtime: a no-op handler of `bench` events.
fn no_op_app(
    store: Arc<dyn Store>,
    concurrency: usize,
    retention: Option<a2::runtime::Retention>,
) -> Result<App, BoxError> {
    let mut builder = App::builder(store)
        .handler(
            "bench",
            |_ctx: Context, _payload: serde_json::Value| async { Ok::<(), HandlerError>(()) },
        )
        .concurrency(concurrency);
    if let Some(retention) = retention {
        builder = builder.retention(retention);
    }
    Ok(builder.build()?)
}

/// Runs the work cycle's no-op handler on `store` until no session has
/// pending events (what a scenario appended outside a timed cycle).
pub async fn drain(store: Arc<dyn Store>, concurrency: usize) -> Result<(), BoxError> {
    let app = no_op_app(store.clone(), concurrency, None)?;
    // The worker loop finds the sessions with pending events (PS1).
    let worker = {
        let app = app.clone();
        tokio::spawn(async move { app.run_worker().await })
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let outcome = loop {
        app.idle().await;
        let page = a2::PageRequest {
            cursor: None,
            limit: 1,
        };
        match store.pending_sessions(page).await {
            Ok(page) if page.sessions.is_empty() => break Ok(()),
            Ok(_) if Instant::now() > deadline => {
                break Err(format!("pending events left after 600 s ({:?})", app.stats()).into());
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(1)).await,
            Err(e) => break Err(e.into()),
        }
    };
    app.shutdown(Duration::from_secs(5)).await;
    let _ = worker.await;
    outcome
}
