//! Retention: an endless workload — many short sessions that expire and a
//! few long ones the runtime keeps trimmed — whose storage must stop
//! growing, against the same workload kept whole. Redis reports its
//! `used_memory`, SQLite its file's pages, each after the first third of
//! the run and at its end.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use a2::runtime::{Context, HandlerError, Retention};
use a2::{App, AppendOptions, Expiry, ListSessionsOptions, NewEvent, Store};
use serde_json::json;

use crate::BoxError;
use crate::ctx::Ctx;
use crate::report::Report;
use crate::wiring::{self, Backend};

const S: &str = "retention";

/// Events per short session, appended in one call.
const SHORT_EVENTS: u64 = 5;
/// Long sessions, each appended to one event at a time (on Redis; SQLite's
/// shorter run has a third as many, so that each gets as many events).
const LONG_SESSIONS: u64 = 100;
/// Long events per tick: a tick is one short session and these.
const LONG_PER_TICK: u64 = 5;
/// What the runtime keeps of each session.
const KEEP_LAST: u64 = 100;
/// The short sessions' ttl.
const TTL: Duration = Duration::from_secs(2);

/// How storage is measured.
#[derive(Clone, Copy)]
enum Meter {
    RedisMemory,
    SqlitePages,
}

/// One run of the workload: whether it keeps its storage bounded.
#[derive(Clone, Copy)]
struct Variant {
    retain: bool,
}

impl Variant {
    fn subject(self, backend: Backend) -> String {
        if self.retain {
            format!(
                "{} (ttl {} s, keep last {KEEP_LAST})",
                backend.subject(),
                TTL.as_secs()
            )
        } else {
            format!("{} (kept whole)", backend.subject())
        }
    }
}

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    // Ticks per run (each appends SHORT_EVENTS + LONG_PER_TICK events) and
    // ticks per second: paced, so that the first third lasts several ttls
    // and several trims of every long session, and storage has reached its
    // steady state when it is measured. SQLite's run is a third as long:
    // with as many long sessions as Redis each would get one trim in the
    // first third, and the third would catch its file before the holes the
    // trims leave in older pages (rows are stored in append order) had
    // reached their steady share.
    let (ticks, rate) = if ctx.quick {
        (1_200, 300)
    } else {
        (30_000, 1_000)
    };
    for (backend, ticks, rate, long) in [
        (Backend::Redis, ticks, rate, LONG_SESSIONS),
        (Backend::Sqlite, ticks / 3, rate / 4, LONG_SESSIONS / 3),
    ] {
        let events = ticks * (SHORT_EVENTS + LONG_PER_TICK);
        let case = format!(
            "{events} events at {} events/s: {ticks} short sessions of {SHORT_EVENTS}, \
             {long} long ones",
            rate * (SHORT_EVENTS + LONG_PER_TICK)
        );
        for variant in [Variant { retain: true }, Variant { retain: false }] {
            let subject = variant.subject(backend);
            if !ctx.wants(&backend.subject()) {
                continue;
            }
            eprintln!("[retention] {subject}: {case}");
            match once(ctx, backend, variant, ticks, rate, long).await {
                Ok(m) => m.record(report, &case, &subject, backend),
                Err(e) => {
                    eprintln!("  {subject}: {e}");
                    report.missing(S, &case, &subject, "end / third", &format!("failed: {e}"));
                }
            }
        }
    }
    report.note(
        "retention: 64 tasks append ticks at a steady rate, each one new short session of 5 \
         events (in one call, with a 2 s ttl when retained) and 5 single events to the long \
         sessions (100 on Redis, 33 in SQLite's run, a third as long, so that each long session \
         gets as many events and as many trims before the first measure), drained by the \
         runtime with a no-op handler (keeping the last 100 events of each session when \
         retained). Redis: used_memory above its value before the run, after the first third of \
         the ticks and after the last; SQLite: the database file's pages (freed pages are reused)",
    );
}

/// What one run measured.
struct Measured {
    third: f64,
    end: f64,
    retained_events: u64,
    meter: Meter,
}

impl Measured {
    fn record(&self, report: &mut Report, case: &str, subject: &str, backend: Backend) {
        let (name, unit) = match self.meter {
            Meter::RedisMemory => ("used_memory", "bytes"),
            Meter::SqlitePages => ("file", "bytes"),
        };
        let ratio = self.end / self.third.max(1.0);
        eprintln!(
            "  {subject}: {name} {:.0} after a third, {:.0} at the end ({ratio:.2}x), {} events retained",
            self.third, self.end, self.retained_events
        );
        report.round(S, case, subject, &format!("{name} end / third"), ratio);
        report.round(
            S,
            case,
            subject,
            &format!("{name} {unit} at the end"),
            self.end,
        );
        report.round(
            S,
            case,
            subject,
            "bytes per retained event",
            self.end / self.retained_events.max(1) as f64,
        );
        let _ = backend;
    }
}

