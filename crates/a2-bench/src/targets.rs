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
    appends_against(
        report,
        ("Redis", Backend::Redis),
        "EVALSHA ceiling",
        "EVALSHA ceiling",
    );
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
    postgres(report, sizes);
    lifecycle(report, sizes);
    serve(report);
    feeds(report);
}

/// Retention, forks, cancels and delayed events: an endless workload's
/// memory stays flat, keeping the last events costs little, and the
/// operations' latencies stay within their bounds.
fn lifecycle(report: &mut Report, sizes: &Sizes) {
    let one = Some(1.0);
    for (backend, metric) in [
        ("a2 redis", "used_memory end / third"),
        ("a2 sqlite", "file end / third"),
    ] {
        report.target(
            &format!("{backend} (ttl, keep last): store size at the end <= 1.2x after a third"),
            report.find(
                "retention",
                "",
                &format!("{backend} (ttl 2 s, keep last 100)"),
                metric,
            ),
            one,
            Bound::AtMost(1.2),
        );
    }
    let cycle_case = cycle::case(sizes);
    report.target(
        "Redis work cycle keeping the last 100 events >= 0.9x keeping everything",
        report.value(
            "work cycle",
            &cycle_case,
            "a2 redis (runtime, keep last 100)",
            "events/s",
        ),
        report.value(
            "work cycle",
            &cycle_case,
            &cycle::runtime_subject(Backend::Redis),
            "events/s",
        ),
        Bound::AtLeast(0.9),
    );
    report.target(
        "Redis fork of a 10 000-event session <= 50 ms",
        report.find("fork", "10000-event", "a2 redis", "fork ms"),
        Some(50.0),
        Bound::AtMost(1.0),
    );
    report.target(
        "Redis cancel -> running handler's signal p99 <= 5 ms",
        report.find("cancel", "", "a2 redis", "p99 ms"),
        Some(5.0),
        Bound::AtMost(1.0),
    );
    for backend in ["a2 redis", "a2 sqlite"] {
        report.target(
            &format!(
                "{backend}: delayed events' start p99 <= 100 ms after their time, 100 sessions"
            ),
            report.find("delay", "100 sessions", backend, "start p99 ms"),
            Some(100.0),
            Bound::AtMost(1.0),
        );
    }
}

/// `a2 serve` beside the Durable Streams servers its users would run.
fn serve(report: &mut Report) {
    const S: &str = "serve: durable streams";
    const APPENDS: &str = "appends from 32";
    let a2 = report.find(S, APPENDS, "a2 memory over HTTP", "events/s");
    report.target(
        "a2 serve (memory) appends >= 3x @durable-streams/server (Node, memory)",
        a2,
        report.find(S, APPENDS, "@durable-streams/server memory", "events/s"),
        Bound::AtLeast(3.0),
    );
    report.target(
        "a2 serve (memory) appends >= 1x durable-streams-server (Rust, memory)",
        a2,
        report.find(S, APPENDS, "durable-streams-server memory", "events/s"),
        Bound::AtLeast(1.0),
    );
    report.target(
        "a2 serve (memory) SSE delivery p99 <= 1x durable-streams-server (Rust)",
        report.find(S, "followers", "a2 memory over HTTP", "delivery p99 ms"),
        report.find(
            S,
            "followers",
            "durable-streams-server memory",
            "delivery p99 ms",
        ),
        Bound::AtMost(1.0),
    );
    for subject in ["a2 memory over HTTP", "a2 sqlite over HTTP"] {
        report.target(
            &format!("{subject}: server KiB per idle SSE follower <= 16"),
            report.find(S, "followers", subject, "server KiB per idle follower"),
            Some(16.0),
            Bound::AtMost(1.0),
        );
    }
}

/// Feeds: what idle ones cost, what many cost on SQLite beside memory, and
/// how fast a dead follower stops costing anything.
fn feeds(report: &mut Report) {
    for subject in ["a2 rest", "a2 rest polling"] {
        report.target(
            &format!("{subject}: idle feeds <= 1 request/s per process"),
            report.find("idle feeds", "feeds over", subject, "idle requests/s"),
            Some(1.0),
            Bound::AtMost(1.0),
        );
    }
    report.target(
        "a SIGKILLed follower's wake-ups stop within 3 refresh periods",
        report.find(
            "idle feeds",
            "SIGKILLed",
            "a2 redis",
            "wake-ups after the kill, refresh periods",
        ),
        Some(3.0),
        Bound::AtMost(1.0),
    );
    const F: &str = "followers";
    const THOUSAND: &str = "1000 followers";
    let sqlite = |case: &str, metric: &str| report.find(F, case, "a2 sqlite over HTTP", metric);
    let memory = |case: &str, metric: &str| report.find(F, case, "a2 memory over HTTP", metric);
    let cpu = "server CPU ms per delivered event";
    let targets = [
        (
            "SQLite over HTTP: 1 000 followers' delivery p99 <= 2x memory's",
            sqlite(THOUSAND, "delivery p99 ms"),
            memory(THOUSAND, "delivery p99 ms"),
            2.0,
        ),
        (
            "SQLite over HTTP: server CPU per delivery <= 2x memory's",
            sqlite(THOUSAND, cpu),
            memory(THOUSAND, cpu),
            2.0,
        ),
        (
            "SQLite over HTTP: CPU per delivery, 10 000 followers <= 1.5x 1 000",
            sqlite("10000 followers", cpu),
            sqlite(THOUSAND, cpu),
            1.5,
        ),
        (
            "SQLite over HTTP: reads of the log per append <= 1.1",
            sqlite(THOUSAND, "reads per append"),
            Some(1.0),
            1.1,
        ),
    ];
    for (name, value, baseline, most) in targets {
        report.target(name, value, baseline, Bound::AtMost(most));
    }
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

/// The Postgres store's targets: appends against raw inserts on the same
/// server, the work cycle against awa's.
fn postgres(report: &mut Report, sizes: &Sizes) {
    appends_against(
        report,
        ("Postgres", Backend::Postgres),
        crate::raw_postgres::RAW_POSTGRES_SUBJECT,
        "raw inserts",
    );
    report.target(
        "Postgres work cycle >= 1x awa jobs/s",
        report.value(
            "work cycle",
            &cycle::case(sizes),
            &cycle::runtime_subject(Backend::Postgres),
            "events/s",
        ),
        report.value(
            "work cycle",
            &cycle::case(sizes),
            crate::awa_side::AWA_SUBJECT,
            "events/s",
        ),
        Bound::AtLeast(1.0),
    );
}

/// A store's appends from 32 tasks, of one event and of 100, at least 60 %
/// of `baseline`'s (a row subject, named `shown` in the target).
fn appends_against(report: &mut Report, store: (&str, Backend), baseline: &str, shown: &str) {
    let (name, backend) = store;
    for batch in [1, 100] {
        let case = append::case(batch, 32);
        report.target(
            &format!("{name} append, {case} >= 60% of {shown}"),
            report.value("append", &case, &backend.subject(), "events/s"),
            report.value("append", &case, baseline, "events/s"),
            Bound::AtLeast(0.6),
        );
    }
}
