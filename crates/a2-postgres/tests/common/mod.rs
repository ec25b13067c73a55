//! What the Postgres test binaries share: stores in schemas of their own
//! on the shared server, plain application connections, listeners of
//! notices, and waits with a deadline.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use a2_core::{Clock, StoreOptions};
use a2_postgres::testing::shared;
use a2_postgres::{PostgresOptions, PostgresStore};
use futures::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};

/// A store in schema `schema` of the shared server, on `clock` (the
/// system clock when `None`).
pub async fn store_on(schema: &str, clock: Option<Arc<dyn Clock>>) -> PostgresStore {
    let url = format!("{}&a2_schema={schema}", shared().url());
    let options = match clock {
        Some(clock) => StoreOptions::default().with_clock(clock),
        None => StoreOptions::default(),
    };
    PostgresStore::connect(&url, PostgresOptions::default(), options)
        .await
        .unwrap()
}

/// A plain connection to the shared server, as an application has its own.
pub async fn client() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&shared().url(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// A connection that listens on `channel`; its notices' payloads.
pub async fn listen(
    channel: &str,
) -> (
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (client, mut connection) = tokio_postgres::connect(&shared().url(), NoTls)
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    tokio::spawn(async move {
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN \"{channel}\""))
        .await
        .unwrap();
    (client, rx)
}

/// `f`'s output, or a panic naming `what` after 10 s.
pub async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within 10 s"))
}
