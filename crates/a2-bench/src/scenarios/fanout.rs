//! Fan-out: many feeds over a few sessions in one process: subscriber
//! connections the store opened, resident memory per idle feed, and the
//! delivery latency of one append to all of its session's feeds. Each store
//! runs in a fresh child process (`--fanout-child`), one per round, so that
//! its heap is not shaped by earlier scenarios.

use std::sync::Arc;
use std::time::Duration;

use a2::Store;

use crate::BoxError;
use crate::a2_side;
use crate::ctx::{Ctx, Sizes};
use crate::info;
use crate::report::Report;
use crate::stats::Latencies;
use crate::wiring::Backend;

const S: &str = "fan-out";

/// The stores measured, in this order, each in processes of its own.
const SUBJECTS: [Backend; 2] = [Backend::Redis, Backend::Memory];

const METRICS: [&str; 4] = [
    "subscriber connections",
    "RSS bytes per idle feed",
    "delivery p50 ms",
    "delivery p99 ms",
];

/// The case name.
fn case(sizes: &Sizes) -> String {
    format!(
        "{} feeds over {} sessions",
        sizes.fanout_feeds, sizes.fanout_sessions
    )
}

/// The parent's side: one child process per store and round, whose rows
/// and notes join this report.
pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    let case = case(&ctx.sizes);
    let rounds = ctx.sizes.heavy_rounds;
    for backend in SUBJECTS {
        let subject = backend.subject();
        for round in 0..rounds {
            eprintln!(
                "[fan-out] {subject}, round {}/{rounds} (in a fresh process)",
                round + 1
            );
            match in_child(ctx, backend, round).await {
                Ok(child) => merge(report, child),
                Err(e) => {
                    eprintln!("  {subject} fan-out: {e}");
                    for metric in METRICS {
                        report.missing(S, &case, &subject, metric, &format!("failed: {e}"));
                    }
                }
            }
        }
    }
    report.note(
        "fan-out: each store runs in a fresh process (a2-bench --fanout-child) so its heap is not \
         shaped by earlier scenarios. RSS per idle feed = growth of that process's VmRSS from before \
         the feeds were opened to when all were live and idle, divided by the feeds; it includes the \
         benchmark's own task and channel sender per feed. Delivery: one event appended (by a second \
         instance) to each session in turn, timed until all of that session's feeds have it",
    );
    super::slowlog_note(ctx, report, "fan-out").await;
}

/// Adds a child's rows (as rounds) and its notes (once) to `report`.
fn merge(report: &mut Report, child: Report) {
    for row in child.rows {
        match row.value {
            Some(_) => {
                for v in row.rounds {
                    report.round(&row.scenario, &row.case, &row.subject, &row.metric, v);
                }
            }
            None => report.missing(
                &row.scenario,
                &row.case,
                &row.subject,
                &row.metric,
                row.note.as_deref().unwrap_or("not measured"),
            ),
        }
    }
    for note in child.notes {
        if !report.notes.contains(&note) {
            report.note(note);
        }
    }
}

/// Runs `a2-bench --fanout-child <backend>` and reads back its report.
async fn in_child(ctx: &Ctx, backend: Backend, round: usize) -> Result<Report, BoxError> {
    let exe = std::env::current_exe()?;
    let mut cmd = tokio::process::Command::new(exe);
    // One delivery round per process; the parent takes the median over processes.
    cmd.args(["--fanout-child", backend.name(), "--redis-url", &ctx.url])
        .args(["--rounds", "1", "--child-round", &round.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    if ctx.quick {
        cmd.arg("--quick");
    }
    let child = cmd.spawn()?;
    let out = tokio::time::timeout(Duration::from_secs(600), child.wait_with_output()).await??;
    if !out.status.success() {
        return Err(format!("the fan-out process failed ({})", out.status).into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The child's side of [`in_child`]: the fan-out of `backend`, into `report`.
pub async fn child(ctx: &mut Ctx, report: &mut Report, backend: Backend) {
    let case = case(&ctx.sizes);
    let subject = backend.subject();
    match ctx.open_pair(backend, "fw").await {
        Ok((writer, reader)) => {
            if let Err(e) = measure(ctx, report, &case, backend, &writer, &reader).await {
                eprintln!("  {subject} fan-out: {e}");
                for metric in METRICS {
                    report.missing(S, &case, &subject, metric, &format!("failed: {e}"));
                }
            }
            writer.close().await;
            reader.close().await;
        }
        Err(e) => {
            for metric in METRICS {
                report.missing(S, &case, &subject, metric, &e);
            }
        }
    }
}

async fn measure(
    ctx: &mut Ctx,
    report: &mut Report,
    case: &str,
    backend: Backend,
    writer: &Arc<dyn Store>,
    reader: &Arc<dyn Store>,
) -> Result<(), BoxError> {
    let subject = &backend.subject();
    let (feeds, sessions) = (ctx.sizes.fanout_feeds, ctx.sizes.fanout_sessions);
    let before_clients = info::clients(&mut ctx.con).await?;
    let rss_before = info::rss_bytes().ok_or("cannot read /proc/self/status")?;
    let tag = ctx.tag(&format!("fanout-{}", subject.replace(' ', "-")), 0);
    let mut fan = a2_side::FanOut::open(reader, writer, feeds, sessions, &tag).await?;
    let rss_after = info::rss_bytes().ok_or("cannot read /proc/self/status")?;
    let per_feed = rss_after.saturating_sub(rss_before) as f64 / feeds as f64;
    report.round(S, case, subject, "RSS bytes per idle feed", per_feed);
    if backend.in_process() {
        report.missing(
            S,
            case,
            subject,
            "subscriber connections",
            "n/a (in-process)",
        );
    } else {
        let after = info::clients(&mut ctx.con).await?;
        let new_subscribers = after
            .iter()
            .filter(|c| c.is_subscriber() && !before_clients.iter().any(|b| b.id == c.id))
            .count();
        report.round(
            S,
            case,
            subject,
            "subscriber connections",
            new_subscribers as f64,
        );
        eprintln!("  subscriber connections opened for {feeds} feeds: {new_subscribers}");
    }
    eprintln!("  RSS per idle feed: {per_feed:.0} bytes");
    for round in 0..ctx.sizes.heavy_rounds {
        let samples = fan.deliver_round(writer).await?;
        let l = Latencies::of(&samples).ok_or("no deliveries")?;
        eprintln!(
            "  delivery round {}/{}: p50 {:.3} ms  p99 {:.3} ms",
            round + 1,
            ctx.sizes.heavy_rounds,
            l.p50,
            l.p99
        );
        report.round(S, case, subject, "delivery p50 ms", l.p50);
        report.round(S, case, subject, "delivery p99 ms", l.p99);
    }
    fan.close();
    Ok(())
}
