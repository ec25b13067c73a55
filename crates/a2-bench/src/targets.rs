//! The targets of a full run: ratios of a2's figures to the baselines of the
//! same run, read back from the report's rows.

use crate::ctx::Sizes;
use crate::report::{Bound, Report};
use crate::scenarios::{append, cycle, live, read};
use crate::wiring::Backend;

/// Adds every target to `report` (rows a run did not measure leave their
/// target without a ratio).
pub fn add(report: &mut Report, sizes: &Sizes) {
    report.target(
        "Redis work cycle >= 3x BullMQ jobs/s",
        report.value(
            "work cycle",
            &cycle::case(sizes),
            &cycle::runtime_subject(Backend::Redis),
            "events/s",
        ),
        report.value("work cycle", &cycle::bull_case(sizes), "BullMQ", "jobs/s"),
        Bound::AtLeast(3.0),
    );
    for batch in [1, 100] {
        let case = append::case(batch, 32);
        report.target(
            &format!("Redis append, {case} >= 60% of EVALSHA ceiling"),
            report.value("append", &case, &Backend::Redis.subject(), "events/s"),
            report.value("append", &case, "EVALSHA ceiling", "events/s"),
            Bound::AtLeast(0.6),
        );
    }
    report.target(
        "feed p99 <= 2x XREAD p99",
        report.value(
            "live latency",
            &live::case(sizes),
            &live::feed_subject(Backend::Redis),
            "p99 ms",
        ),
        report.value(
            "live latency",
            &live::case(sizes),
            live::XREAD_SUBJECT,
            "p99 ms",
        ),
        Bound::AtMost(2.0),
    );
    report.target(
        "memory store >= 500 000 single-event appends/s, 1 task",
        report.value(
            "append",
            &append::case(1, 1),
            &Backend::Memory.subject(),
            "events/s",
        ),
        Some(500_000.0),
        Bound::AtLeast(1.0),
    );
    sqlite(report, sizes);
    rest(report, sizes);
}

/// The SQLite store's targets: beside raw rusqlite, BullMQ, and an absolute
/// read rate.
fn sqlite(report: &mut Report, sizes: &Sizes) {
    let case = append::case(1, 32);
    report.target(
        &format!("SQLite append, {case} >= 60% of raw rusqlite (group commit)"),
        report.value("append", &case, &Backend::Sqlite.subject(), "events/s"),
        report.value("append", &case, append::RAW_SQLITE_SUBJECT, "events/s"),
        Bound::AtLeast(0.6),
    );
    report.target(
        "SQLite work cycle >= 1x BullMQ jobs/s",
        report.value(
            "work cycle",
            &cycle::case(sizes),
            &cycle::runtime_subject(Backend::Sqlite),
            "events/s",
        ),
        report.value("work cycle", &cycle::bull_case(sizes), "BullMQ", "jobs/s"),
        Bound::AtLeast(1.0),
    );
    report.target(
        &format!(
            "SQLite read of a {}-event session >= 1 000 000 events/s",
            sizes.read_events
        ),
        report.value(
            "read",
            &read::case(sizes),
            &Backend::Sqlite.subject(),
            "events/s",
        ),
        Some(1_000_000.0),
        Bound::AtLeast(1.0),
    );
}

/// The REST store's targets: beside the RESP store on the same server.
fn rest(report: &mut Report, sizes: &Sizes) {
    let cycle_case = cycle::case(sizes);
    report.target(
        "REST work cycle >= 25% of RESP work cycle",
        report.value(
            "work cycle",
            &cycle_case,
            &cycle::runtime_subject(Backend::Rest),
            "events/s",
        ),
        report.value(
            "work cycle",
            &cycle_case,
            &cycle::runtime_subject(Backend::Redis),
            "events/s",
        ),
        Bound::AtLeast(0.25),
    );
    let live_case = live::case(sizes);
    let live = |backend: Backend, metric: &str| {
        report.value(
            "live latency",
            &live_case,
            &live::feed_subject(backend),
            metric,
        )
    };
    let (resp, sse, polling) = (
        live(Backend::Redis, "p99 ms"),
        live(Backend::Rest, "p99 ms"),
        live(Backend::RestPolling, "p99 ms"),
    );
    // A write call over REST is one round trip.
    let polling_bound = live(Backend::RestPolling, "poll interval ms")
        .zip(live(Backend::RestPolling, "write call p50 ms"))
        .map(|(interval, round_trip)| interval + 2.0 * round_trip);
    report.target(
        "REST SSE feed p99 <= 3x RESP feed p99",
        sse,
        resp,
        Bound::AtMost(3.0),
    );
    report.target(
        "REST polling feed p99 <= poll interval + 2 round trips",
        polling,
        polling_bound,
        Bound::AtMost(1.0),
    );
}
