//! Idle feeds: what 1 000 caught-up live feeds over 100 sessions cost one
//! REST store instance while nothing is written, and how fast they deliver
//! once writes start.
//!
//! The feeds' instance talks to a gateway of its own, so every HTTP request
//! it sends is counted (commands, pipelines, subscriptions): the idle rows
//! are those requests over a quiet window, after the feeds caught up. A
//! second instance (over RESP, so it costs the gateway nothing) then
//! appends one event to each session in turn at a steady pace; each
//! delivery to each feed is a latency sample. Over server-sent events
//! (`a2 rest`) an idle instance sends only its keeper's refresh, one
//! request per refresh period; polling (`a2 rest polling`) sends one
//! request per poll interval. Last, a follower process is SIGKILLed and
//! its sessions' wake-ups must stop within three refresh periods
//! (`lapse`).

use std::sync::Arc;
use std::time::Duration;

use a2::Store;
use a2::redis::rest::LiveMode;
use a2_redis::testing::gateway::{Gateway, GatewayOptions};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::BoxError;
use crate::a2_side::event;
use crate::ctx::Ctx;
use crate::report::Report;
use crate::stats::Latencies;
use crate::wiring::{self, Backend};

const S: &str = "idle feeds";
const SESSIONS: usize = 100;
const FEEDS_PER_SESSION: usize = 10;

/// Whom it measures, in the order they take turns in each round: the
/// subject over server-sent events first.
const SUBJECTS: [Backend; 2] = [Backend::Rest, Backend::RestPolling];

fn case() -> String {
    format!(
        "{} feeds over {SESSIONS} sessions",
        SESSIONS * FEEDS_PER_SESSION
    )
}

/// How long the quiet window lasts: five refresh periods.
fn window(ctx: &Ctx) -> Duration {
    if ctx.quick {
        Duration::from_secs(4)
    } else {
        Duration::from_secs(10)
    }
}

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    let case = case();
    for round in 0..ctx.sizes.heavy_rounds {
        eprintln!(
            "[idle feeds] round {}/{}",
            round + 1,
            ctx.sizes.heavy_rounds
        );
        for backend in SUBJECTS {
            if !ctx.wants(&backend.subject()) {
                continue;
            }
            let subject = backend.subject();
            match measure(ctx, backend, round).await {
                Ok(m) => {
                    eprintln!(
                        "  {subject:<18} idle {:.2} requests/s; delivery p50 {:.3} ms p99 {:.3} ms",
                        m.requests_per_s, m.latency.p50, m.latency.p99
                    );
                    report.round(S, &case, &subject, "idle requests/s", m.requests_per_s);
                    report.round(S, &case, &subject, "delivery p50 ms", m.latency.p50);
                    report.round(S, &case, &subject, "delivery p99 ms", m.latency.p99);
                }
                Err(e) => {
                    eprintln!("  {subject:<18} {e}");
                    for metric in ["idle requests/s", "delivery p50 ms", "delivery p99 ms"] {
                        report.missing(S, &case, &subject, metric, &e.to_string());
                    }
                }
            }
        }
    }
    eprintln!("[idle feeds] a SIGKILLed follower's marks");
    super::lapse::run(ctx, report).await;
    report.note(format!(
        "idle feeds: one REST store instance through a gateway of its own holds {} caught-up \
         feeds over {SESSIONS} sessions; requests/s counts every HTTP request it sends over a \
         quiet window of {} s (default refresh period {} ms, poll interval {} ms); then a RESP \
         instance appends one event to each session in turn, one every 10 ms, and every \
         delivery to every feed is a latency sample",
        SESSIONS * FEEDS_PER_SESSION,
        window(ctx).as_secs(),
        a2::redis::RedisOptions::default()
            .follow_refresh
            .as_millis(),
        wiring::rest_poll_interval().as_millis(),
    ));
}

struct Measured {
    requests_per_s: f64,
    latency: Latencies,
}

