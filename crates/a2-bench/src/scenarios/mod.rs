//! The scenarios, one module each, and what more than one of them uses.
//!
//! Each scenario module has a `run` function and lists whom it measures in
//! one place, a `SUBJECTS` constant (baselines first, as they take turns in
//! each round): a new store adds its rows to a scenario by adding its
//! [`Backend`](crate::wiring::Backend) there.

pub mod append;
pub mod cancel;
pub mod commands;
pub mod cycle;
pub mod delay;
pub mod fanout;
pub mod followers;
pub mod fork;
pub mod idle;
pub mod lapse;
pub mod live;
pub mod read;
pub mod retention;
pub mod scale;
pub mod serve;
pub mod streams;

use std::time::Duration;

use crate::BoxError;
use crate::ctx::Ctx;
use crate::info;
use crate::report::Report;
use crate::stats::rate;

/// The scenarios in the order a run takes them, by the names `--only` takes.
pub const ALL: [&str; 14] = [
    "append",
    "cycle",
    "live",
    "idle",
    "fanout",
    "commands",
    "read",
    "serve",
    "followers",
    "retention",
    "fork",
    "cancel",
    "delay",
    "scale",
];

/// Runs the scenario called `name` (one of [`ALL`]); other names run nothing.
pub async fn run(name: &str, ctx: &mut Ctx, report: &mut Report) {
    match name {
        "append" => append::run(ctx, report).await,
        "cycle" => cycle::run(ctx, report).await,
        "live" => live::run(ctx, report).await,
        "idle" => idle::run(ctx, report).await,
        "fanout" => fanout::run(ctx, report).await,
        "commands" => commands::run(ctx, report).await,
        "read" => read::run(ctx, report).await,
        "serve" => serve::run(ctx, report).await,
        "followers" => followers::run(ctx, report).await,
        "retention" => retention::run(ctx, report).await,
        "fork" => fork::run(ctx, report).await,
        "cancel" => cancel::run(ctx, report).await,
        "delay" => delay::run(ctx, report).await,
        "scale" => scale::run(ctx, report).await,
        _ => {}
    }
}

/// Adds one round's rate (`count` per elapsed second), or the reason it is
/// missing. Returns whether it was measured.
pub fn record(
    report: &mut Report,
    scenario: &str,
    case: &str,
    subject: &str,
    metric: &str,
    result: Result<Duration, BoxError>,
    count: u64,
) -> bool {
    match result {
        Ok(elapsed) => {
            let r = rate(count, elapsed);
            eprintln!("  {case:<22} {subject:<18} {:>12.0} {metric}", r);
            report.round(scenario, case, subject, metric, r);
            true
        }
        Err(e) => {
            eprintln!("  {case:<22} {subject:<18} {e}");
            report.missing(scenario, case, subject, metric, &e.to_string());
            false
        }
    }
}

/// Notes what `SLOWLOG` caught since the last call (which emptied it), as
/// having happened during `what`.
pub async fn slowlog_note(ctx: &mut Ctx, report: &mut Report, what: &str) {
    let entries = info::take_slowlog(&mut ctx.con)
        .await
        .map_err(|e| e.to_string());
    note_slowlog(report, what, entries);
}

/// Notes `entries` of `SLOWLOG` (or why they could not be read) as having
/// happened during `what`.
pub fn note_slowlog(
    report: &mut Report,
    what: &str,
    entries: Result<Vec<info::SlowEntry>, String>,
) {
    match entries {
        Ok(entries) if entries.is_empty() => {
            report.note(format!("SLOWLOG during {what}: no command over 1 ms"))
        }
        Ok(entries) => report.note(format!(
            "SLOWLOG during {what}: {}",
            info::summarize_slowlog(&entries).join("; ")
        )),
        Err(e) => report.note(format!("SLOWLOG during {what}: unreadable ({e})")),
    }
}

/// What a server and this process have spent over one measured run (CPU
/// time, and the server's commands when asked for): tells whether a slow
/// figure is spent in Redis, in the client, or waiting.
pub struct Meter {
    server_cpu: Option<f64>,
    commands: Option<u64>,
    process_cpu: Option<f64>,
}

impl Meter {
    /// Starts metering this process and, given its connection, a server
    /// (its commands too with `commands`).
    pub async fn start(server: Option<&mut redis::aio::ConnectionManager>, commands: bool) -> Self {
        let (server_cpu, commands) = match server {
            Some(con) => (
                info::server_cpu_seconds(con).await.ok(),
                if commands {
                    info::command_counts(con).await.ok().map(|c| total(&c))
                } else {
                    None
                },
            ),
            None => (None, None),
        };
        Self {
            server_cpu,
            commands,
            process_cpu: info::process_cpu_seconds(),
        }
    }

    /// Adds what was spent per event since [`Meter::start`] to the rows of
    /// `subject` (the server's through `server`, the one it started with).
    #[allow(clippy::too_many_arguments)]
    pub async fn record(
        self,
        server: Option<&mut redis::aio::ConnectionManager>,
        report: &mut Report,
        scenario: &str,
        case: &str,
        subject: &str,
        events: u64,
    ) {
        let per = |spent: f64| spent / events.max(1) as f64;
        if let Some(con) = server {
            if let (Some(before), Ok(after)) =
                (self.server_cpu, info::server_cpu_seconds(con).await)
            {
                let us = per((after - before) * 1e6);
                report.round(scenario, case, subject, "redis-server CPU us/event", us);
            }
            if let Some(before) = self.commands
                && let Ok(after) = info::command_counts(con).await
            {
                let ran = total(&after).saturating_sub(before) as f64;
                report.round(scenario, case, subject, "commands/event", per(ran));
            }
        }
        if let (Some(before), Some(after)) = (self.process_cpu, info::process_cpu_seconds()) {
            let us = per((after - before) * 1e6);
            report.round(scenario, case, subject, "client CPU us/event", us);
        }
    }
}

/// Commands a server ran, the benchmark's own inspection left out.
fn total(counts: &info::CommandCounts) -> u64 {
    info::delta(&Default::default(), counts).values().sum()
}
