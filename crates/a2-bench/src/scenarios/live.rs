//! Live latency: single-event appends at a steady pace to a session that a
//! caught-up feed of another store instance follows, append to delivery,
//! against `XADD` → a reader blocked in `XREAD BLOCK`. The REST store's
//! feeds run twice: over server-sent events, and polling (through a gateway
//! without subscriptions).

use std::time::Duration;

use crate::BoxError;
use crate::a2_side;
use crate::ctx::{Ctx, Sizes};
use crate::raw;
use crate::report::Report;
use crate::stats::Latencies;
use crate::wiring::{self, Backend};

const S: &str = "live latency";

/// Who is measured, in the order they take turns in each round.
#[derive(Debug, Clone, Copy)]
enum Subject {
    /// XADD, read by another connection blocked in XREAD (raw::xread_latency).
    Xread,
    /// A feed of a second instance of an a2 store.
    Feed(Backend),
}

const SUBJECTS: [Subject; 4] = [
    Subject::Xread,
    Subject::Feed(Backend::Redis),
    Subject::Feed(Backend::Rest),
    Subject::Feed(Backend::RestPolling),
];

impl Subject {
    /// The name `--subjects` takes.
    fn name(self) -> String {
        match self {
            Subject::Xread => XREAD_SUBJECT.into(),
            Subject::Feed(backend) => backend.subject(),
        }
    }

    /// The row subject.
    fn row(self) -> String {
        match self {
            Subject::Xread => XREAD_SUBJECT.into(),
            Subject::Feed(backend) => feed_subject(backend),
        }
    }
}

/// The row subject of the XREAD baseline.
pub const XREAD_SUBJECT: &str = "XADD -> blocked XREAD";

/// The row subject of `backend`'s feed: `a2 redis feed (other instance)`,
/// `a2 rest feed (other instance)`, `a2 rest polling feed (other instance)`.
pub fn feed_subject(backend: Backend) -> String {
    format!("{} feed (other instance)", backend.subject())
}

/// The case name.
pub fn case(sizes: &Sizes) -> String {
    format!(
        "{} events, 1 every {} ms",
        sizes.live_events, sizes.live_interval_ms
    )
}

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    let case = case(&ctx.sizes);
    for round in 0..ctx.sizes.heavy_rounds {
        eprintln!(
            "[live latency] round {}/{}",
            round + 1,
            ctx.sizes.heavy_rounds
        );
        let tag = ctx.tag("live", round);
        for subject in SUBJECTS {
            if !ctx.wants(&subject.name()) {
                continue;
            }
            let result = measure(ctx, subject, round, &tag).await;
            let measured = result.is_ok();
            latency_rows(report, &case, &subject.row(), result);
            if measured && matches!(subject, Subject::Feed(Backend::RestPolling)) {
                // Beside the polling feed's latencies, so that "interval + 2
                // round trips" can be read from the rows (a write call over
                // REST is one round trip).
                let interval = wiring::rest_poll_interval().as_secs_f64() * 1e3;
                report.round(S, &case, &subject.row(), "poll interval ms", interval);
            }
        }
    }
    if SUBJECTS.iter().any(|s| {
        matches!(s, Subject::Feed(Backend::Rest | Backend::RestPolling)) && ctx.wants(&s.name())
    }) {
        report.note(
            "live latency: the REST feeds follow a second REST store instance through the test \
             gateway (in this process) in front of the same redis-server: over server-sent events \
             (a2 rest), and polling with the default interval through a gateway without \
             subscriptions (a2 rest polling); a REST write call is one HTTP round trip",
        );
    }
    super::slowlog_note(ctx, report, "live latency").await;
}

/// One subject's round: each append-to-delivery latency, and the duration
/// of each write call.
async fn measure(
    ctx: &Ctx,
    subject: Subject,
    round: usize,
    tag: &str,
) -> Result<(Vec<Duration>, Vec<Duration>), BoxError> {
    let events = ctx.sizes.live_events;
    let interval = Duration::from_millis(ctx.sizes.live_interval_ms);
    match subject {
        Subject::Xread => raw::xread_latency(&ctx.client, &ctx.con, events, interval, tag).await,
        Subject::Feed(backend) => {
            let (writer, reader) = ctx.open_pair(backend, &format!("lw{round}")).await?;
            let r = a2_side::feed_latency(&writer, &reader, events, interval, tag).await;
            writer.close().await;
            reader.close().await;
            r
        }
    }
}

fn latency_rows(
    report: &mut Report,
    case: &str,
    subject: &str,
    result: Result<(Vec<Duration>, Vec<Duration>), BoxError>,
) {
    let result = result.and_then(|(deliveries, writes)| {
        let d = Latencies::of(&deliveries).ok_or("no samples")?;
        let w = Latencies::of(&writes).ok_or("no samples")?;
        Ok::<_, BoxError>((d, w))
    });
    match result {
        Ok((l, w)) => {
            eprintln!(
                "  {subject:<32} p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  (write call p99 {:.3} ms)",
                l.p50, l.p99, l.max, w.p99
            );
            report.round(S, case, subject, "p50 ms", l.p50);
            report.round(S, case, subject, "p99 ms", l.p99);
            report.round(S, case, subject, "max ms", l.max);
            report.round(S, case, subject, "write call p50 ms", w.p50);
            report.round(S, case, subject, "write call p99 ms", w.p99);
        }
        Err(e) => {
            eprintln!("  {subject:<32} {e}");
            for metric in ["p50 ms", "p99 ms", "max ms"] {
                report.missing(S, case, subject, metric, &e.to_string());
            }
        }
    }
}
