//! Forks (FK1): the time to fork a 10 000-event session on every store,
//! the storage the copy takes against the storage its source took, and
//! reading a fork's copied prefix against reading the same events from
//! the source, in the same run. Rounds are interleaved: each round forks
//! once on every store, then reads source and fork by turns.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2::{NewEvent, ReadRange, Store};
use serde_json::json;

use crate::BoxError;
use crate::ctx::Ctx;
use crate::report::{Bound, Report};
use crate::wiring::Backend;

const S: &str = "fork";
/// Events of the forked session.
const EVENTS: u64 = 10_000;
/// The stores, the single Redis first (its rows are the target).
const SUBJECTS: [Backend; 5] = [
    Backend::Redis,
    Backend::Cluster,
    Backend::Rest,
    Backend::Sqlite,
    Backend::Memory,
];

/// How the storage a store uses is measured.
#[derive(Clone, Copy)]
enum Meter {
    /// `used_memory` of the benchmark's `redis-server`.
    RedisMemory,
    /// The database's pages in use.
    SqliteFile,
    /// None that would tell a copy from the noise.
    None,
}

fn meter(backend: Backend) -> Meter {
    match backend {
        Backend::Redis | Backend::Rest => Meter::RedisMemory,
        Backend::Sqlite => Meter::SqliteFile,
        _ => Meter::None,
    }
}

/// One store with its source session.
struct Subject {
    backend: Backend,
    store: Arc<dyn Store>,
    db: std::path::PathBuf,
    /// Bytes the source's 10 000 events took.
    source_bytes: Option<f64>,
}

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    let rounds = ctx.sizes.heavy_rounds;
    let case = format!("fork of a {EVENTS}-event session");
    let mut subjects = Vec::new();
    for backend in SUBJECTS {
        let subject = backend.subject();
        // A quick run leaves out the cluster, which takes long to start.
        if !ctx.wants(&subject) || (ctx.quick && backend == Backend::Cluster) {
            continue;
        }
        match prepare(ctx, backend).await {
            Ok(s) => subjects.push(s),
            Err(e) => {
                eprintln!("  {subject}: {e}");
                report.missing(S, &case, &subject, "fork ms", &format!("failed: {e}"));
            }
        }
    }
    for round in 0..rounds {
        eprintln!("[fork] round {}/{rounds}", round + 1);
        for s in &subjects {
            let subject = s.backend.subject();
            match fork_once(ctx, s, round).await {
                Ok((ms, bytes)) => {
                    eprintln!("  {subject:<18} fork {ms:>8.2} ms");
                    report.round(S, &case, &subject, "fork ms", ms);
                    if let (Some(bytes), Some(source)) = (bytes, s.source_bytes) {
                        report.round(
                            S,
                            &case,
                            &subject,
                            "fork bytes / source bytes",
                            bytes / source,
                        );
                        report.round(S, &case, &subject, "fork bytes", bytes);
                    }
                }
                Err(e) => {
                    eprintln!("  {subject}: {e}");
                    report.missing(S, &case, &subject, "fork ms", &format!("failed: {e}"));
                }
            }
            match read_both(s, round).await {
                Ok((source, fork)) => {
                    report.round(S, &case, &subject, "read source events/s", source);
                    report.round(S, &case, &subject, "read fork events/s", fork);
                    report.round(S, &case, &subject, "read fork / read source", fork / source);
                }
                Err(e) => report.missing(
                    S,
                    &case,
                    &subject,
                    "read fork / read source",
                    &e.to_string(),
                ),
            }
        }
    }
    for s in &subjects {
        let subject = s.backend.subject();
        let fork = report.value(S, &case, &subject, "read fork events/s");
        let source = report.value(S, &case, &subject, "read source events/s");
        // Quick mode sets no targets.
        if !ctx.quick {
            report.target(
                &format!("{subject}: reading a fork's prefix / reading the source (>= 0.9)"),
                fork,
                source,
                Bound::AtLeast(0.9),
            );
        }
        s.store.close().await;
    }
    report.note(format!(
        "fork: a session of {EVENTS} settled chat events (~120 B payloads) is forked at its last index \
         once per round on every store; fork ms is the call's wall time; fork bytes is the storage the \
         fork added (Redis: used_memory; SQLite: the pages in use), against what the source's \
         appends added; reads take the whole session in pages of 1 000, source and fork by turns"
    ));
}

