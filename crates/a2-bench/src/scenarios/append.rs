//! Append: 1-event and 100-event batches from 1 and 32 concurrent tasks,
//! each task appending to its own session, against the EVALSHA ceiling.

use std::time::Duration;

use super::record;
use crate::BoxError;
use crate::a2_side;
use crate::ctx::Ctx;
use crate::raw::{self, CEILING_KEYS};
use crate::report::Report;
use crate::wiring::Backend;

const S: &str = "append";

/// Who is measured, in the order they take turns in each case.
#[derive(Debug, Clone, Copy)]
enum Subject {
    /// One EVALSHA per batch of a script as wide as a2's (raw::evalsha_append).
    Ceiling,
    /// An a2 store's `append`.
    Store(Backend),
}

const SUBJECTS: [Subject; 3] = [
    Subject::Ceiling,
    Subject::Store(Backend::Redis),
    Subject::Store(Backend::Memory),
];

impl Subject {
    /// The row subject, also the name `--subjects` takes.
    fn name(self) -> String {
        match self {
            Subject::Ceiling => "EVALSHA ceiling".into(),
            Subject::Store(backend) => backend.subject(),
        }
    }

    fn in_process(self) -> bool {
        match self {
            Subject::Ceiling => false,
            Subject::Store(backend) => backend.in_process(),
        }
    }
}

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
                let calls = ctx.sizes.append_calls(subject.in_process(), batch);
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
        Subject::Store(backend) => {
            let store = ctx.open(backend, &format!("a{round}")).await?;
            let elapsed = a2_side::append(&store, batch, tasks, calls, tag).await;
            store.close().await;
            elapsed
        }
    }
}
