//! Wake-ups for workers (PS2) and cancels of their attempts (CN5): the
//! partitions' work and cancel channels, forwarded to a worker's stream
//! over the store's push connection.

use std::sync::Arc;

use a2_core::{Error, Result};

use crate::inner::Inner;
use crate::subscriber::{Listener, Subscription};

/// Forwards the partitions' work-channel messages (session ids) to a
/// worker's wake-up stream (PS2).
struct Wakeups {
    tx: tokio::sync::mpsc::Sender<Result<String>>,
}

impl Listener for Wakeups {
    fn message(&self, payload: &[u8]) {
        if let Ok(session) = std::str::from_utf8(payload) {
            // A full channel drops the hint: the worker's listing finds
            // the session anyway.
            let _ = self.tx.try_send(Ok(session.to_owned()));
        }
    }

    // Wake-ups lost while the connection was down are covered by the
    // worker's periodic listing (PS2).
    fn resync(&self) {}

    fn fail(&self, error: Error) {
        let _ = self.tx.try_send(Err(error));
    }
}

/// Wake-ups of every partition of the store (PS2): one channel
/// subscription per partition on the store's push connection, released
/// when the stream drops. Ends after a backend failure's error.
pub fn wakeup_stream(inner: Arc<Inner>) -> a2_core::WakeupStream {
    if let Err(error) = inner.check_open() {
        return Box::pin(futures::stream::once(async move { Err(error) }));
    }
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    let listener: Arc<dyn Listener> = Arc::new(Wakeups { tx });
    let subscriptions: Vec<Subscription> = inner
        .layout
        .partitions()
        .iter()
        .map(|part| {
            inner
                .subscriber
                .subscribe(&part.work_channel, listener.clone())
        })
        .collect();
    Box::pin(futures::stream::unfold(
        (rx, subscriptions, false),
        |(mut rx, subscriptions, done)| async move {
            if done {
                return None;
            }
            let item = rx.recv().await?;
            let done = item.is_err();
            Some((item, (rx, subscriptions, done)))
        },
    ))
}

/// Forwards the partitions' cancel-channel messages to a worker's stream
/// (CN5).
struct Cancels {
    tx: tokio::sync::mpsc::Sender<Result<a2_core::Cancellation>>,
}

impl Listener for Cancels {
    fn message(&self, payload: &[u8]) {
        if let Some(cancel) = crate::ops::cancel::announcement(payload) {
            // A full channel drops the hint: the worker's next renewal
            // finds the attempt superseded (RN1).
            let _ = self.tx.try_send(Ok(cancel));
        }
    }

    // Cancels lost while the connection was down are found at renewal.
    fn resync(&self) {}

    fn fail(&self, error: Error) {
        let _ = self.tx.try_send(Err(error));
    }
}

/// Cancels of leased attempts in every partition of the store (CN5): one
/// channel subscription per partition on the store's push connection,
/// released when the stream drops. Ends after a backend failure's error.
pub fn cancel_stream(inner: Arc<Inner>) -> a2_core::CancelStream {
    if let Err(error) = inner.check_open() {
        return Box::pin(futures::stream::once(async move { Err(error) }));
    }
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    let listener: Arc<dyn Listener> = Arc::new(Cancels { tx });
    let subscriptions: Vec<Subscription> = inner
        .layout
        .partitions()
        .iter()
        .map(|part| {
            inner
                .subscriber
                .subscribe(&part.cancel_channel, listener.clone())
        })
        .collect();
    Box::pin(futures::stream::unfold(
        (rx, subscriptions, false),
        |(mut rx, subscriptions, done)| async move {
            if done {
                return None;
            }
            let item = rx.recv().await?;
            let done = item.is_err();
            Some((item, (rx, subscriptions, done)))
        },
    ))
}
