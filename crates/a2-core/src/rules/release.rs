//! What a release does with each claim (RL1).

use super::{Record, lease};
use crate::clock::Millis;

/// RL1: whether releasing `attempt` for `holder` at `now` ends a lease:
/// only this holder's live lease on the latest attempt of a pending event
/// is released; anything else is left as it is and not listed.
pub fn releases(record: &Record<'_>, attempt: u32, holder: &str, now: Millis) -> bool {
    lease::held(record, attempt, holder, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::tables::fixtures::*;

    #[test]
    fn rl1_only_a_live_lease_of_the_holder_is_released() {
        let table = [
            (leased(1), 1, "w", 10, true),
            (leased(1), 1, "w", 100, false),
            (leased(1), 1, "x", 10, false),
            (leased(2), 1, "w", 10, false),
            (failed(1), 1, "w", 10, false),
            (fresh(), 0, "w", 10, false),
        ];
        for (record, attempt, holder, now, expected) in table {
            assert_eq!(
                releases(&record, attempt, holder, now),
                expected,
                "{record:?}"
            );
        }
    }
}
