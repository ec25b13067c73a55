//! Delayed events (DL1, RT18): 10 000 events appended three seconds ahead
//! of their due times, which fall within one second, drained by a worker
//! (an a2 runtime `App` with default options, on its own store instance).
//! Reports how late each handler started after its due time, and on Redis
//! the commands the server ran per delayed event while they waited (no
//! per-event polling: the worker's drains sleep until `Busy.retry_at`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use a2::NewEvent;
use a2::runtime::App;
use serde_json::{Value, json};

use crate::BoxError;
use crate::ctx::Ctx;
use crate::report::Report;
use crate::stats::percentile;
use crate::wiring::Backend;

const S: &str = "delay";
/// The stores: Redis first (its rows are the target).
const SUBJECTS: [Backend; 3] = [Backend::Redis, Backend::Memory, Backend::Sqlite];
/// How far ahead of the first due time the events are appended.
const AHEAD_MS: i64 = 3_000;

/// The shapes measured, as (sessions, events per session): the same
/// 10 000 events in 10 sessions, then in 100 (more sessions, more claims:
/// each session's drain claims at each of its due times).
fn shapes(quick: bool) -> Vec<(usize, usize)> {
    if quick {
        vec![(10, 20)]
    } else {
        vec![(10, 1_000), (100, 100)]
    }
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    // A quick run (the test suite's) measures one round.
    let rounds = if ctx.quick { 1 } else { ctx.sizes.heavy_rounds };
    let shapes = shapes(ctx.quick);
    for round in 0..rounds {
        eprintln!("[delay] round {}/{rounds}", round + 1);
        for &(sessions, per) in &shapes {
            let case = format!(
                "{} delayed events due within one second, {sessions} sessions",
                sessions * per
            );
            for backend in SUBJECTS {
                let subject = backend.subject();
                if !ctx.wants(&subject) {
                    continue;
                }
                match once(ctx, backend, round, sessions, per).await {
                    Ok(m) => {
                        eprintln!(
                            "  {subject:<18} start p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms{}",
                            m.p50,
                            m.p99,
                            m.max,
                            m.commands
                                .map(|c| format!(
                                    "  {c:.3} commands per delayed event while waiting"
                                ))
                                .unwrap_or_default()
                        );
                        report.round(S, &case, &subject, "start p50 ms", m.p50);
                        report.round(S, &case, &subject, "start p99 ms", m.p99);
                        if let Some(c) = m.commands {
                            report.round(
                                S,
                                &case,
                                &subject,
                                "commands per delayed event while waiting",
                                c,
                            );
                        }
                    }
                    Err(e) => {
                        eprintln!("  {subject}: {e}");
                        report.missing(S, &case, &subject, "start p99 ms", &format!("failed: {e}"));
                    }
                }
            }
        }
    }
    report.note(format!(
        "delay: 10 000 events (10 sessions × 1 000, then 100 × 100) are appended through one store instance with \
         `not_before` times {AHEAD_MS} ms ahead, spread evenly over one second; a worker (a2 \
         runtime App, default options: poll every 1 s, concurrency 16) on another instance runs \
         them; start ms is how long after its due time each handler started (wall clock); \
         commands per delayed event is the Redis server's `total_commands_processed` over the \
         two seconds the events wait (from 2.5 s to 0.5 s before the first is due) divided by \
         the events"
    ));
}

struct Measured {
    p50: f64,
    p99: f64,
    max: f64,
    commands: Option<f64>,
}

async fn commands_processed(ctx: &mut Ctx) -> Result<f64, BoxError> {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut ctx.con)
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .ok_or_else(|| "INFO stats has no total_commands_processed".into())
}

async fn sleep_until_ms(at: f64) {
    let left = at - now_ms();
    if left > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(left / 1e3)).await;
    }
}

async fn once(
    ctx: &mut Ctx,
    backend: Backend,
    round: usize,
    sessions: usize,
    per: usize,
) -> Result<Measured, BoxError> {
    let name = format!(
        "delay-{}-{sessions}-{round}",
        backend.name().replace(' ', "-")
    );
    let (appender, worker) = ctx.open_pair(backend, &name).await?;
    let total = sessions * per;
    // (due ms, started ms) of each handler call.
    let starts: Arc<Mutex<Vec<(f64, f64)>>> = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let app = App::builder(worker.clone())
        .handler("remind", {
            let starts = starts.clone();
            move |_ctx, payload: Value| {
                let started = now_ms();
                let due = payload["due"].as_f64().unwrap_or(0.0);
                starts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((due, started));
                async { Ok(Vec::<NewEvent>::new()) }
            }
        })
        .build()?;
    let loop_app = app.clone();
    let worker_loop = tokio::spawn(async move { loop_app.run_worker().await });
    let first_due = now_ms().ceil() as i64 + AHEAD_MS;
    let result = async {
        for s in 0..sessions {
            let events = (0..per)
                .map(|k| {
                    // Interleaved over the sessions, so that every session
                    // has events due all through the second.
                    let n = k * sessions + s;
                    let due = first_due + (n * 1000 / (sessions * per)) as i64;
                    NewEvent::new("remind", json!({ "due": due })).not_before(due)
                })
                .collect();
            appender.append(&format!("s{s}"), events).await?;
        }
        if now_ms() > (first_due - 2_600) as f64 {
            return Err::<Measured, BoxError>("appending took longer than 400 ms".into());
        }
        let commands = if backend == Backend::Redis {
            sleep_until_ms((first_due - 2_500) as f64).await;
            let before = commands_processed(ctx).await?;
            sleep_until_ms((first_due - 500) as f64).await;
            let after = commands_processed(ctx).await?;
            // The two INFO calls themselves are not the events' cost.
            Some((after - before - 1.0).max(0.0) / total as f64)
        } else {
            None
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while starts.lock().unwrap_or_else(|p| p.into_inner()).len() < total {
            if tokio::time::Instant::now() > deadline {
                return Err("not every delayed event started within a minute".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut late: Vec<f64> = starts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(due, started)| started - due)
            .collect();
        if let Some(early) = late.iter().copied().find(|l| *l < -1.0) {
            return Err(format!("a handler started {early:.1} ms before its due time").into());
        }
        // On stderr: how lateness grew through the second (a drain that
        // falls behind grows it tenth by tenth) and the claims per event.
        let mut by_due = starts.lock().unwrap_or_else(|p| p.into_inner()).clone();
        by_due.sort_by(|a, b| a.0.total_cmp(&b.0));
        let tenths: Vec<String> = by_due
            .chunks(by_due.len().div_ceil(10).max(1))
            .map(|part| {
                let worst = part.iter().map(|(due, st)| st - due).fold(0.0, f64::max);
                format!("{worst:.0}")
            })
            .collect();
        let stats = app.stats();
        eprintln!(
            "    latest start per tenth of the second (ms): {}; {:.2} claims per event",
            tenths.join(" "),
            stats.claim_calls as f64 / total as f64
        );
        late.sort_by(f64::total_cmp);
        Ok(Measured {
            p50: percentile(&late, 50.0),
            p99: percentile(&late, 99.0),
            max: late[late.len() - 1],
            commands,
        })
    }
    .await;
    app.shutdown(Duration::from_secs(5)).await;
    worker_loop.abort();
    appender.close().await;
    worker.close().await;
    result
}
