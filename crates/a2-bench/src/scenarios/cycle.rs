//! Work cycle: append → claim → complete through the runtime with a no-op
//! handler, timed until every event is processed, against a Redis Streams
//! consumer group and BullMQ. Redis-backed subjects also get the CPU time
//! per event of `redis-server` and of this process; the REST store, the
//! HTTP requests per event its gateway served.

use std::time::Duration;

use super::{Meter, note_slowlog, record};
use crate::BoxError;
use crate::bullmq::{self, Bullmq};
use crate::ctx::{Ctx, Sizes};
use crate::info;
use crate::raw;
use crate::report::Report;
use crate::wiring::{self, Backend};

const S: &str = "work cycle";

/// Who is measured, in the order they take turns in each round. BullMQ runs
/// after them in every round (one node process for all rounds; see
/// [`start_bullmq`]).
#[derive(Debug, Clone, Copy)]
enum Subject {
    /// XADD producers and XREADGROUP/XACK consumers (raw::consumer_group_cycle).
    ConsumerGroup,
    /// An a2 store drained by the runtime (wiring::runtime_cycle).
    Runtime(Backend),
    /// The same with a retention policy keeping the last [`KEEP_LAST`]
    /// events of each session (RT16).
    KeepLast(Backend),
    /// The awa job queue on the run's Postgres server (crate::awa_side::cycle).
    Awa,
}

/// What the keep-last subject keeps of each session: half of what a round
/// appends to it, so its workers trim as they go.
const KEEP_LAST: u64 = 100;

const SUBJECTS: [Subject; 9] = [
    Subject::ConsumerGroup,
    Subject::Runtime(Backend::Redis),
    Subject::KeepLast(Backend::Redis),
    Subject::Runtime(Backend::Memory),
    Subject::Runtime(Backend::Rest),
    Subject::Runtime(Backend::Sqlite),
    Subject::Runtime(Backend::Cluster),
    Subject::Awa,
    Subject::Runtime(Backend::Postgres),
];

impl Subject {
    /// The name `--subjects` takes.
    fn name(self) -> String {
        match self {
            Subject::ConsumerGroup => "Redis consumer group".into(),
            Subject::Awa => crate::awa_side::AWA_SUBJECT.into(),
            Subject::Runtime(backend) => backend.subject(),
            Subject::KeepLast(backend) => format!("{} keep-last", backend.subject()),
        }
    }

    /// The row subject.
    fn row(self) -> String {
        match self {
            Subject::ConsumerGroup | Subject::Awa => self.name(),
            Subject::Runtime(backend) => runtime_subject(backend),
            Subject::KeepLast(backend) => {
                format!("{} (runtime, keep last {KEEP_LAST})", backend.subject())
            }
        }
    }

    /// Whether its CPU time per event is measured: not for a store in this
    /// process, where there is no server and the client is the whole cost,
    /// nor on the cluster or Postgres, whose servers are not the one
    /// metered.
    fn metered(self) -> bool {
        match self {
            Subject::ConsumerGroup => true,
            Subject::Awa => false,
            Subject::Runtime(backend) | Subject::KeepLast(backend) => {
                !backend.in_process() && !matches!(backend, Backend::Cluster | Backend::Postgres)
            }
        }
    }

    /// Whether it goes through a REST gateway, whose requests are counted.
    fn rest(self) -> bool {
        matches!(self, Subject::Runtime(Backend::Rest | Backend::RestPolling))
    }
}

/// The row subject of `backend` drained by the runtime: `a2 redis (runtime)`.
pub fn runtime_subject(backend: Backend) -> String {
    format!("{} (runtime)", backend.subject())
}

/// The case name of the a2 and consumer-group rows.
pub fn case(sizes: &Sizes) -> String {
    format!(
        "{} events, {} sessions, concurrency {}",
        sizes.cycle_events, sizes.cycle_sessions, sizes.cycle_concurrency
    )
}