async fn prepare(ctx: &mut Ctx, backend: Backend) -> Result<Subject, BoxError> {
    let name = format!("fork-{}", backend.name().replace(' ', "-"));
    let store = ctx.open(backend, &name).await?;
    let db = ctx.sqlite_path(&name);
    let before = storage(ctx, meter(backend), &db).await?;
    for from in (0..EVENTS).step_by(1_000) {
        let events = (from..from + 1_000)
            .map(|n| {
                NewEvent::new(
                    if n % 2 == 0 { "user.message" } else { "agent.reply" },
                    json!({"n": n, "text": "a message of a conversation, about as long as a short chat line is"}),
                )
                .settled()
            })
            .collect();
        store.append("source", events).await?;
    }
    let after = storage(ctx, meter(backend), &db).await?;
    let source_bytes = before.zip(after).map(|(b, a)| a - b);
    Ok(Subject {
        backend,
        store,
        db,
        source_bytes,
    })
}

async fn fork_once(
    ctx: &mut Ctx,
    s: &Subject,
    round: usize,
) -> Result<(f64, Option<f64>), BoxError> {
    let before = storage(ctx, meter(s.backend), &s.db).await?;
    let start = Instant::now();
    s.store
        .fork("source", EVENTS, &format!("fork-{round}"))
        .await?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let after = storage(ctx, meter(s.backend), &s.db).await?;
    Ok((ms, before.zip(after).map(|(b, a)| a - b)))
}

/// Reads the whole of `session`, a page at a time.
async fn read_all(store: &dyn Store, session: &str) -> Result<Duration, BoxError> {
    let start = Instant::now();
    let mut after = 0;
    loop {
        let range = ReadRange {
            after_index: after,
            through_index: Some(after + 1_000),
        };
        let rows = store.read(session, range).await?;
        match rows.last() {
            Some(last) => after = last.event.index,
            None => break,
        }
    }
    if after != EVENTS {
        return Err(format!("{session} read {after} events, not {EVENTS}").into());
    }
    Ok(start.elapsed())
}

/// Events per second reading the source and this round's fork, each three
/// times by turns (medians).
async fn read_both(s: &Subject, round: usize) -> Result<(f64, f64), BoxError> {
    let fork = format!("fork-{round}");
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        a.push(read_all(s.store.as_ref(), "source").await?);
        b.push(read_all(s.store.as_ref(), &fork).await?);
    }
    let rate = |mut d: Vec<Duration>| {
        d.sort();
        EVENTS as f64 / d[d.len() / 2].as_secs_f64()
    };
    Ok((rate(a), rate(b)))
}

/// The storage in use now, when the store's meter can tell.
async fn storage(ctx: &mut Ctx, meter: Meter, db: &Path) -> Result<Option<f64>, BoxError> {
    match meter {
        Meter::RedisMemory => {
            let info: String = redis::cmd("INFO")
                .arg("memory")
                .query_async(&mut ctx.con)
                .await?;
            let used = info
                .lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .ok_or("INFO memory has no used_memory")?;
            Ok(Some(used))
        }
        Meter::SqliteFile => {
            // The pages in use, as a reader sees them (committed pages still
            // in the WAL included), less the free ones.
            let conn = rusqlite::Connection::open_with_flags(
                db,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )?;
            let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let free: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
            let size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            Ok(Some(((pages - free) * size) as f64))
        }
        Meter::None => Ok(None),
    }
}
