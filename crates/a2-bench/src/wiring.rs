//! How the benchmark gets a2's stores and runtime. The one place that knows
//! their constructors.

use std::sync::Arc;
use std::time::Duration;

use a2::Store;

use crate::BoxError;

/// A fresh in-memory store.
pub fn memory_store() -> Result<Arc<dyn Store>, String> {
    Err("not available: the memory store has not landed yet".into())
}

/// A fresh Redis store instance on `url` with key prefix `prefix`.
pub async fn redis_store(_url: &str, _prefix: &str) -> Result<Arc<dyn Store>, String> {
    Err("not available: the Redis store has not landed yet".into())
}

/// The work cycle through the runtime: `events` events appended over
/// `sessions` sessions, drained by a no-op handler with `concurrency`.
/// Returns the time until every event is processed.
pub async fn runtime_cycle(
    _store: Arc<dyn Store>,
    _events: u64,
    _sessions: u64,
    _concurrency: usize,
    _tag: &str,
) -> Result<Duration, BoxError> {
    Err("not available: the runtime has not landed yet".into())
}
