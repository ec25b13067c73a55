//! Scale: whether an event costs more as the store holds more. The same
//! work (the work cycle through the runtime, and single-event appends from
//! 32 tasks, both on the same active sessions) runs on stores that already
//! hold 100, 10 000 and 100 000 sessions, and 0, 1 M and 10 M events; the
//! listing and the pending scan run over every session of each store.
//!
//! Every store is filled once, before the rounds, and kept: its rounds
//! interleave with the other sizes', so a drift of the machine spreads
//! over all of them. Each Redis store has a `redis-server` of its own, so
//! its CPU time, commands and memory are its alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use a2::{ListSessionsOptions, NewEvent, PageRequest, Store};
use redis::aio::ConnectionManager;
use serde_json::json;

use super::{Meter, record};
use crate::BoxError;
use crate::ctx::Ctx;
use crate::info;
use crate::report::Report;
use crate::server::RedisServer;
use crate::stats::Latencies;
use crate::wiring::{self, Backend};

const S: &str = "scale";

/// Whose costs are followed as the data grows.
const BACKENDS: [Backend; 2] = [Backend::Redis, Backend::Sqlite];

/// The tag of the active sessions' names (`bench:cycle:scale:{n}`, as
/// `wiring::runtime_cycle` names them), the same in every round, so the
/// events stored before the rounds are in the sessions the rounds work on.
const TAG: &str = "scale";

/// Events per append while filling a store with stored events.
const FILL_BATCH: u64 = 1_000;

/// Tasks filling a store.
const FILL_TASKS: u64 = 32;

/// Tasks of the append case (each on its own share of the active sessions).
const APPEND_TASKS: u64 = 32;

/// One store of the scenario: how much it holds, and how to look at it.
struct Sized {
    /// Sessions besides the active ones, two settled events each.
    idle_sessions: u64,
    /// Settled events in the active sessions before the rounds.
    stored_events: u64,
    /// What its rows are called: `100000 sessions`, `1000000 events stored`.
    case: String,
    store: Arc<dyn Store>,
    /// Its own server (Redis), with a connection for `INFO`.
    server: Option<(RedisServer, ConnectionManager)>,
    /// Its file (SQLite).
    file: Option<std::path::PathBuf>,
    /// Bytes the store took before anything was written to it.
    empty_bytes: u64,
    /// Events written to it so far.
    events: u64,
}

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    let active = ctx.sizes.scale_sessions[0];
    let mut sized = Vec::new();
    for backend in BACKENDS {
        if !ctx.wants(&backend.subject()) {
            continue;
        }
        for (idle, stored) in shapes(ctx) {
            let case = case_name(active, idle, stored);
            eprintln!("[scale] {} {case}: filling", backend.subject());
            let started = Instant::now();
            match fill(ctx, backend, active, idle, stored, &case).await {
                Ok(s) => {
                    eprintln!("  filled in {:.1} s", started.elapsed().as_secs_f64());
                    sized.push((backend, s));
                }
                Err(e) => {
                    eprintln!("  {case}: {e}");
                    report.missing(
                        S,
                        &format!("work cycle, {case}"),
                        &backend.subject(),
                        "events/s",
                        &e.to_string(),
                    );
                }
            }
        }
    }
    for round in 0..ctx.sizes.heavy_rounds {
        eprintln!("[scale] round {}/{}", round + 1, ctx.sizes.heavy_rounds);
        for (backend, s) in &mut sized {
            cycle_round(ctx, report, *backend, s).await;
        }
        for (backend, s) in &mut sized {
            append_round(ctx, report, *backend, s).await;
        }
    }
    for (backend, s) in &mut sized {
        footprint(report, *backend, s).await;
    }
    for (backend, s) in &mut sized {
        if s.stored_events == 0 {
            scans(report, *backend, s, active).await;
        }
    }
    for (_, s) in sized {
        s.store.close().await;
    }
    report.note(format!(
        "scale: the same work on stores of growing size, each filled once before the rounds and \
         kept: {active} active sessions that the work cycle ({} events, concurrency {}) and {} \
         single-event appends from {APPEND_TASKS} tasks use, plus idle sessions of two settled \
         events each (the 'sessions' cases) or settled events already in the active sessions \
         (the 'events stored' cases). Each Redis store has a redis-server of its own; CPU and \
         commands per event are that server's (commands inside scripts counted). Store bytes per \
         event: used_memory (Redis) or the file and its log (SQLite) over every event written, \
         after the rounds. The listing and pending scans page through every session, 1 000 a page",
        ctx.sizes.cycle_events, ctx.sizes.cycle_concurrency, ctx.sizes.scale_appends,
    ));
}

/// The (idle sessions, stored events) of each store, the empty one first.
fn shapes(ctx: &Ctx) -> Vec<(u64, u64)> {
    let active = ctx.sizes.scale_sessions[0];
    let mut shapes: Vec<(u64, u64)> = ctx
        .sizes
        .scale_sessions
        .iter()
        .map(|&n| (n.saturating_sub(active), 0))
        .collect();
    shapes.extend(ctx.sizes.scale_events.iter().skip(1).map(|&e| (0, e)));
    shapes
}

