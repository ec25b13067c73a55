//! What a cancel does (CN1, CN3).

use super::Record;

/// The decision on cancelling one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// CN1: a pending event is settled as cancelled; the session's
    /// `pending_count` goes down by one.
    Pending,
    /// CN1: a dead letter is settled as cancelled, so its lane moves on;
    /// the session's `failed_count` goes down by one.
    DeadLetter,
    /// CN3: settled already (processed, settled at append, cancelled):
    /// `NotPending`, nothing written.
    NotPending,
}

impl Cancel {
    /// Whether the cancel writes anything.
    pub fn writes(self) -> bool {
        self != Cancel::NotPending
    }
}

/// CN1, CN3: what cancelling this event does.
pub fn decide(record: &Record<'_>) -> Cancel {
    if record.processed_at.is_some() {
        Cancel::NotPending
    } else if record.failed_at.is_some() {
        Cancel::DeadLetter
    } else {
        Cancel::Pending
    }
}

/// CN5: the attempt a cancel stops, announced to the worker holding it:
/// the current one, while a lease was handed out and not given back.
pub fn running_attempt(record: &Record<'_>) -> Option<u32> {
    (record.claim_holder.is_some() && record.attempt_count > 0).then_some(record.attempt_count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::tables::fixtures::*;

    #[test]
    fn cn1_cn3_decide_each_cancel() {
        let table = [
            (fresh(), Cancel::Pending, None),
            (leased(2), Cancel::Pending, Some(2)),
            (failed(2), Cancel::Pending, None),
            (dead(3), Cancel::DeadLetter, None),
            (processed(1, &[]), Cancel::NotPending, None),
            (cancelled(leased(1)), Cancel::NotPending, None),
        ];
        for (record, expected, running) in table {
            assert_eq!(decide(&record), expected, "{record:?}");
            assert_eq!(running_attempt(&record), running, "{record:?}");
        }
    }
}
