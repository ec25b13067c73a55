//! Append: 1-event and 100-event batches from 1 and 32 concurrent tasks,
//! each task appending to its own session, against the EVALSHA ceiling
//! (Redis) and group-committed INSERTs (SQLite).

use std::time::Duration;

use super::record;
use crate::BoxError;
use crate::a2_side;
use crate::ctx::Ctx;
use crate::raw::{self, CEILING_KEYS};
use crate::raw_postgres;
use crate::raw_sqlite;
use crate::report::Report;
use crate::wiring::{Backend, Pace};

const S: &str = "append";

/// Who is measured, in the order they take turns in each case.
#[derive(Debug, Clone, Copy)]
enum Subject {
    /// One EVALSHA per batch of a script as wide as a2's (raw::evalsha_append).
    Ceiling,
    /// Group-committed INSERTs into a plain SQLite table
    /// (raw_sqlite::group_commit_append).
    RawSqlite,
    /// One prepared multi-row INSERT per call into a plain Postgres table
    /// (raw_postgres::append).
    RawPostgres,
    /// An a2 store's `append`.
    Store(Backend),
}

const SUBJECTS: [Subject; 7] = [
    Subject::Ceiling,
    Subject::Store(Backend::Redis),
    Subject::Store(Backend::Memory),
    Subject::RawSqlite,
    Subject::Store(Backend::Sqlite),
    Subject::RawPostgres,
    Subject::Store(Backend::Postgres),
];

impl Subject {
    /// The row subject, also the name `--subjects` takes.
    fn name(self) -> String {
        match self {
            Subject::Ceiling => "EVALSHA ceiling".into(),
            Subject::RawSqlite => RAW_SQLITE_SUBJECT.into(),
            Subject::RawPostgres => raw_postgres::RAW_POSTGRES_SUBJECT.into(),
            Subject::Store(backend) => backend.subject(),
        }
    }

    fn pace(self) -> Pace {
        match self {
            Subject::Ceiling | Subject::RawPostgres => Pace::Network,
            Subject::RawSqlite => Pace::Fsync,
            Subject::Store(backend) => backend.pace(),
        }
    }
}

/// The row subject of the raw SQLite baselines (append and read).
pub const RAW_SQLITE_SUBJECT: &str = "raw rusqlite";

/// The (batch size, tasks) of each case.
const CASES: [(usize, usize); 4] = [(1, 1), (1, 32), (100, 1), (100, 32)];

/// The case name of `batch`-event appends from `tasks` tasks.
pub fn case(batch: usize, tasks: usize) -> String {
    format!(
        "batch {batch}, {tasks} task{}",
        if tasks == 1 { "" } else { "s" }
    )
}

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    for round in 0..ctx.sizes.rounds {
        eprintln!("[append] round {}/{}", round + 1, ctx.sizes.rounds);
        for (batch, tasks) in CASES {
            let case = case(batch, tasks);
            let tag = ctx.tag(&format!("a{batch}x{tasks}"), round);
            for subject in SUBJECTS {
                let name = subject.name();
                if !ctx.wants(&name) {
                    continue;
                }
                let calls = ctx.sizes.append_calls(subject.pace(), batch, tasks);
                let elapsed = measure(ctx, subject, batch, tasks, calls, round, &tag).await;
                record(
                    report,
                    S,
                    &case,
                    &name,
                    "events/s",
                    elapsed,
                    calls * batch as u64,
                );
            }
        }
    }
    report.note(format!(
        "append: each task appends to its own session; the EVALSHA ceiling script touches {CEILING_KEYS} keys \
         per call (XADD and an id-index HSET per event, a counter per other key), called with the same \
         redis client (one multiplexed connection) and the same number of tasks"
    ));
    report.note(
        "append: raw rusqlite inserts each event as one row of a plain table (primary key only) \
         with the SQLite store's settings (WAL, synchronous = FULL); each call is queued to one \
         writer thread that commits everything queued (up to 512 calls) in one transaction and \
         answers after the commit, as the store's group commit does: one task pays one fsync per \
         call (one INSERT per transaction), 32 tasks share them. Both write to files in a \
         temporary directory of the run, a new file per round; the SQLite rows are timed over a \
         number of commits per task (more calls for more tasks)",
    );
    report.note(
        "append: raw postgres inserts each call's batch as rows of a plain table (primary key \
         only) in one prepared INSERT … SELECT FROM unnest(…), committed on its own, from the \
         same number of tasks through a pool of 16 connections (the store's default), on the \
         same throwaway server as a2 postgres (Debian's postgresql, fsync off as in the tests)",
    );
    super::slowlog_note(ctx, report, "append").await;
}

/// One subject's `calls` appends of `batch` events from `tasks` tasks: the
/// wall time.
async fn measure(
    ctx: &Ctx,
    subject: Subject,
    batch: usize,
    tasks: usize,
    calls: u64,
    round: usize,
    tag: &str,
) -> Result<Duration, BoxError> {
    match subject {
        Subject::Ceiling => {
            raw::evalsha_append(&ctx.con, CEILING_KEYS, batch, tasks, calls, tag).await
        }
        Subject::RawSqlite => {
            let path = ctx.sqlite_path(&format!("raw-a{round}"));
            raw_sqlite::group_commit_append(&path, batch, tasks, calls, tag).await
        }
        Subject::RawPostgres => {
            raw_postgres::append(&ctx.postgres_server(), batch, tasks, calls, tag).await
        }
        Subject::Store(backend) => {
            let store = ctx.open(backend, &format!("a{round}")).await?;
            let elapsed = a2_side::append(&store, batch, tasks, calls, tag).await;
            store.close().await;
            elapsed
        }
    }
}