/// The storage in use now, above `base`.
async fn storage(ctx: &mut Ctx, meter: Meter, db: &std::path::Path) -> Result<f64, BoxError> {
    match meter {
        Meter::RedisMemory => {
            let info: String = redis::cmd("INFO")
                .arg("memory")
                .query_async(&mut ctx.con)
                .await?;
            let used = info
                .lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .ok_or("INFO memory has no used_memory")?;
            Ok(used.trim().parse()?)
        }
        Meter::SqlitePages => {
            let conn = rusqlite::Connection::open_with_flags(
                db,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )?;
            let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            let free: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
            let sessions: i64 =
                conn.query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))?;
            let events: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
            eprintln!(
                "    sqlite: {pages} pages ({free} free), {sessions} session rows, {events} event rows"
            );
            Ok((pages * size) as f64)
        }
    }
}

/// One run of the workload on a fresh store of `backend`.
async fn once(
    ctx: &mut Ctx,
    backend: Backend,
    variant: Variant,
    ticks: u64,
    rate: u64,
    long_sessions: u64,
) -> Result<Measured, BoxError> {
    let name = format!("ret{}", u8::from(variant.retain));
    let meter = match backend {
        Backend::Sqlite => Meter::SqlitePages,
        _ => Meter::RedisMemory,
    };
    let db = ctx.sqlite_path(&name);
    let store: Arc<dyn Store> = match backend {
        Backend::Sqlite => wiring::sqlite_store(&db)?,
        _ => ctx.open(backend, &name).await?,
    };
    let base = match meter {
        Meter::RedisMemory => storage(ctx, meter, &db).await?,
        Meter::SqlitePages => 0.0,
    };
    let mut builder = App::builder(store.clone())
        .handler("job", |_: Context, _: serde_json::Value| async {
            Ok::<(), HandlerError>(())
        })
        .concurrency(64);
    if variant.retain {
        builder = builder.retention(Retention::keep_last(KEEP_LAST));
    }
    let app = builder.build()?;
    let run = ctx.run_id.clone();
    let next = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    let work = |until: u64| {
        let mut tasks = Vec::new();
        for _ in 0..64 {
            let (app, next, run) = (app.clone(), next.clone(), run.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let tick = next.fetch_add(1, Ordering::Relaxed);
                    if tick >= until {
                        next.fetch_min(until, Ordering::Relaxed);
                        return Ok::<(), a2::Error>(());
                    }
                    let due = Duration::from_secs_f64(tick as f64 / rate as f64);
                    tokio::time::sleep_until(start + due).await;
                    let short = format!("ret:{run}:short:{tick}");
                    let batch = (0..SHORT_EVENTS)
                        .map(|n| NewEvent::new("job", json!({ "n": n })))
                        .collect();
                    let mut options = AppendOptions::new();
                    if variant.retain {
                        options = options.expiry(Expiry::ttl(TTL.as_millis() as u64));
                    }
                    app.store().append_with(&short, batch, options).await?;
                    app.drain(&short);
                    for k in 0..LONG_PER_TICK {
                        let long = (tick * LONG_PER_TICK + k) % long_sessions;
                        let long = format!("ret:{run}:long:{long}");
                        app.append(&long, vec![NewEvent::new("job", json!(tick))])
                            .await?;
                    }
                }
            }));
        }
        tasks
    };
    for task in work(ticks / 3) {
        task.await??;
    }
    app.idle().await;
    let third = storage(ctx, meter, &db).await? - base;
    for task in work(ticks) {
        task.await??;
    }
    app.idle().await;
    // The trims run in tasks of their own: let the last ones land.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let end = storage(ctx, meter, &db).await? - base;
    let retained_events = retained(store.as_ref()).await?;
    app.shutdown(Duration::from_secs(10)).await;
    store.close().await;
    Ok(Measured {
        third,
        end,
        retained_events,
        meter,
    })
}

/// The events the store holds now, over every session it lists.
async fn retained(store: &dyn Store) -> Result<u64, BoxError> {
    let mut cursor = None;
    let mut total = 0;
    loop {
        let page = store
            .list_sessions(ListSessionsOptions::new(10_000).cursor(cursor))
            .await?;
        for s in &page.sessions {
            total += s.event_count + 1 - s.first_index;
        }
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(total),
        }
    }
}
