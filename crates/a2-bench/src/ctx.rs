//! What every scenario gets: the sizes of the run, the private server, a
//! connection to it, and the stores to measure.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use a2::Store;
use a2::redis::rest::LiveMode;
use a2_redis::testing::cluster::RedisCluster;
use a2_redis::testing::gateway::{Gateway, GatewayOptions};
use redis::aio::ConnectionManager;

use crate::server::RedisServer;
use crate::wiring::{self, Backend, Pace};

/// Sizes of one run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sizes {
    pub rounds: usize,
    pub heavy_rounds: usize,
    pub redis_calls_batch1: u64,
    pub redis_calls_batch100: u64,
    pub memory_calls_batch1: u64,
    pub memory_calls_batch100: u64,
    /// Commits each task of the SQLite cases (store and raw baseline) waits
    /// for: one task makes this many calls, 32 tasks 32 times as many
    /// (their calls share commits).
    pub sqlite_commits_batch1: u64,
    pub sqlite_commits_batch100: u64,
    pub cycle_events: u64,
    pub cycle_sessions: u64,
    pub cycle_concurrency: usize,
    pub bullmq_concurrency: usize,
    pub live_events: u64,
    pub live_interval_ms: u64,
    pub fanout_feeds: usize,
    pub fanout_sessions: usize,
    pub command_ops: u64,
    /// The length of the session the read scenario reads.
    pub read_events: u64,
    /// Sessions the scale scenario's stores hold (the first is the active
    /// ones alone).
    pub scale_sessions: [u64; 3],
    /// Events the scale scenario's stores hold before its rounds (the
    /// first is none).
    pub scale_events: [u64; 3],
    /// Single-event appends in each round of the scale scenario's append
    /// case.
    pub scale_appends: u64,
}

impl Sizes {
    pub fn full(rounds: Option<usize>) -> Self {
        let rounds = rounds.unwrap_or(5).max(1);
        Self {
            rounds,
            heavy_rounds: rounds.min(3),
            redis_calls_batch1: 20_000,
            redis_calls_batch100: 640,
            memory_calls_batch1: 500_000,
            memory_calls_batch100: 6_400,
            sqlite_commits_batch1: 500,
            sqlite_commits_batch100: 20,
            cycle_events: 20_000,
            cycle_sessions: 100,
            cycle_concurrency: 64,
            bullmq_concurrency: 50,
            live_events: 2_000,
            live_interval_ms: 2,
            fanout_feeds: 10_000,
            fanout_sessions: 100,
            command_ops: 200,
            read_events: 100_000,
            scale_sessions: [100, 10_000, 100_000],
            scale_events: [0, 1_000_000, 10_000_000],
            scale_appends: 20_000,
        }
    }

    pub fn quick(rounds: Option<usize>) -> Self {
        // The smoke mode shows that every scenario runs and measures: one
        // round of each heavy one unless asked for more (three took a
        // minute and a half more of the test suite, for medians nobody
        // reads).
        let heavy_rounds = rounds.map_or(1, |r| r.clamp(1, 3));
        let rounds = rounds.unwrap_or(3).max(1);
        Self {
            rounds,
            heavy_rounds,
            redis_calls_batch1: 320,
            redis_calls_batch100: 32,
            memory_calls_batch1: 3_200,
            memory_calls_batch100: 64,
            sqlite_commits_batch1: 10,
            sqlite_commits_batch100: 2,
            cycle_events: 1_000,
            cycle_sessions: 10,
            cycle_concurrency: 64,
            bullmq_concurrency: 50,
            live_events: 50,
            live_interval_ms: 2,
            fanout_feeds: 200,
            fanout_sessions: 10,
            command_ops: 20,
            read_events: 2_000,
            scale_sessions: [100, 1_000, 2_000],
            scale_events: [0, 10_000, 50_000],
            scale_appends: 1_000,
        }
    }

    /// How many append calls of `batch` events from `tasks` tasks a subject
    /// makes in one case of the append scenario: an in-memory store is timed
    /// over more calls, so that its round lasts about as long as a networked
    /// one's; a subject that waits for fsyncs over a number of commits per
    /// task, so that one task (one fsync per call) does not take minutes.
    pub fn append_calls(&self, pace: Pace, batch: usize, tasks: usize) -> u64 {
        match (pace, batch == 1) {
            (Pace::Network, true) => self.redis_calls_batch1,
            (Pace::Network, false) => self.redis_calls_batch100,
            (Pace::InMemory, true) => self.memory_calls_batch1,
            (Pace::InMemory, false) => self.memory_calls_batch100,
            (Pace::Fsync, true) => self.sqlite_commits_batch1 * tasks as u64,
            (Pace::Fsync, false) => self.sqlite_commits_batch100 * tasks as u64,
        }
    }
}