/// The case name of the BullMQ row.
pub fn bull_case(sizes: &Sizes) -> String {
    format!(
        "{} jobs, Worker concurrency {}",
        sizes.cycle_events, sizes.bullmq_concurrency
    )
}

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    let events = ctx.sizes.cycle_events;
    let case = case(&ctx.sizes);
    let bull_case = bull_case(&ctx.sizes);
    let mut bull = start_bullmq(ctx, report).await;
    let (mut slow_ours, mut slow_bull) = (Ok(Vec::new()), Ok(Vec::new()));
    let mut bull_rounds = 0;
    for round in 0..ctx.sizes.heavy_rounds {
        eprintln!(
            "[work cycle] round {}/{}",
            round + 1,
            ctx.sizes.heavy_rounds
        );
        let tag = ctx.tag("cycle", round);
        for subject in SUBJECTS {
            if !ctx.wants(&subject.name()) {
                continue;
            }
            let row = subject.row();
            if matches!(subject, Subject::Awa) && ctx.quick {
                // Its first build takes minutes: a full run's only.
                if round == 0 {
                    report.missing(S, &case, &row, "events/s", "skipped (--quick)");
                }
                continue;
            }
            let cpu = if subject.metered() {
                Some(Meter::start(Some(&mut ctx.con), false).await)
            } else {
                None
            };
            let requests_before = match subject {
                Subject::Runtime(backend) if subject.rest() => Some(gateway_requests(ctx, backend)),
                _ => None,
            };
            let elapsed = measure(ctx, subject, round, &tag).await;
            let ok = record(report, S, &case, &row, "events/s", elapsed, events);
            if let (Some(cpu), true) = (cpu, ok) {
                cpu.record(Some(&mut ctx.con), report, S, &case, &row, events)
                    .await;
            }
            if let (Some(before), Subject::Runtime(backend), true) = (requests_before, subject, ok)
            {
                let requests = gateway_requests(ctx, backend) - before;
                report.round(
                    S,
                    &case,
                    &row,
                    "gateway requests/event",
                    requests as f64 / events.max(1) as f64,
                );
            }
        }
        if let Some(b) = bull.take() {
            take_slowlog_into(ctx, &mut slow_ours).await;
            let (b, rate) = tokio::task::spawn_blocking(move || {
                let mut b = b;
                let rate = b.round();
                (b, rate)
            })
            .await
            .unwrap_or_else(|e| panic!("the BullMQ round panicked: {e}"));
            take_slowlog_into(ctx, &mut slow_bull).await;
            match rate {
                Ok(rate) => {
                    eprintln!("  {bull_case} BullMQ {:>22.0} jobs/s", rate);
                    report.round(S, &bull_case, "BullMQ", "jobs/s", rate);
                    bull_rounds += 1;
                    bull = Some(b);
                }
                Err(e) => {
                    eprintln!("  BullMQ: {e}");
                    report.missing(S, &bull_case, "BullMQ", "jobs/s", &format!("failed: {e}"));
                }
            }
        }
    }
    if let Some(b) = bull {
        // Ending the script waits for node to exit: not on a runtime thread.
        let _ = tokio::task::spawn_blocking(move || drop(b)).await;
    }
    report.note(
        "work cycle: the consumer group runs 64 producer tasks (XADD) and 64 consumer tasks \
         (XREADGROUP COUNT 100 on one stream at a time, then one XACK per entry) on one multiplexed \
         connection; a2 appends one event per call from 64 tasks through the runtime, whose no-op \
         handler runs with the same concurrency",
    );
    report.note(
        "work cycle: a2 rest runs the same runtime over REST (the Upstash protocol) through the \
         test gateway in front of the same redis-server; the gateway runs in this process, so its \
         CPU time is in the REST row's client CPU. a2 sqlite runs it on a file in the run's \
         temporary directory with the store's defaults (WAL, synchronous = FULL, group commit)",
    );
    report.note(
        "work cycle: a2 redis cluster runs the same runtime on a Redis Cluster of three masters \
         with a replica each (six redis-server processes on this machine's cores, appendonly, \
         started for the run), through the redis crate's cluster client; on a cluster each \
         operation is its own call (no group commit across slots), and its servers' CPU \
         is not metered",
    );
    report.note(
        "work cycle: awa (the crates.io job queue, 0.6) runs on the same throwaway Postgres \
         server as a2 postgres, in a database of its own per round: 64 producer tasks insert one \
         job per call (QueueStorage::enqueue_params_batch of one job, the queue storage's own \
         insert; the third-party harness enqueues 128 a call) while one awa Client with \
         max_workers 64 runs a no-op handler, configured as awa's own throughput runs configure \
         it (queue storage with 1 s queue and 50 ms lease rotation, 50 ms fallback poll, no \
         per-claim deadline, one queue stripe: strict FIFO); timed from the first insert until \
         awa counts every job completed",
    );
    take_slowlog_into(ctx, &mut slow_ours).await;
    note_slowlog(report, "work cycle (a2 and the consumer group)", slow_ours);
    if bull_rounds > 0 {
        report.note(
            "BullMQ: jobs added with addBulk (1 000 a time, removeOnComplete) while one no-op \
             Worker runs them; timed from the first add to the last completion. Its round runs \
             after the other subjects' in each round, in one node process kept between rounds",
        );
        note_slowlog(report, "work cycle (BullMQ)", slow_bull);
    }
}

