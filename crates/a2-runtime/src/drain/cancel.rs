//! Cancels reaching running handlers (RT17, CN5): the tokens an attempt is
//! stopped with, and the listener that hands the store's cancellations to
//! the drains holding the cancelled attempts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use a2_core::{CancelOutcome, Cancellation, Result};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::shared::Shared;

/// How an attempt is stopped.
#[derive(Clone)]
pub(super) struct Stop {
    /// Drops the handler at its next `.await`: a lost lease, a shutdown
    /// past its deadline, or a cancel's grace run out. A child of the
    /// application's `abort`.
    pub(super) drop: CancellationToken,
    /// What the handler's context shows (`Context::cancelled`): a child of
    /// `drop`, so it fires with it, and on its own, first, when the event is
    /// cancelled (RT17).
    pub(super) signal: CancellationToken,
    /// Set when the event was cancelled (CN1): the attempt's outcome is
    /// `Cancelled`, and nothing of it is recorded.
    pub(super) by_cancel: Arc<AtomicBool>,
}

impl Stop {
    pub(super) fn new(abort: &CancellationToken) -> Self {
        let drop = abort.child_token();
        Self {
            signal: drop.child_token(),
            drop,
            by_cancel: Arc::new(AtomicBool::new(false)),
        }
    }

    /// RT17: the event was cancelled. The handler is told at once and
    /// dropped once `grace` has passed, unless it returned by then.
    pub(super) fn cancelled(&self, grace: std::time::Duration) {
        if self.by_cancel.swap(true, Ordering::AcqRel) {
            return;
        }
        self.signal.cancel();
        let drop = self.drop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = drop.cancelled() => {}
                _ = tokio::time::sleep(grace) => drop.cancel(),
            }
        });
    }

    pub(super) fn is_by_cancel(&self) -> bool {
        self.by_cancel.load(Ordering::Acquire)
    }
}

/// Hands a cancel to the drain of its session, if this process drains it:
/// the drain stops the attempt if it runs it, and forgets it if it waits
/// (RT17).
pub(crate) fn note(app: &Shared, cancel: &Cancellation) {
    let mut drains = app.drains();
    if let Some(slot) = drains.get_mut(&cancel.session) {
        slot.cancels.push((cancel.index, cancel.attempt));
        slot.wake.notify_one();
    }
}

/// Starts, once per application, the task that listens to the store's
/// cancellations (CN5) and hands each to its drain. Its subscription being
/// live is recorded (`Shared::cancels_live`), and claims wait for it, so no
/// cancel of an attempt this process runs can come before the listener
/// hears it (RT17). It ends when the application is dropped; a stream
/// ended (or refused) by a store failure is opened again after a poll
/// interval (cancels missed meanwhile are found at the next renewal).
pub(crate) fn listen(app: &Arc<Shared>) {
    if app.listening.swap(true, Ordering::AcqRel) {
        return;
    }
    let weak = Arc::downgrade(app);
    let gone = app.gone.clone();
    let poll = app.options.poll_interval;
    let store = app.store.clone();
    tokio::spawn(async move {
        loop {
            let subscribed = tokio::select! {
                _ = gone.cancelled() => return,
                subscribed = store.cancellations() => subscribed,
            };
            match subscribed {
                Ok(stream) => {
                    let Some(app) = weak.upgrade() else { return };
                    app.cancels_live.send_replace(true);
                    drop(app);
                    if !forward(&weak, &gone, stream).await {
                        return;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot listen to cancellations; renewals find cancels until the store answers");
                }
            }
            tokio::select! {
                _ = gone.cancelled() => return,
                _ = tokio::time::sleep(poll) => {}
            }
        }
    });
}

/// RT17: waits, before a claim, until the listener of the store's
/// cancellations is live (starting it if need be), so that every cancel of
/// an attempt this process runs is made after the listener can hear it.
/// Returns at once once it was live; waits at most a renew interval (a
/// listener the store cannot give yet costs no more than the renewal that
/// finds a missed cancel anyway, RN1), and not at all during a shutdown.
pub(crate) async fn heard(app: &Arc<Shared>) {
    if *app.cancels_live.borrow() {
        return;
    }
    listen(app);
    let mut live = app.cancels_live.subscribe();
    tokio::select! {
        _ = live.wait_for(|live| *live) => {}
        _ = tokio::time::sleep(app.options.renew_interval) => {
            tracing::debug!("claiming before the cancellations are live");
        }
        _ = app.stop.cancelled() => {}
    }
}

/// Hands every cancel of `stream` to its drain. True when the stream failed
/// and should be opened again; false when the application is gone or the
/// stream ended for good.
async fn forward(
    app: &std::sync::Weak<Shared>,
    gone: &CancellationToken,
    mut stream: a2_core::CancelStream,
) -> bool {
    loop {
        let item = tokio::select! {
            _ = gone.cancelled() => return false,
            item = stream.next() => item,
        };
        let Some(app) = app.upgrade() else {
            return false;
        };
        match item {
            Some(Ok(cancel)) => note(&app, &cancel),
            Some(Err(error)) => {
                tracing::warn!(%error, "cancellations ended; renewals find cancels until they come back");
                return true;
            }
            None => return false,
        }
    }
}

impl crate::App {
    /// Cancels an event (CN1, CN2, CN3): a pending, delayed or leased event
    /// (or a dead letter) is settled as cancelled and its lane moves on. The
    /// handler running it, in this process or any other sharing the store,
    /// is told at once (`Context::cancelled`) and dropped after
    /// `Options::cancel_grace` (RT17); nothing of its attempt is recorded.
    /// An event settled already is `NotPending`, nothing written.
    ///
    /// ```
    /// # use a2_core::{MemoryStore, NewEvent, StoreOptions};
    /// # use a2_runtime::App;
    /// # use serde_json::json;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_core::Result<()> {
    /// let app = App::builder(MemoryStore::new(StoreOptions::default())).build()?;
    /// let later = NewEvent::new("reminder", json!({})).delay(std::time::Duration::from_secs(600));
    /// app.append("chat-1", vec![later]).await?;
    /// let outcome = app.cancel("chat-1", 1, Some("the user answered".into())).await?;
    /// assert!(outcome.is_cancelled());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn cancel(
        &self,
        session: &str,
        index: u64,
        reason: Option<String>,
    ) -> Result<CancelOutcome> {
        let outcome = self.inner.store.cancel(session, index, reason).await?;
        if let CancelOutcome::Cancelled(row) = &outcome {
            // This process hears its own cancel at once, whatever the store
            // pushes (CN5); its lane may have moved (CN1).
            if row.attempt_count > 0 {
                note(
                    &self.inner,
                    &a2_core::Cancellation {
                        session: session.to_owned(),
                        index,
                        attempt: row.attempt_count,
                    },
                );
            }
            if row.event.lane.is_some() {
                self.drain(session);
            }
        }
        Ok(outcome)
    }
}
