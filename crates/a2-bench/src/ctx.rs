//! What every scenario gets: the sizes of the run, the private server, a
//! connection to it, and the stores to measure.

use std::sync::Arc;

use a2::Store;
use redis::aio::ConnectionManager;

use crate::server::RedisServer;
use crate::wiring::{self, Backend};

/// Sizes of one run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sizes {
    pub rounds: usize,
    pub heavy_rounds: usize,
    pub redis_calls_batch1: u64,
    pub redis_calls_batch100: u64,
    pub memory_calls_batch1: u64,
    pub memory_calls_batch100: u64,
    pub cycle_events: u64,
    pub cycle_sessions: u64,
    pub cycle_concurrency: usize,
    pub bullmq_concurrency: usize,
    pub live_events: u64,
    pub live_interval_ms: u64,
    pub fanout_feeds: usize,
    pub fanout_sessions: usize,
    pub command_ops: u64,
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

    pub fn quick(rounds: Option<usize>) -> Self {
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

    /// How many append calls of `batch` events a subject makes in one case
    /// of the append scenario: an in-process store is timed over more calls,
    /// so that its round lasts about as long as a networked one's.
    pub fn append_calls(&self, in_process: bool, batch: usize) -> u64 {
        match (in_process, batch == 1) {
            (false, true) => self.redis_calls_batch1,
            (false, false) => self.redis_calls_batch100,
            (true, true) => self.memory_calls_batch1,
            (true, false) => self.memory_calls_batch100,
        }
    }
}

/// Everything a scenario needs.
pub struct Ctx {
    pub sizes: Sizes,
    pub quick: bool,
    /// Whether the work cycle runs the BullMQ baseline (`--no-bullmq`).
    pub bullmq: bool,
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
    /// Only these subjects of the append and work-cycle scenarios (empty: all).
    pub subjects: Vec<String>,
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
        match backend {
            Backend::Memory => wiring::memory_store(),
            Backend::Redis => {
                wiring::redis_store(&self.url, &format!("bench{}{name}", self.run_id)).await
            }
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
            Backend::Redis => self.open(backend, name).await?,
        };
        Ok((writer, reader))
    }
}
