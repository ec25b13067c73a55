//! Whether a lease is held (RN2, RL1).

use super::Record;
use crate::clock::Millis;

/// RN2, RL1: `holder` holds a live lease on `attempt` of this event at
/// `now`: the attempt is the latest, the event is pending, the lease is
/// this holder's and has not run out.
pub fn held(record: &Record<'_>, attempt: u32, holder: &str, now: Millis) -> bool {
    record.attempt_count == attempt
        && record.is_pending()
        && record.claim_holder == Some(holder)
        && record.claim_expires_at.is_some_and(|at| at > now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::tables::fixtures::*;

    #[test]
    fn rn2_rl1_a_lease_is_held_by_its_holder_until_it_runs_out() {
        let table = [
            (leased(2), 2, "w", 99, true),
            (leased(2), 2, "w", 100, false),
            (leased(2), 2, "v", 50, false),
            (leased(2), 1, "w", 50, false),
            (leased(2), 3, "w", 50, false),
            (failed(2), 2, "w", 50, false),
            (dead(2), 2, "w", 50, false),
            (
                Record {
                    processed_at: Some(1),
                    ..leased(2)
                },
                2,
                "w",
                50,
                false,
            ),
        ];
        for (record, attempt, holder, now, expected) in table {
            assert_eq!(
                held(&record, attempt, holder, now),
                expected,
                "{record:?} {attempt} {holder} {now}"
            );
        }
    }
}
