//! The targets of a full run: ratios of a2's figures to the baselines of the
//! same run, read back from the report's rows.

use crate::ctx::Sizes;
use crate::report::{Bound, Report};
use crate::scenarios::{append, cycle, live};
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
}
