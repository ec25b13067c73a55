//! What the runtime's test binaries share: the clock's start, a builder
//! tuned for tests, reads of rows, and waits for conditions with a deadline.

#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use a2_core::{ReadRange, Store, StoredEvent};
use a2_runtime::{App, AppBuilder, Backoff};

/// The clock's starting time in these tests.
pub const T0: i64 = 1_700_000_000_000;

/// A builder tuned for tests: quick polls and renewals, no backoff.
pub fn builder(store: &Arc<dyn Store>) -> AppBuilder {
    App::builder(store.clone())
        .holder("test-worker")
        .poll_interval(Duration::from_millis(5))
        .renew_interval(Duration::from_millis(10))
        .lease_ttl(Duration::from_secs(10))
        .backoff(Backoff::none())
}

/// Waits for `cond` to hold, checking every few milliseconds, for at most
/// five seconds.
pub async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// `f`, or a panic naming `what` after five seconds.
pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// The row at `index` of `session`.
pub async fn row(store: &Arc<dyn Store>, session: &str, index: u64) -> StoredEvent {
    let rows = store
        .read(
            session,
            ReadRange {
                after_index: index - 1,
                through_index: Some(index),
            },
        )
        .await
        .unwrap();
    rows.into_iter().next().expect("row exists")
}

/// Every row of `session`.
pub async fn all(store: &Arc<dyn Store>, session: &str) -> Vec<StoredEvent> {
    store.read(session, ReadRange::default()).await.unwrap()
}