/// Everything a scenario needs.
pub struct Ctx {
    pub sizes: Sizes,
    pub quick: bool,
    /// Whether the work cycle runs the BullMQ baseline (`--no-bullmq`).
    pub bullmq: bool,
    /// The `redis-server` binary (for scenarios that start servers of
    /// their own).
    pub redis_bin: PathBuf,
    /// The server's URL and port.
    pub url: String,
    pub port: u16,
    /// The server this process started, stopped when dropped (`None` in a
    /// fan-out child, which uses its parent's).
    pub server: Option<RedisServer>,
    pub client: redis::Client,
    pub con: ConnectionManager,
    /// Distinguishes this run's keys and prefixes.
    pub run_id: String,
    /// Only these subjects (empty: all).
    pub subjects: Vec<String>,
    /// Where the SQLite databases of this run go; removed when dropped.
    pub sqlite_dir: tempfile::TempDir,
    /// The REST gateways in front of the server, started on first use:
    /// with subscriptions, and without (so feeds poll).
    pub rest_gateway: OnceLock<Gateway>,
    pub polling_gateway: OnceLock<Gateway>,
    /// The Redis Cluster of the cluster rows (six `redis-server`
    /// processes), started on first use, stopped when dropped.
    pub cluster: OnceLock<RedisCluster>,
    /// The Postgres server of the Postgres rows, started on first use,
    /// stopped when dropped.
    pub postgres: OnceLock<a2_postgres::testing::PostgresServer>,
}

impl Ctx {
    /// Whether `subject` is measured in this run (`--subjects`).
    pub fn wants(&self, subject: &str) -> bool {
        self.subjects.is_empty() || self.subjects.iter().any(|s| s == subject)
    }

    /// A name for this run's keys of `what` in `round`.
    pub fn tag(&self, what: &str, round: usize) -> String {
        format!("{}-{what}-{round}", self.run_id)
    }

    /// A fresh instance of `backend`'s store. Instances opened with the same
    /// `name` in one run share their data (for the memory store, whose data
    /// lives in the instance, every call is a new, empty store).
    pub async fn open(&self, backend: Backend, name: &str) -> Result<Arc<dyn Store>, String> {
        let prefix = format!("bench{}{name}", self.run_id);
        match backend {
            Backend::Memory => wiring::memory_store(),
            Backend::Redis => wiring::redis_store(&self.url, &prefix).await,
            Backend::Sqlite => wiring::sqlite_store(&self.sqlite_path(name)),
            // Prefixes of their own: the REST stores share the server with
            // the RESP one.
            Backend::Rest => {
                let url = self.gateway(backend).url();
                wiring::rest_store(&url, &format!("{prefix}rest"), LiveMode::Subscribe).await
            }
            Backend::RestPolling => {
                // `Auto` as a user would have it: the gateway offers no
                // subscriptions, so the store falls back to polling.
                let url = self.gateway(backend).url();
                wiring::rest_store(&url, &format!("{prefix}restp"), LiveMode::Auto).await
            }
            Backend::Cluster => {
                let cluster = self.cluster.get_or_init(|| {
                    eprintln!("[cluster] starting 3 masters and 3 replicas");
                    RedisCluster::start()
                });
                wiring::redis_store(&cluster.url(), &prefix).await
            }
            Backend::Postgres => wiring::postgres_store(&self.postgres_url(name)).await,
        }
    }

    /// The URL of the Postgres database of this run's `name` (a schema of
    /// its own on the run's server, started on first use).
    pub fn postgres_url(&self, name: &str) -> String {
        let server = self.postgres_server();
        let schema: String = format!("bench_{}_{name}", self.run_id)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        format!("{server}&a2_schema={schema}")
    }

    /// The URL of the run's Postgres server (started on first use), as any
    /// Postgres client takes it.
    pub fn postgres_server(&self) -> String {
        let server = self.postgres.get_or_init(|| {
            eprintln!("[postgres] starting a server");
            a2_postgres::testing::PostgresServer::start()
        });
        server.url()
    }

    /// The file of the SQLite database called `name` in this run.
    pub fn sqlite_path(&self, name: &str) -> PathBuf {
        self.sqlite_dir.path().join(format!("{name}.db"))
    }

    /// The gateway a REST backend goes through (started on first use);
    /// the subscribing one for every other backend.
    pub fn gateway(&self, backend: Backend) -> &Gateway {
        match backend {
            Backend::RestPolling => self.polling_gateway.get_or_init(|| {
                Gateway::start(&self.url, GatewayOptions::default().subscribe(false))
            }),
            _ => self
                .rest_gateway
                .get_or_init(|| Gateway::start(&self.url, GatewayOptions::default())),
        }
    }

    /// A writer and a reader on the same data: two instances where the store
    /// can have several (so what the reader sees crossed the backend), the
    /// same instance twice for the memory store.
    pub async fn open_pair(
        &self,
        backend: Backend,
        name: &str,
    ) -> Result<(Arc<dyn Store>, Arc<dyn Store>), String> {
        let writer = self.open(backend, name).await?;
        let reader = match backend {
            Backend::Memory => writer.clone(),
            _ => self.open(backend, name).await?,
        };
        Ok((writer, reader))
    }
}
