//! Read: one long session read from index 1 in one call, against the same
//! rows read straight from the database without a2's decoding.

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2::{NewEvent, ReadRange, Store};
use serde_json::json;

use super::append::RAW_SQLITE_SUBJECT;
use super::record;
use crate::BoxError;
use crate::ctx::{Ctx, Sizes};
use crate::raw_sqlite;
use crate::report::Report;
use crate::wiring::Backend;

const S: &str = "read";

/// Who is measured, in the order they take turns in each round.
#[derive(Debug, Clone, Copy)]
enum Subject {
    /// The store's rows straight from its file (raw_sqlite::read_rows).
    RawSqlite,
    /// An a2 store's `read` of the whole session.
    Store(Backend),
}

const SUBJECTS: [Subject; 2] = [Subject::RawSqlite, Subject::Store(Backend::Sqlite)];

impl Subject {
    /// The row subject, also the name `--subjects` takes.
    fn name(self) -> String {
        match self {
            Subject::RawSqlite => RAW_SQLITE_SUBJECT.into(),
            Subject::Store(backend) => backend.subject(),
        }
    }
}

/// The case name.
pub fn case(sizes: &Sizes) -> String {
    format!("{}-event session from index 1", sizes.read_events)
}

/// The session read, and the database it is in.
const SESSION: &str = "bench:read";
const DATABASE: &str = "read";

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    let case = case(&ctx.sizes);
    let events = ctx.sizes.read_events;
    if !SUBJECTS.iter().any(|s| ctx.wants(&s.name())) {
        return;
    }
    // The session is written once, before any round, by the store itself.
    eprintln!("[read] writing a {events}-event session");
    if let Err(e) = write_session(ctx, events).await {
        eprintln!("  {case:<22} {e}");
        for subject in SUBJECTS {
            report.missing(S, &case, &subject.name(), "events/s", &e.to_string());
        }
        return;
    }
    for round in 0..ctx.sizes.heavy_rounds {
        eprintln!("[read] round {}/{}", round + 1, ctx.sizes.heavy_rounds);
        for subject in SUBJECTS {
            let name = subject.name();
            if !ctx.wants(&name) {
                continue;
            }
            let elapsed = measure(ctx, subject, events).await;
            record(report, S, &case, &name, "events/s", elapsed, events);
        }
    }
    report.note(
        "read: the SQLite store reads the whole session in one `read` call (every stored event, \
         payloads parsed), from a fresh instance each round; raw rusqlite selects the same rows of \
         the store's events table, every column as an SQLite value, with no JSON parsed and no \
         events built",
    );
}

/// Appends `events` settled events to the read session, 1 000 per call.
async fn write_session(ctx: &Ctx, events: u64) -> Result<(), BoxError> {
    let store = ctx.open(Backend::Sqlite, DATABASE).await?;
    let result = async {
        let mut written = 0;
        while written < events {
            let n = (events - written).min(1_000);
            let batch = (0..n)
                .map(|k| {
                    NewEvent::new(
                        "bench",
                        json!({ "k": written + k, "text": "a short payload" }),
                    )
                    .settled()
                })
                .collect();
            store.append(SESSION, batch).await?;
            written += n;
        }
        Ok::<_, BoxError>(())
    }
    .await;
    store.close().await;
    result
}

/// One subject's read of the whole session: the wall time, after checking
/// that every event came back.
async fn measure(ctx: &Ctx, subject: Subject, events: u64) -> Result<Duration, BoxError> {
    let (count, elapsed) = match subject {
        Subject::RawSqlite => raw_sqlite::read_rows(&ctx.sqlite_path(DATABASE), SESSION).await?,
        Subject::Store(backend) => {
            let store: Arc<dyn Store> = ctx.open(backend, DATABASE).await?;
            let started = Instant::now();
            let rows = store.read(SESSION, ReadRange::default()).await;
            let elapsed = started.elapsed();
            store.close().await;
            (rows?.len() as u64, elapsed)
        }
    };
    if count != events {
        return Err(format!("read {count} events, not {events}").into());
    }
    Ok(elapsed)
}
