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
    /// What this process keeps of the Durable Streams it serves.
    pub(crate) streams: Arc<crate::routes::streams::Local>,
}

impl AppState {
    /// The listing of one session (I1): its counters, tail and trim point,
    /// or `None` when it has no events.
    pub(crate) async fn summary(
        &self,
        session: &str,
    ) -> a2_core::Result<Option<a2_core::SessionSummary>> {
        let listed = self
            .store
            .list_sessions(a2_core::ListSessionsOptions::new(1).prefix(Some(session.to_owned())))
            .await?;
        // The id itself sorts first among the ids it prefixes.
        Ok(listed
            .sessions
            .into_iter()
            .next()
            .filter(|s| s.session_id == session))
    }
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
