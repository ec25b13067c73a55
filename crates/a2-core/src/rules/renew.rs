//! What a renewal does with each claim (RN1, RN2, RN3).

use super::{Record, lease};
use crate::clock::Millis;

/// The decision on renewing one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// RN1: a newer attempt exists; listed as superseded.
    Superseded,
    /// RN2: the lease moves to the new expiry; listed as renewed.
    Renew,
    /// RN3: in neither list, nothing written.
    Neither,
}

/// RN1, RN2, RN3: the fate of renewing `attempt` for `holder` at `now`
/// until `expires_at`.
pub fn decide(
    record: &Record<'_>,
    attempt: u32,
    holder: &str,
    now: Millis,
    expires_at: Millis,
) -> Renewal {
    // CN2: a cancel supersedes the attempt that was running.
    if record.attempt_count > attempt || record.cancelled_at.is_some() {
        Renewal::Superseded
    } else if lease::held(record, attempt, holder, now) && expires_at > now {
        Renewal::Renew
    } else {
        Renewal::Neither
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rn1_rn2_rn3_decide_each_renewal() {
        for (record, attempt, holder, now, expires, expected) in crate::rules::tables::renew() {
            assert_eq!(
                decide(&record, attempt, holder, now, expires),
                expected,
                "{record:?} {attempt} {holder} {now} {expires}"
            );
        }
    }
}
