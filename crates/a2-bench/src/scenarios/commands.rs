//! Commands per operation: `INFO commandstats` deltas over windows of
//! appends, claims, completions, deliveries to a caught-up feed and a
//! runtime work cycle, split by `MONITOR` into what clients sent and what ran
//! inside scripts, and the server time spent in scripts (a pass without
//! `MONITOR`, which slows every command). The counts are deterministic: each
//! window is measured once.

use crate::BoxError;
use crate::a2_side;
use crate::ctx::Ctx;
use crate::info;
use crate::monitor;
use crate::raw::{self, CEILING_KEYS};
use crate::report::Report;
use crate::wiring::{self, Backend};

const S: &str = "commands";

/// The a2 stores counted, each in its own windows. Only stores on the
/// benchmark's `redis-server`: the counts are that server's.
const SUBJECTS: [Backend; 1] = [Backend::Redis];

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    eprintln!("[commands] INFO commandstats and MONITOR per operation");
    // Two passes: one times the scripts, one counts commands under MONITOR.
    for monitored in [false, true] {
        for backend in SUBJECTS {
            let subject = backend.subject();
            if let Err(e) = a2_windows(ctx, report, backend, monitored).await {
                eprintln!("  {subject}: {e}");
                for case in [
                    "per append",
                    "per claimed event",
                    "per completed event",
                    "per delivered event",
                ] {
                    report.missing(S, case, &subject, "commands (commandstats)", &e.to_string());
                }
            }
        }
        if let Err(e) = baselines(ctx, report, monitored).await {
            eprintln!("  baselines: {e}");
            report.note(format!("commands: baselines failed: {e}"));
        }
    }
    report.note(
        "commands: `commands (commandstats)` counts every command Redis ran, including those inside \
         scripts; MONITOR splits them into `script calls` and `other client commands` (sent by the \
         client) and what ran inside scripts. Per delivered event = the window of appends to a \
         followed session minus the same number of plain appends. Claims take up to 100 events per call",
    );
}

/// Runs one window of command counting: `body`, then a marker through MONITOR.
struct Counter {
    /// `None` for a timing pass: MONITOR slows every command down.
    monitor: Option<monitor::Monitor>,
    before: info::CommandCounts,
    before_micros: u64,
    /// Server time in script calls during the last window, in µs.
    last_micros: u64,
    marks: usize,
}

impl Counter {
    async fn start(ctx: &mut Ctx, monitored: bool) -> Result<Self, BoxError> {
        let monitor = if monitored {
            Some(monitor::Monitor::start(ctx.port).await?)
        } else {
            None
        };
        let before = info::command_counts(&mut ctx.con).await?;
        let before_micros = info::script_micros(&mut ctx.con).await?;
        Ok(Self {
            monitor,
            before,
            before_micros,
            last_micros: 0,
            marks: 0,
        })
    }

    /// Cuts the window here: the commandstats delta and the MONITOR split
    /// since the last cut, client commands only from `only` when given.
    async fn cut(
        &mut self,
        ctx: &mut Ctx,
        only: Option<&[String]>,
    ) -> Result<(info::CommandCounts, monitor::Split), BoxError> {
        self.marks += 1;
        let marker = format!("a2-bench-mark-{}-{}", ctx.run_id, self.marks);
        let _: String = redis::cmd("ECHO")
            .arg(&marker)
            .query_async(&mut ctx.con)
            .await?;
        let split = match &mut self.monitor {
            Some(m) => m.until(&marker, only).await?,
            None => monitor::Split::default(),
        };
        let now = info::command_counts(&mut ctx.con).await?;
        let mut delta = info::delta(&self.before, &now);
        delta.remove("echo");
        self.before = now;
        let micros = info::script_micros(&mut ctx.con).await?;
        self.last_micros = micros.saturating_sub(self.before_micros);
        self.before_micros = micros;
        Ok((delta, split))
    }
}

