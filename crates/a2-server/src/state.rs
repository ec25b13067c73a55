//! What every handler shares.

use std::sync::Arc;

use a2_core::Store;

use crate::Config;
use crate::metrics::Metrics;

/// The router's state: the store, the configuration, the metrics.
#[derive(Clone)]
pub struct AppState {
    /// The store every request works on.
    pub store: Arc<dyn Store>,
    /// The server's configuration (tokens, limits, the shutdown signal).
    pub config: Arc<Config>,
    /// The metrics at `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The Durable Streams engine: what this process keeps of the streams
    /// it serves.
    pub(crate) streams: Arc<crate::streams::Engine>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
