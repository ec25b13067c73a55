//! A Postgres crash and restart under a running store instance: while the
//! server is gone, operations are `StoreUnavailable` (retryable) and the
//! listener is down; once it is back, the same instance works again by
//! itself — its pool reconnects, its listener listens again (wake-ups are
//! pushed again), and feeds and wake-up streams opened then hear writes
//! of another instance, as another process's.

use std::time::{Duration, Instant};

use a2_core::{NewEvent, Store, StoreOptions};
use a2_postgres::testing::PostgresServer;
use a2_postgres::{PostgresOptions, PostgresStore};
use futures::StreamExt;
use serde_json::json;

mod common;

use common::within;

async fn connect(url: &str) -> PostgresStore {
    PostgresStore::connect(url, PostgresOptions::default(), StoreOptions::default())
        .await
        .unwrap()
}

fn ev(n: i64) -> Vec<NewEvent> {
    vec![NewEvent::new("message", json!({ "n": n }))]
}

/// Waits until `check` holds, polling every 50 ms, at most 30 s.
async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_comes_back_by_itself_after_a_postgres_restart() {
    let mut server = PostgresServer::start();
    let url = server.url();
    let store = connect(&url).await;
    let other = connect(&url).await;
    store.append("chat", ev(1)).await.unwrap();
    assert!(store.pushes_wakeups(), "the listener is live after connect");

    server.kill();
    let refused = store.append("chat", ev(2)).await.unwrap_err();
    assert!(refused.is_retryable(), "a server that is gone: {refused:?}");
    until("the listener sees the server gone", async || {
        !store.pushes_wakeups()
    })
    .await;

    server.restart().unwrap();
    // The same instance, no reconnect by the caller: its pool replaces
    // the dead connections as it hands them out.
    until("appends work again", async || {
        store.append("chat", ev(2)).await.is_ok()
    })
    .await;
    until("the listener listens again", async || {
        store.pushes_wakeups()
    })
    .await;

    // Opened after the restart, a feed and a wake-up stream hear another
    // instance's writes by push.
    let mut feed = store.stream("chat", 2);
    let mut wakeups = store.pending_wakeups().await.unwrap();
    until("the other instance appends", async || {
        other.append("chat", ev(3)).await.is_ok()
    })
    .await;
    let third = within("the feed's event", feed.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(third.index, 3);
    // A session with no pending work before is announced (PS2).
    other.append("news", ev(1)).await.unwrap();
    let woken = within("the wake-up", wakeups.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(woken, "news");
    let events = store
        .read("chat", a2_core::ReadRange::default())
        .await
        .unwrap();
    assert_eq!(events.len(), 3, "no acknowledged write lost, none doubled");
}
