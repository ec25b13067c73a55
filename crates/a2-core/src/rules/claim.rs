//! Whether a ready event may be claimed now (C2, C3, C5), and when it may
//! be when it may not.
//!
//! A ready event is a lane-less pending event, or the first pending event
//! of its lane: the stores keep those in their ready sets. Among them, a
//! claim takes the ones with no live lease and no retry or due time still
//! to come; with none such, it answers `Busy` with the earliest time one
//! comes (C3).

use super::Record;
use crate::clock::Millis;

/// C3, C5, F4, DL1: when a ready event can next be claimed: its lease's
/// expiry while it is leased (C5: an expired lease is claimable by
/// anyone), else its retry or due time; `None` when nothing holds it.
pub fn waits_until(record: &Record<'_>) -> Option<Millis> {
    match (record.claim_holder, record.claim_expires_at) {
        (Some(_), Some(expires_at)) => Some(expires_at),
        _ => record.retry_at,
    }
}

/// C2: whether a ready event may be claimed at `now`.
pub fn claimable(record: &Record<'_>, now: Millis) -> bool {
    waits_until(record).is_none_or(|at| at <= now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c2_c3_c5_a_ready_event_waits_for_its_lease_or_its_retry_time() {
        for (record, now, until, expected) in crate::rules::tables::claim() {
            assert_eq!(waits_until(&record), until, "{record:?}");
            assert_eq!(claimable(&record, now), expected, "{record:?} {now}");
        }
    }
}
