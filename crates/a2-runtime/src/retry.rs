//! Retrying a write whose acknowledgement may have been lost (RT10).

use std::future::Future;
use std::time::Duration;

use a2_core::{ErrorCode, Result};

/// How often a write is tried in all when the store is unavailable.
pub(crate) const TRIES: u32 = 3;

/// Runs `write` until it does not fail with `StoreUnavailable`, at most
/// [`TRIES`] times, waiting a little longer before each new try. Only for
/// writes that are replays when repeated: appends and completions whose
/// ids are all fixed (CO3, A5).
pub(crate) async fn when_unavailable<T, F, Fut>(mut write: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut tried = 1;
    loop {
        match write().await {
            Err(error) if error.code() == ErrorCode::StoreUnavailable && tried < TRIES => {
                tracing::debug!(%error, tried, "write failed; trying it again");
                tokio::time::sleep(Duration::from_millis(20 * u64::from(tried))).await;
                tried += 1;
            }
            other => return other,
        }
    }
}
