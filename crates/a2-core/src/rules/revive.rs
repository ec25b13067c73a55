//! What a revive does (RV2, RV3).

use super::Record;

/// RV2, RV3: whether a revive brings this event back (it is dead-lettered
/// and not processed); any other event is `NotDeadLettered`, nothing
/// written.
pub fn revives(record: &Record<'_>) -> bool {
    record.failed_at.is_some() && record.processed_at.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::tables::fixtures::*;

    #[test]
    fn rv2_rv3_only_a_dead_letter_is_revived() {
        let table = [
            (dead(2), true),
            (failed(2), false),
            (leased(1), false),
            (fresh(), false),
            (processed(1, &[]), false),
        ];
        for (record, expected) in table {
            assert_eq!(revives(&record), expected, "{record:?}");
        }
    }
}
