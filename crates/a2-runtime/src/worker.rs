//! The worker loop (RT2) and readiness (RT17): listing the sessions with
//! pending work, hearing other processes' appends by wake-ups (PS2), and
//! telling when the application hears cancels.

use a2_core::{PageRequest, Result, WakeupStream};
use futures::StreamExt;

use crate::App;
use crate::stats::Counters;

impl App {
    /// Runs the worker loop until [`App::shutdown`]: every `poll_interval`
    /// it lists the sessions with pending events (PS1) and drains those not
    /// already being drained here, so the work of a crashed process is
    /// taken over once its leases expire (RT2). Between listings another
    /// process's append wakes it at once (PS2): the wake-up subscription is
    /// live before the first listing, so work appended after this was
    /// called is found by that listing or announced, never missed.
    pub async fn run_worker(&self) -> Result<()> {
        let stop = self.inner.stop.clone();
        let poll = self.inner.options.poll_interval;
        // Another process's append wakes this worker at once (PS2); the
        // listing every `poll_interval` catches what a wake-up missed.
        let wakeups = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            wakeups = self.inner.store.pending_wakeups() => wakeups,
        };
        // Wake-ups refused or ended by a failure, to be subscribed again.
        let mut lost_wakeups = false;
        if let Err(error) = &wakeups {
            tracing::warn!(%error, "no pending-work wake-ups; listing only until the store answers again");
            lost_wakeups = true;
        }
        let mut wakeups: WakeupStream =
            wakeups.unwrap_or_else(|_| Box::pin(futures::stream::pending()));
        let mut next_scan = tokio::time::Instant::now();
        // Since when listings fail: an outage is told once when it starts
        // and once when it ends, not at every listing.
        let mut failing: Option<tokio::time::Instant> = None;
        while !stop.is_cancelled() {
            if tokio::time::Instant::now() >= next_scan {
                if lost_wakeups {
                    // Subscribed again before the listing, so nothing
                    // appended between the two is missed.
                    if let Ok(again) = self.inner.store.pending_wakeups().await {
                        wakeups = again;
                        lost_wakeups = false;
                    }
                }
                match self.scan_pending().await {
                    Ok(_) => {
                        if let Some(since) = failing.take() {
                            tracing::info!(
                                after = ?since.elapsed(),
                                "listing pending sessions works again"
                            );
                        }
                    }
                    Err(error) => {
                        Counters::add(&self.inner.counters.store_errors, 1);
                        if failing.is_none() {
                            failing = Some(tokio::time::Instant::now());
                            let what = if error.is_retryable() {
                                "the store is unreachable"
                            } else {
                                "listing pending sessions failed"
                            };
                            tracing::warn!(%error, retry_every = ?poll, "{what}; trying again");
                        } else {
                            tracing::debug!(%error, "listing pending sessions failed again");
                        }
                    }
                }
                next_scan = tokio::time::Instant::now() + poll;
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep_until(next_scan) => {}
                woken = wakeups.next() => match woken {
                    Some(Ok(session)) => {
                        if !self.inner.corrupted().contains(&session) {
                            crate::drain::ensure(&self.inner, &session, true);
                        }
                    }
                    Some(Err(error)) => {
                        Counters::add(&self.inner.counters.store_errors, 1);
                        tracing::warn!(
                            %error,
                            "pending-work wake-ups ended; listing only until the store answers again"
                        );
                        wakeups = Box::pin(futures::stream::pending());
                        lost_wakeups = true;
                    }
                    None => wakeups = Box::pin(futures::stream::pending()),
                },
            }
        }
        Ok(())
    }

    /// Resolves once this application hears cancels (RT17): its listener
    /// of the store's cancellations (CN5) is live, so the handler of any
    /// event cancelled from now on, in any process, is told at once.
    /// Claims wait for it anyway (at most a renew interval), so no attempt
    /// this application runs can be cancelled unheard; a program says it
    /// started once this resolved (`a2 worker` does). Waits as long as the
    /// store cannot give the subscription; needs a tokio runtime.
    ///
    /// ```
    /// # use a2_core::{MemoryStore, StoreOptions};
    /// # use a2_runtime::App;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_core::Result<()> {
    /// let app = App::builder(MemoryStore::new(StoreOptions::default())).build()?;
    /// app.ready().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn ready(&self) {
        crate::drain::cancel::listen(&self.inner);
        let mut live = self.inner.cancels_live.subscribe();
        // The sender lives in `inner`, which `self` keeps alive.
        let _ = live.wait_for(|live| *live).await;
    }

    /// Lists every session with pending events once and drains each one
    /// not already being drained here. Returns how many were listed.
    pub async fn scan_pending(&self) -> Result<usize> {
        let mut cursor = None;
        let mut listed = 0;
        loop {
            let page = self
                .inner
                .store
                .pending_sessions(PageRequest { cursor, limit: 500 })
                .await?;
            listed += page.sessions.len();
            for session in &page.sessions {
                if self.inner.stop.is_cancelled() {
                    return Ok(listed);
                }
                if self.inner.corrupted().contains(session) {
                    continue;
                }
                crate::drain::ensure(&self.inner, session, false);
            }
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(listed),
            }
        }
    }
}