async fn measure(ctx: &Ctx, backend: Backend, round: usize) -> Result<Measured, BoxError> {
    let live = match backend {
        Backend::Rest => LiveMode::Subscribe,
        _ => LiveMode::Poll,
    };
    let prefix = format!(
        "bench{}idle{round}{}",
        ctx.run_id,
        backend.name().replace(' ', "")
    );
    let gateway = Gateway::start(
        &ctx.url,
        GatewayOptions::default().subscribe(live == LiveMode::Subscribe),
    );
    let writer = wiring::redis_store(&ctx.url, &prefix).await?;
    let reader = wiring::rest_store(&gateway.url(), &prefix, live).await?;
    let result = idle_then_writes(ctx, &writer, &reader, &gateway).await;
    writer.close().await;
    reader.close().await;
    result
}

async fn idle_then_writes(
    ctx: &Ctx,
    writer: &Arc<dyn Store>,
    reader: &Arc<dyn Store>,
    gateway: &Gateway,
) -> Result<Measured, BoxError> {
    let sessions: Vec<String> = (0..SESSIONS).map(|k| format!("idle-{k}")).collect();
    for session in &sessions {
        writer.append(session, vec![event(0)]).await?;
    }
    // Every delivery: (session number, index, when).
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, u64, Instant)>();
    let mut followers = Vec::new();
    for (k, session) in sessions.iter().enumerate() {
        for _ in 0..FEEDS_PER_SESSION {
            let mut feed = reader.stream(session, 0);
            let tx = tx.clone();
            followers.push(tokio::spawn(async move {
                while let Some(item) = feed.next().await {
                    let e = item?;
                    if tx.send((k, e.index, Instant::now())).is_err() {
                        break;
                    }
                }
                Ok::<_, a2::Error>(())
            }));
        }
    }
    drop(tx);
    let feeds = SESSIONS * FEEDS_PER_SESSION;
    receive(&mut rx, feeds, |_, index, _| index == 1).await?;
    // Settle: the subscriptions' first reads are done once every feed has
    // its first event; one more refresh period lets late setup requests
    // pass before counting.
    tokio::time::sleep(a2::redis::RedisOptions::default().follow_refresh).await;
    let before = total(gateway);
    let started = Instant::now();
    tokio::time::sleep(window(ctx)).await;
    let requests_per_s = (total(gateway) - before) as f64 / started.elapsed().as_secs_f64();

    let mut sent = Vec::with_capacity(SESSIONS);
    let mut ticker = tokio::time::interval(Duration::from_millis(10));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for session in &sessions {
        ticker.tick().await;
        sent.push(Instant::now());
        writer.append(session, vec![event(1)]).await?;
    }
    let mut samples = Vec::with_capacity(feeds);
    receive(&mut rx, feeds, |k, index, at| {
        if index != 2 {
            return false;
        }
        samples.push(at.saturating_duration_since(sent[k]));
        true
    })
    .await?;
    for follower in followers {
        follower.abort();
    }
    Ok(Measured {
        requests_per_s,
        latency: Latencies::of(&samples).ok_or("no samples")?,
    })
}

/// Receives deliveries until `count` of them were accepted by `take`.
async fn receive(
    rx: &mut mpsc::UnboundedReceiver<(usize, u64, Instant)>,
    count: usize,
    mut take: impl FnMut(usize, u64, Instant) -> bool,
) -> Result<(), BoxError> {
    let mut taken = 0;
    while taken < count {
        let (k, index, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .map_err(|_| format!("feeds stalled: {taken} of {count} deliveries in 30 s"))?
            .ok_or("a feed ended early")?;
        if take(k, index, at) {
            taken += 1;
        }
    }
    Ok(())
}

/// Every request the gateway served.
fn total(gateway: &Gateway) -> u64 {
    let r = gateway.requests();
    r.commands + r.pipelines + r.transactions + r.subscriptions
}