/// Server time spent in script calls per operation (commandstats `usec`).
fn script_time_row(
    monitored: bool,
    report: &mut Report,
    case: &str,
    subject: &str,
    micros: u64,
    per: u64,
) {
    if monitored {
        return;
    }
    let us = micros as f64 / per.max(1) as f64;
    eprintln!("  {subject:<22} {case:<22} {us:.1} us in scripts per op");
    report.add(S, case, subject, "server us in scripts", vec![us]);
}

/// The rows of one operation in the commands scenario: its command counts in
/// the monitored pass, its server time in scripts in the other.
#[allow(clippy::too_many_arguments)]
fn operation_rows(
    monitored: bool,
    report: &mut Report,
    case: &str,
    subject: &str,
    per: u64,
    stats: &info::CommandCounts,
    split: &monitor::Split,
    micros: u64,
) {
    command_rows(monitored, report, case, subject, per, stats, split);
    script_time_row(monitored, report, case, subject, micros, per);
}

fn command_rows(
    monitored: bool,
    report: &mut Report,
    case: &str,
    subject: &str,
    per: u64,
    stats: &info::CommandCounts,
    split: &monitor::Split,
) {
    if !monitored {
        return;
    }
    let per_f = per.max(1) as f64;
    let total: u64 = stats.values().sum();
    let is_script = |name: &str| name.starts_with("eval") || name.starts_with("fcall");
    let scripts: u64 = split
        .client
        .iter()
        .filter(|(k, _)| is_script(k))
        .map(|(_, v)| v)
        .sum();
    let others: Vec<(&String, &u64)> = split.client.iter().filter(|(k, _)| !is_script(k)).collect();
    let other_total: u64 = others.iter().map(|(_, v)| **v).sum();
    let list = |items: Vec<(String, f64)>| {
        items
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    report.add(
        S,
        case,
        subject,
        "commands (commandstats)",
        vec![total as f64 / per_f],
    );
    report.note_last(list(info::per_operation(stats, per)));
    report.add(
        S,
        case,
        subject,
        "script calls",
        vec![scripts as f64 / per_f],
    );
    report.add(
        S,
        case,
        subject,
        "other client commands",
        vec![other_total as f64 / per_f],
    );
    if other_total > 0 {
        let items: info::CommandCounts = others.into_iter().map(|(k, v)| (k.clone(), *v)).collect();
        report.note_last(list(info::per_operation(&items, per)));
    }
    eprintln!(
        "  {subject:<22} {case:<22} {:.2} commands ({:.2} script calls, {:.2} other)",
        total as f64 / per_f,
        scripts as f64 / per_f,
        other_total as f64 / per_f
    );
}

/// The command windows of `backend`. With `monitored`, counts commands
/// (MONITOR); without, times the server's script calls (MONITOR would slow
/// them).
async fn a2_windows(
    ctx: &mut Ctx,
    report: &mut Report,
    backend: Backend,
    monitored: bool,
) -> Result<(), BoxError> {
    let subject = &backend.subject();
    let writer = ctx.open(backend, "cw").await?;
    let ops = ctx.sizes.command_ops;
    let mut steps = a2_side::CommandSteps::new(writer.clone(), &ctx.tag("cmds", 0));
    // Scripts load on first use (NOSCRIPT, SCRIPT LOAD): keep that out.
    steps.warm_up().await?;
    let mut counter = Counter::start(ctx, monitored).await?;

    let n = steps.appends(ops).await?;
    let (append_stats, append_split) = counter.cut(ctx, None).await?;
    operation_rows(
        monitored,
        report,
        "per append",
        subject,
        n,
        &append_stats,
        &append_split,
        counter.last_micros,
    );

    let n = steps.claims().await?;
    let (stats, split) = counter.cut(ctx, None).await?;
    operation_rows(
        monitored,
        report,
        "per claimed event",
        subject,
        n,
        &stats,
        &split,
        counter.last_micros,
    );

    let n = steps.completes().await?;
    let (stats, split) = counter.cut(ctx, None).await?;
    operation_rows(
        monitored,
        report,
        "per completed event",
        subject,
        n,
        &stats,
        &split,
        counter.last_micros,
    );

    // The feed lives in a second instance; its connections are the ones
    // that appear while it is created and opened.
    let known = info::clients(&mut ctx.con).await?;
    let reader = ctx.open(backend, "cw").await?;
    steps.open_feed(&reader).await?;
    let reader_addrs: Vec<String> = info::clients(&mut ctx.con)
        .await?
        .into_iter()
        .filter(|c| !known.iter().any(|k| k.id == c.id))
        .map(|c| c.addr)
        .collect();
    let _ = counter.cut(ctx, None).await?;
    let n = steps.deliveries(ops).await?;
    let (stats, split) = counter.cut(ctx, Some(&reader_addrs)).await?;
    // commandstats cannot tell clients apart: take the writer's appends out
    // (as many as in the append window) and what is left is the feed's.
    let factor = n as f64 / ops.max(1) as f64;
    let stats: info::CommandCounts = stats
        .iter()
        .map(|(k, v)| {
            let minus = append_stats.get(k).map_or(0.0, |a| *a as f64 * factor);
            (k.clone(), (*v as f64 - minus).round().max(0.0) as u64)
        })
        .filter(|(_, v)| *v > 0)
        .collect();
    let in_script = split.minus_scaled(&append_split, factor).in_script;
    let split = monitor::Split {
        client: split.client,
        in_script,
    };
    steps.close_feed();
    command_rows(
        monitored,
        report,
        "per delivered event",
        subject,
        n,
        &stats,
        &split,
    );

    // The whole work cycle through the runtime, per processed event.
    let events = ops * 10;
    let cycle_store = ctx.open(backend, "cc").await?;
    let _ = counter.cut(ctx, None).await?;
    let tag = ctx.tag("cmds-cycle", 0);
    wiring::runtime_cycle(
        cycle_store.clone(),
        events,
        10,
        ctx.sizes.cycle_concurrency,
        &tag,
        None,
    )
    .await?;
    let (stats, split) = counter.cut(ctx, None).await?;
    operation_rows(
        monitored,
        report,
        "per processed event (runtime work cycle)",
        subject,
        events,
        &stats,
        &split,
        counter.last_micros,
    );
    cycle_store.close().await;
    if monitored {
        report.note(format!(
            "commands per delivered event: client commands counted from the feed instance's own {} \
         connection(s) only (MONITOR by address)",
            reader_addrs.len()
        ));
    }
    writer.close().await;
    reader.close().await;
    Ok(())
}

async fn baselines(ctx: &mut Ctx, report: &mut Report, monitored: bool) -> Result<(), BoxError> {
    let ops = ctx.sizes.command_ops;
    let mut counter = Counter::start(ctx, monitored).await?;
    raw::evalsha_append(
        &ctx.con,
        CEILING_KEYS,
        1,
        1,
        ops,
        &ctx.tag("cmds-ceiling", 0),
    )
    .await?;
    let (stats, split) = counter.cut(ctx, None).await?;
    // The script load (SCRIPT LOAD) is outside the per-append figure.
    let mut stats = stats;
    stats.remove("script|load");
    let mut split = split;
    split.client.remove("script");
    operation_rows(
        monitored,
        report,
        "per append",
        "EVALSHA ceiling",
        ops,
        &stats,
        &split,
        counter.last_micros,
    );

    raw::consumer_group_cycle(&ctx.con, ops * 10, 10, 8, &ctx.tag("cmds-cg", 0)).await?;
    let (mut stats, mut split) = counter.cut(ctx, None).await?;
    // Setup and cleanup (XGROUP CREATE, DEL) are not part of the cycle.
    stats.remove("xgroup|create");
    stats.remove("del");
    split.client.remove("xgroup");
    split.client.remove("del");
    command_rows(
        monitored,
        report,
        "per processed event",
        "Redis consumer group",
        ops * 10,
        &stats,
        &split,
    );
    Ok(())
}
