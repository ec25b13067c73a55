//! `a2 worker`: the demo application's handlers as a standalone process,
//! until SIGINT or SIGTERM, then a graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use a2::Store;

use crate::agent::{self, Tuning};
use crate::out::tell;

pub struct WorkerArgs {
    pub holder: Option<String>,
    pub concurrency: usize,
    pub lease: Duration,
    pub poll: Duration,
    pub think: Duration,
    pub grace: Duration,
    /// How long a cancelled handler may go on once told (RT17).
    pub cancel_grace: Duration,
    /// Time between summaries.
    pub report: Duration,
    /// No start line and no summaries.
    pub quiet: bool,
}

pub async fn run(
    store: Arc<dyn Store>,
    args: WorkerArgs,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = agent::app(
        store,
        Tuning {
            think: args.think,
            ..Tuning::default()
        },
    )
    .concurrency(args.concurrency)
    .lease_ttl(args.lease)
    .renew_interval(args.lease / 3)
    .poll_interval(args.poll)
    .cancel_grace(args.cancel_grace);
    if !args.quiet {
        // RT17: a cancelled attempt is worth a line: someone pressed stop.
        builder = builder.on_attempt(|report| {
            if report.outcome == a2::runtime::Outcome::Cancelled {
                tell!(
                    "a2 worker: {} #{} ({}) cancelled after {} ms: its handler stopped",
                    report.session,
                    report.index,
                    report.event_type,
                    report.elapsed.as_millis()
                );
            }
        });
    }
    if let Some(holder) = args.holder {
        builder = builder.holder(holder);
    }
    let app = builder.build()?;
    // Started means ready: a cancel made from now on, in any process,
    // reaches the handler it stops (RT17).
    if tokio::time::timeout(Duration::from_secs(5), app.ready())
        .await
        .is_err()
    {
        tell!(
            "a2 worker {}: waiting for the store to accept its subscription to cancels",
            app.holder()
        );
        tokio::select! {
            () = app.ready() => {}
            signal = shutdown_signal() => {
                signal?;
                tell!("a2 worker {}: stopped before it started", app.holder());
                return Ok(());
            }
        }
    }
    if !args.quiet {
        tell!(
            "a2 worker {} started (concurrency {})",
            app.holder(),
            args.concurrency
        );
        // What it found on the store as it starts: the sessions it drains now.
        match app.scan_pending().await {
            Ok(n) => tell!(
                "a2 worker {}: {} with pending events",
                app.holder(),
                crate::style::count(n as u64, "session")
            ),
            Err(error) => tell!(
                "a2 worker {}: listing pending sessions failed ({error}); retrying every {:?}",
                app.holder(),
                args.poll
            ),
        }
    }
    let worker = tokio::spawn({
        let app = app.clone();
        async move { app.run_worker().await }
    });
    let reports = tokio::spawn(report(app.clone(), args.report));
    shutdown_signal().await?;
    reports.abort();
    tell!("a2 worker {}: shutting down", app.holder());
    let report = app.shutdown(args.grace).await;
    worker.await??;
    let s = app.stats();
    tell!(
        "a2 worker {} stopped: claimed {}, completed {}, failed {}, dead-lettered {}, cancelled {}, released {}{}",
        app.holder(),
        s.claimed,
        s.completed,
        s.failed,
        s.dead_lettered,
        s.cancelled,
        report.released,
        if report.finished_in_time {
            ""
        } else {
            " (deadline passed)"
        }
    );
    Ok(())
}

/// Every `every`, one line of what the worker did since the last one
/// (nothing while it does nothing), at info level.
async fn report(app: a2::runtime::App, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let mut last = app.stats();
    loop {
        tick.tick().await;
        let now = app.stats();
        let (completed, failed, dead) = (
            now.completed - last.completed,
            now.failed - last.failed,
            now.dead_lettered - last.dead_lettered,
        );
        if (completed, failed, dead) != (0, 0, 0) {
            tracing::info!(
                "last {}s: {} completed, {} failed (to be retried), {} dead-lettered",
                every.as_secs(),
                completed,
                failed,
                dead
            );
        }
        last = now;
    }
}

pub(crate) async fn shutdown_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}