/// Adds what the server's SLOWLOG holds to `into` and empties the log; a log
/// that cannot be read turns `into` into the error (the note then says so).
async fn take_slowlog_into(ctx: &mut Ctx, into: &mut Result<Vec<info::SlowEntry>, String>) {
    match info::take_slowlog(&mut ctx.con).await {
        Ok(entries) => {
            if let Ok(all) = into {
                all.extend(entries);
            }
        }
        Err(e) => *into = Err(e.to_string()),
    }
}

/// One subject's work cycle: the time until every event was processed.
async fn measure(
    ctx: &Ctx,
    subject: Subject,
    round: usize,
    tag: &str,
) -> Result<Duration, BoxError> {
    let (events, sessions, concurrency) = (
        ctx.sizes.cycle_events,
        ctx.sizes.cycle_sessions,
        ctx.sizes.cycle_concurrency,
    );
    match subject {
        Subject::ConsumerGroup => {
            raw::consumer_group_cycle(&ctx.con, events, sessions, concurrency, tag).await
        }
        Subject::Runtime(backend) => {
            let store = ctx.open(backend, &format!("c{round}")).await?;
            wiring::runtime_cycle(store, events, sessions, concurrency, tag, None).await
        }
        Subject::KeepLast(backend) => {
            let store = ctx.open(backend, &format!("k{round}")).await?;
            let retention = Some(a2::runtime::Retention::keep_last(KEEP_LAST));
            wiring::runtime_cycle(store, events, sessions, concurrency, tag, retention).await
        }
        Subject::Awa => {
            crate::awa_side::cycle(&ctx.postgres_server(), events, concurrency, tag).await
        }
    }
}

/// Every request the gateway of `backend` has served so far.
fn gateway_requests(ctx: &Ctx, backend: Backend) -> u64 {
    let r = ctx.gateway(backend).requests();
    r.commands + r.pipelines + r.transactions + r.subscriptions
}

/// The BullMQ baseline, installed and started for the run's rounds; `None`
/// (with the BullMQ row saying why) when it is skipped or cannot start.
async fn start_bullmq(ctx: &mut Ctx, report: &mut Report) -> Option<Bullmq> {
    let bull_case = bull_case(&ctx.sizes);
    if !ctx.bullmq {
        report.missing(S, &bull_case, "BullMQ", "jobs/s", "skipped (--no-bullmq)");
        return None;
    }
    if bullmq::node_version().is_none() {
        eprintln!("[work cycle] BullMQ skipped: node is not installed");
        report.missing(
            S,
            &bull_case,
            "BullMQ",
            "jobs/s",
            "skipped: node is not installed",
        );
        return None;
    }
    eprintln!("[work cycle] BullMQ: npm install bullmq into a temporary folder");
    let (port, jobs, conc) = (
        ctx.port,
        ctx.sizes.cycle_events,
        ctx.sizes.bullmq_concurrency,
    );
    match tokio::task::spawn_blocking(move || Bullmq::start(port, jobs, conc)).await {
        Ok(Ok(bull)) => {
            report
                .meta
                .insert("bullmq".into(), bull.version.clone().into());
            Some(bull)
        }
        Ok(Err(e)) => {
            eprintln!("  BullMQ: {e}");
            report.missing(S, &bull_case, "BullMQ", "jobs/s", &format!("failed: {e}"));
            None
        }
        Err(e) => {
            report.missing(S, &bull_case, "BullMQ", "jobs/s", &format!("failed: {e}"));
            None
        }
    }
}
