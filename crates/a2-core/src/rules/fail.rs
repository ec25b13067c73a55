//! What a failure does (F2, F3, F4, F5, F6).

use super::Record;
use crate::model::{FailKind, FailOutcome};

/// The decision on a failure of `attempt` of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// F2, F3, F4, F5: nothing is written; the outcome is reported with the
    /// stored failure count.
    Report(FailKind),
    /// F6: record the failure: the event now has `failure_count` failures,
    /// and is dead-lettered when `dead`, else ready again (at once or from
    /// the request's retry time).
    Record {
        /// The new failure count.
        failure_count: u32,
        /// Whether this failure dead-letters it (`failure_count ≥ max_failures`).
        dead: bool,
    },
}

impl Failure {
    /// What `fail_attempt` answers for this decision, on an event whose
    /// stored failure count was `stored_failures` (reported unchanged when
    /// nothing is written).
    pub fn outcome(self, stored_failures: u32) -> FailOutcome {
        match self {
            Failure::Report(outcome) => FailOutcome {
                outcome,
                failure_count: stored_failures,
            },
            Failure::Record {
                failure_count,
                dead,
            } => FailOutcome {
                outcome: if dead {
                    FailKind::DeadLettered
                } else {
                    FailKind::Failed
                },
                failure_count,
            },
        }
    }
}

/// F2, F3, F4, F5, F6: the fate of a failure of `attempt` with
/// `max_failures`, for an event whose record is `record` (its index
/// exists, F1).
pub fn decide(record: &Record<'_>, attempt: u32, max_failures: u32) -> Failure {
    // F2.
    if record.processed_at.is_some() || record.attempt_count != attempt {
        return Failure::Report(FailKind::Superseded);
    }
    // F3.
    if record.failed_at.is_some() {
        return Failure::Report(FailKind::DeadLettered);
    }
    if record.claim_holder.is_none() {
        // F4: this attempt already failed (its lease was cleared then);
        // F5: never claimed, or released.
        return Failure::Report(if record.last_failed_attempt == Some(attempt) {
            FailKind::Failed
        } else {
            FailKind::Superseded
        });
    }
    // F6.
    let failure_count = record.failure_count.saturating_add(1);
    Failure::Record {
        failure_count,
        dead: failure_count >= max_failures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::tables::fixtures::*;

    #[test]
    fn f2_f3_f4_f5_f6_decide_each_failure() {
        let released = Record {
            claim_holder: None,
            claim_expires_at: None,
            ..leased(2)
        };
        let twice = Record {
            failure_count: 2,
            ..leased(3)
        };
        let table = [
            (
                leased(2),
                2,
                3,
                Failure::Record {
                    failure_count: 1,
                    dead: false,
                },
            ),
            (
                leased(2),
                2,
                1,
                Failure::Record {
                    failure_count: 1,
                    dead: true,
                },
            ),
            (
                twice,
                3,
                3,
                Failure::Record {
                    failure_count: 3,
                    dead: true,
                },
            ),
            (
                twice,
                3,
                4,
                Failure::Record {
                    failure_count: 3,
                    dead: false,
                },
            ),
            (leased(2), 1, 3, Failure::Report(FailKind::Superseded)),
            (
                processed(2, &[]),
                2,
                3,
                Failure::Report(FailKind::Superseded),
            ),
            (dead(2), 2, 3, Failure::Report(FailKind::DeadLettered)),
            (dead(2), 1, 3, Failure::Report(FailKind::Superseded)),
            (failed(2), 2, 3, Failure::Report(FailKind::Failed)),
            (fresh(), 0, 3, Failure::Report(FailKind::Superseded)),
            (released, 2, 3, Failure::Report(FailKind::Superseded)),
        ];
        for (record, attempt, max, expected) in table {
            assert_eq!(
                decide(&record, attempt, max),
                expected,
                "{record:?} {attempt} {max}"
            );
        }
    }

    #[test]
    fn f3_f6_the_outcome_reports_the_new_count_or_the_stored_one() {
        let table = [
            (
                Failure::Report(FailKind::Superseded),
                2,
                FailKind::Superseded,
                2,
            ),
            (
                Failure::Report(FailKind::DeadLettered),
                3,
                FailKind::DeadLettered,
                3,
            ),
            (
                Failure::Record {
                    failure_count: 3,
                    dead: false,
                },
                2,
                FailKind::Failed,
                3,
            ),
            (
                Failure::Record {
                    failure_count: 3,
                    dead: true,
                },
                2,
                FailKind::DeadLettered,
                3,
            ),
        ];
        for (decision, stored, outcome, count) in table {
            let got = decision.outcome(stored);
            assert_eq!(
                (got.outcome, got.failure_count),
                (outcome, count),
                "{decision:?}"
            );
        }
    }
}