/// The case name of a store's rows.
fn case_name(active: u64, idle: u64, stored: u64) -> String {
    if stored > 0 {
        format!("{stored} events stored")
    } else if idle > 0 {
        format!("{} sessions", active + idle)
    } else {
        format!("{active} sessions, 0 events stored")
    }
}

/// The names of the active sessions, as `wiring::runtime_cycle` names them.
fn active_name(n: u64) -> String {
    format!("bench:cycle:{TAG}:{n}")
}

/// A new store of `backend`, filled with `idle` idle sessions and `stored`
/// settled events spread over the `active` sessions.
async fn fill(
    ctx: &Ctx,
    backend: Backend,
    active: u64,
    idle: u64,
    stored: u64,
    case: &str,
) -> Result<Sized, BoxError> {
    let name = format!("scale-{idle}-{stored}");
    let (store, server, file, empty_bytes) = match backend {
        Backend::Redis => {
            let server = RedisServer::start(&ctx.redis_bin)?;
            let mut con = redis::Client::open(server.url())?
                .get_connection_manager()
                .await?;
            let empty = info::used_memory(&mut con).await?;
            let store = wiring::redis_store(&server.url(), "scale").await?;
            (store, Some((server, con)), None, empty)
        }
        Backend::Sqlite => {
            let path = ctx.sqlite_path(&name);
            let store = wiring::sqlite_store(&path)?;
            let empty = file_bytes(&path);
            (store, None, Some(path), empty)
        }
        other => return Err(format!("the scale scenario does not run {other:?}").into()),
    };
    let settled = |n: u64| {
        let mut e = NewEvent::new("stored", json!({ "n": n }));
        e.settled = true;
        e
    };
    // Idle sessions: two settled events each.
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..FILL_TASKS {
        let (store, next) = (store.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= idle {
                    return Ok::<_, a2::Error>(());
                }
                store
                    .append(&format!("bench:idle:{i}"), vec![settled(0), settled(1)])
                    .await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    // Stored events: batches of settled events, round-robin over the
    // active sessions (each session's batches in order).
    let batches = stored.div_ceil(FILL_BATCH);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..FILL_TASKS {
        let (store, next) = (store.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            // Task t fills sessions t, t + FILL_TASKS, …: no two tasks
            // append to one session.
            let sessions: Vec<u64> = (t..active).step_by(FILL_TASKS as usize).collect();
            if sessions.is_empty() {
                return Ok::<_, a2::Error>(());
            }
            let mut k = 0usize;
            loop {
                let b = next.fetch_add(1, Ordering::Relaxed);
                if b >= batches {
                    return Ok(());
                }
                let len = FILL_BATCH.min(stored - b * FILL_BATCH);
                let events = (0..len).map(|i| settled(b * FILL_BATCH + i)).collect();
                store
                    .append(&active_name(sessions[k % sessions.len()]), events)
                    .await?;
                k += 1;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(Sized {
        idle_sessions: idle,
        stored_events: stored,
        case: case.to_owned(),
        store,
        server,
        file,
        empty_bytes,
        events: idle * 2 + stored,
    })
}

/// The bytes of a SQLite database: its file and its write-ahead log.
fn file_bytes(path: &std::path::Path) -> u64 {
    let len = |p: std::path::PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    len(path.to_path_buf()) + len(wal.into())
}

/// One round of the work cycle on store `s`.
async fn cycle_round(ctx: &Ctx, report: &mut Report, backend: Backend, s: &mut Sized) {
    let case = format!("work cycle, {}", s.case);
    let subject = backend.subject();
    let (events, concurrency) = (ctx.sizes.cycle_events, ctx.sizes.cycle_concurrency);
    let active = ctx.sizes.scale_sessions[0];
    let meter = Meter::start(s.server.as_mut().map(|(_, con)| con), true).await;
    let elapsed =
        wiring::runtime_cycle(s.store.clone(), events, active, concurrency, TAG, None).await;
    s.events += events;
    if record(report, S, &case, &subject, "events/s", elapsed, events) {
        let server = s.server.as_mut().map(|(_, con)| con);
        meter
            .record(server, report, S, &case, &subject, events)
            .await;
    }
}

/// One round of single-event appends from [`APPEND_TASKS`] tasks to the
/// active sessions of store `s`, with each call's latency.
async fn append_round(ctx: &Ctx, report: &mut Report, backend: Backend, s: &mut Sized) {
    let case = format!("append, {}", s.case);
    let subject = backend.subject();
    let (calls, active) = (ctx.sizes.scale_appends, ctx.sizes.scale_sessions[0]);
    let meter = Meter::start(s.server.as_mut().map(|(_, con)| con), true).await;
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..APPEND_TASKS {
        let (store, next) = (s.store.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut took = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= calls {
                    return Ok::<_, a2::Error>(took);
                }
                let event = NewEvent::new("bench", json!({ "n": i }));
                let at = Instant::now();
                store.append(&active_name(i % active), vec![event]).await?;
                took.push(at.elapsed());
            }
        }));
    }
    let mut took: Vec<Duration> = Vec::new();
    let mut failed = None;
    for t in tasks {
        match t.await {
            Ok(Ok(mut t)) => took.append(&mut t),
            Ok(Err(e)) => failed = Some(e.to_string()),
            Err(e) => failed = Some(e.to_string()),
        }
    }
    let elapsed = match failed {
        Some(e) => Err(e.into()),
        None => Ok(started.elapsed()),
    };
    s.events += calls;
    if record(report, S, &case, &subject, "events/s", elapsed, calls) {
        if let Some(l) = Latencies::of(&took) {
            report.round(S, &case, &subject, "append p99 ms", l.p99);
        }
        let server = s.server.as_mut().map(|(_, con)| con);
        meter
            .record(server, report, S, &case, &subject, calls)
            .await;
    }
    // The appended events are pending: processed here, untimed, so that
    // the next cycle round finds only its own.
    if let Err(e) = wiring::drain(s.store.clone(), ctx.sizes.cycle_concurrency).await {
        report.note(format!("scale: draining {subject} {}: {e}", s.case));
    }
}

/// Bytes the store takes per event written to it, after the rounds.
async fn footprint(report: &mut Report, backend: Backend, s: &mut Sized) {
    let bytes = match (&mut s.server, &s.file) {
        (Some((_, con)), _) => info::used_memory(con).await.ok(),
        (None, Some(path)) => Some(file_bytes(path)),
        (None, None) => None,
    };
    if let Some(bytes) = bytes {
        let per = bytes.saturating_sub(s.empty_bytes) as f64 / s.events.max(1) as f64;
        let case = format!("store, {}", s.case);
        report.round(S, &case, &backend.subject(), "bytes/event", per);
    }
}

/// The listing and the pending scan over every session of `s` (the
/// pending scan after one pending event was appended to each session):
/// microseconds per session.
async fn scans(report: &mut Report, backend: Backend, s: &mut Sized, active: u64) {
    let subject = backend.subject();
    let sessions = active + s.idle_sessions;
    let case = format!("scans, {sessions} sessions");
    let listed = list_all(s.store.as_ref()).await;
    match listed {
        Ok((n, took)) if n == sessions => {
            report.round(
                S,
                &case,
                &subject,
                "listing us/session",
                per_session(took, n),
            );
        }
        Ok((n, _)) => report.missing(
            S,
            &case,
            &subject,
            "listing us/session",
            &format!("listed {n} of {sessions}"),
        ),
        Err(e) => report.missing(S, &case, &subject, "listing us/session", &e.to_string()),
    }
    if let Err(e) = make_pending(s.store.clone(), active, s.idle_sessions).await {
        report.missing(
            S,
            &case,
            &subject,
            "pending scan us/session",
            &e.to_string(),
        );
        return;
    }
    match pending_all(s.store.as_ref()).await {
        Ok((n, took)) if n == sessions => {
            report.round(
                S,
                &case,
                &subject,
                "pending scan us/session",
                per_session(took, n),
            );
        }
        Ok((n, _)) => report.missing(
            S,
            &case,
            &subject,
            "pending scan us/session",
            &format!("found {n} of {sessions}"),
        ),
        Err(e) => report.missing(
            S,
            &case,
            &subject,
            "pending scan us/session",
            &e.to_string(),
        ),
    }
}

fn per_session(took: Duration, n: u64) -> f64 {
    took.as_secs_f64() * 1e6 / n.max(1) as f64
}

/// Pages through every session; how many, and how long it took.
async fn list_all(store: &dyn Store) -> Result<(u64, Duration), a2::Error> {
    let started = Instant::now();
    let (mut n, mut cursor) = (0, None);
    loop {
        let page = store
            .list_sessions(ListSessionsOptions::new(1_000).cursor(cursor))
            .await?;
        n += page.sessions.len() as u64;
        match page.cursor {
            Some(c) => cursor = Some(c),
            None => return Ok((n, started.elapsed())),
        }
    }
}

/// Pages through every session with pending events.
async fn pending_all(store: &dyn Store) -> Result<(u64, Duration), a2::Error> {
    let started = Instant::now();
    let (mut n, mut cursor) = (0, None);
    loop {
        let page = store
            .pending_sessions(PageRequest {
                cursor,
                limit: 1_000,
            })
            .await?;
        n += page.sessions.len() as u64;
        match page.cursor {
            Some(c) => cursor = Some(c),
            None => return Ok((n, started.elapsed())),
        }
    }
}

/// Appends one pending event to each session, active and idle.
async fn make_pending(store: Arc<dyn Store>, active: u64, idle: u64) -> Result<(), BoxError> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..FILL_TASKS {
        let (store, next) = (store.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= active + idle {
                    return Ok::<_, a2::Error>(());
                }
                let session = match i.checked_sub(active) {
                    None => active_name(i),
                    Some(i) => format!("bench:idle:{i}"),
                };
                let event = NewEvent::new("pending", json!({ "n": i }));
                store.append(&session, vec![event]).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}
