//! Cancels reaching running handlers (RT17, CN5): the tokens an attempt is
//! stopped with, and the listener that hands the store's cancellations to
//! the drains holding the cancelled attempts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use a2_core::Cancellation;
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
/// cancellations (CN5) and hands each to its drain. It ends when the
/// application is dropped; a stream ended by a store failure is opened
/// again after a poll interval (cancels missed meanwhile are found at the
/// next renewal).
pub(crate) fn listen(app: &Arc<Shared>) {
    if app.listening.swap(true, Ordering::AcqRel) {
        return;
    }
    let weak = Arc::downgrade(app);
    let gone = app.gone.clone();
    let poll = app.options.poll_interval;
    let mut stream = app.store.cancellations();
    tokio::spawn(async move {
        loop {
            let item = tokio::select! {
                _ = gone.cancelled() => return,
                item = stream.next() => item,
            };
            let Some(app) = weak.upgrade() else { return };
            match item {
                Some(Ok(cancel)) => note(&app, &cancel),
                Some(Err(error)) => {
                    tracing::warn!(%error, "cancellations ended; renewals find cancels until they come back");
                    drop(app);
                    tokio::select! {
                        _ = gone.cancelled() => return,
                        _ = tokio::time::sleep(poll) => {}
                    }
                    match weak.upgrade() {
                        Some(app) => stream = app.store.cancellations(),
                        None => return,
                    }
                }
                None => return,
            }
        }
    });
}
