//! Wake-ups for workers (PS2) and cancels of their attempts (CN5): the
//! partitions' work and cancel channels, forwarded to a worker's stream
//! over the store's push connection.

use std::sync::Arc;

use a2_core::{Error, Result};
use futures::stream::BoxStream;

use crate::inner::Inner;
use crate::layout::PartitionKeys;
use crate::subscriber::{Listener, Subscription};

/// Forwards the messages of one kind of partition channel, parsed, to a
/// worker's stream.
struct Forward<T> {
    tx: tokio::sync::mpsc::Sender<Result<T>>,
    parse: fn(&[u8]) -> Option<T>,
}

impl<T: Send + 'static> Listener for Forward<T> {
    fn message(&self, payload: &[u8]) {
        if let Some(item) = (self.parse)(payload) {
            // A full channel drops the hint: a worker's listing finds the
            // session (PS2), its renewal the cancel (RN1).
            let _ = self.tx.try_send(Ok(item));
        }
    }

    // Messages lost while the connection was down are covered the same way.
    fn resync(&self) {}

    fn fail(&self, error: Error) {
        let _ = self.tx.try_send(Err(error));
    }
}

/// The messages of `channel` in every partition of the store, parsed by
/// `parse`: one channel subscription per partition on the store's push
/// connection, released when the stream drops. Returns once every
/// subscription is in effect on the server (the subscriber's barrier), so
/// that a message published after it returns is delivered. Ends after a
/// backend failure's error.
async fn partition_stream<T: Send + 'static>(
    inner: Arc<Inner>,
    channel: fn(&PartitionKeys) -> &str,
    parse: fn(&[u8]) -> Option<T>,
) -> Result<BoxStream<'static, Result<T>>> {
    inner.check_open()?;
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    let listener: Arc<dyn Listener> = Arc::new(Forward { tx, parse });
    let subscriptions: Vec<Subscription> = inner
        .layout
        .partitions()
        .iter()
        .map(|part| inner.subscriber.subscribe(channel(part), listener.clone()))
        .collect();
    inner.subscriber.sync().await?;
    Ok(Box::pin(futures::stream::unfold(
        (rx, subscriptions, false),
        |(mut rx, subscriptions, done)| async move {
            if done {
                return None;
            }
            let item = rx.recv().await?;
            let done = item.is_err();
            Some((item, (rx, subscriptions, done)))
        },
    )))
}

/// Wake-ups of every partition of the store (PS2): session ids.
pub async fn wakeup_stream(inner: Arc<Inner>) -> Result<a2_core::WakeupStream> {
    partition_stream(
        inner,
        |part| &part.work_channel,
        |payload| std::str::from_utf8(payload).ok().map(str::to_owned),
    )
    .await
}

/// Cancels of leased attempts in every partition of the store (CN5).
pub async fn cancel_stream(inner: Arc<Inner>) -> Result<a2_core::CancelStream> {
    partition_stream(
        inner,
        |part| &part.cancel_channel,
        crate::ops::cancel::announcement,
    )
    .await
}
