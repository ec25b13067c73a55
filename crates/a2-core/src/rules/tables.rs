//! The rules' decision tables: each rule's unit test runs its table, and
//! a second implementation of a rule is held to the same rows — the Redis
//! store's Lua helpers (`crates/a2-redis/lua/rules.lua`), by
//! `crates/a2-redis/tests/lua_rules.rs` on a real `redis-server`. Enabled
//! by the `rule-tables` feature, for tests; never enable it in an
//! application.

use super::Record;
use super::renew::Renewal;
use crate::clock::Millis;

/// Records in the states the tables start from.
pub mod fixtures {
    use super::Record;
    /// Never claimed.
    pub fn fresh() -> Record<'static> {
        Record::default()
    }

    /// Attempt `attempt` leased to `w` until 100.
    pub fn leased(attempt: u32) -> Record<'static> {
        Record {
            attempt_count: attempt,
            claim_holder: Some("w"),
            claim_expires_at: Some(100),
            ..Record::default()
        }
    }

    /// Attempt `attempt` failed once, lease cleared.
    pub fn failed(attempt: u32) -> Record<'static> {
        Record {
            attempt_count: attempt,
            failure_count: 1,
            last_failed_attempt: Some(attempt),
            ..Record::default()
        }
    }

    /// Attempt `attempt` failed for good.
    pub fn dead(attempt: u32) -> Record<'static> {
        Record {
            failed_at: Some(50),
            ..failed(attempt)
        }
    }

    /// `record` as a cancel leaves it (CN1).
    pub fn cancelled(record: Record<'static>) -> Record<'static> {
        Record {
            processed_at: Some(70),
            cancelled_at: Some(70),
            claim_holder: None,
            claim_expires_at: None,
            failed_at: None,
            ..record
        }
    }

    /// Processed by attempt `attempt`, returning `ids`.
    pub fn processed(attempt: u32, ids: &'static [String]) -> Record<'static> {
        Record {
            attempt_count: attempt,
            processed_at: Some(60),
            processed_by_attempt: Some(attempt),
            returned_event_ids: ids,
            ..Record::default()
        }
    }
}

use fixtures::*;

/// A row of [`renew`]: a record, the attempt renewed, its holder, now,
/// the new expiry, and the decision.
pub type RenewRow = (Record<'static>, u32, &'static str, Millis, Millis, Renewal);

/// A row of [`claim`]: a ready event's record, now, when it can next be
/// claimed, and whether it can be now.
pub type ClaimRow = (Record<'static>, Millis, Option<Millis>, bool);

/// A row of [`delay`]: `not_before`, `delay_ms`, `settled`, store now, and
/// the due time decided (`Some(None)`: claimable at once), or `None` when
/// refused.
pub type DelayRow = (
    Option<Millis>,
    Option<u64>,
    bool,
    Millis,
    Option<Option<Millis>>,
);

/// A row of [`deadline`]: a session's ttl and expiry time, its last
/// activity, and its deadline.
pub type DeadlineRow = (Option<u64>, Option<Millis>, Millis, Option<Millis>);

/// RN1, RN2, RN3 ([`super::renew::decide`]).
pub fn renew() -> Vec<RenewRow> {
    vec![
        (leased(2), 2, "w", 50, 200, Renewal::Renew),
        // A new expiry not in the future renews nothing.
        (leased(2), 2, "w", 50, 50, Renewal::Neither),
        // A lease that ran out is not renewed.
        (leased(2), 2, "w", 100, 200, Renewal::Neither),
        (leased(2), 2, "v", 50, 200, Renewal::Neither),
        (leased(2), 1, "w", 50, 200, Renewal::Superseded),
        (leased(3), 2, "w", 50, 200, Renewal::Superseded),
        (leased(2), 3, "w", 50, 200, Renewal::Neither),
        (dead(3), 2, "w", 50, 200, Renewal::Superseded),
        (dead(2), 2, "w", 50, 200, Renewal::Neither),
        (failed(2), 2, "w", 50, 200, Renewal::Neither),
        (processed(2, &[]), 2, "w", 50, 200, Renewal::Neither),
        (cancelled(leased(2)), 2, "w", 50, 200, Renewal::Superseded),
        (fresh(), 1, "w", 50, 200, Renewal::Neither),
    ]
}

/// C2, C3, C5 ([`super::claim::waits_until`], [`super::claim::claimable`]).
pub fn claim() -> Vec<ClaimRow> {
    let retrying = |at| Record {
        retry_at: Some(at),
        ..failed(1)
    };
    vec![
        (fresh(), 50, None, true),
        (failed(1), 50, None, true),
        // A live lease holds it (C2); an expired one does not (C5).
        (leased(1), 99, Some(100), false),
        (leased(1), 100, Some(100), true),
        (leased(1), 150, Some(100), true),
        // A retry or due time not yet come holds it (F4, DL1).
        (retrying(80), 79, Some(80), false),
        (retrying(80), 80, Some(80), true),
        (
            Record {
                retry_at: Some(30),
                ..fresh()
            },
            10,
            Some(30),
            false,
        ),
        // An expiry without a holder is not a lease.
        (
            Record {
                claim_expires_at: Some(100),
                ..fresh()
            },
            50,
            None,
            true,
        ),
    ]
}

/// EX1 ([`crate::Expiry::deadline`]). Ttls are at most
/// [`crate::clock::MAX_TTL_MS`], as every store keeps them (X2).
pub fn deadline() -> Vec<DeadlineRow> {
    vec![
        (None, None, 1_000, None),
        (Some(500), None, 1_000, Some(1_500)),
        (None, Some(1_200), 1_000, Some(1_200)),
        // The earlier of the two.
        (Some(500), Some(1_200), 1_000, Some(1_200)),
        (Some(100), Some(1_200), 1_000, Some(1_100)),
        (Some(0), None, 1_000, Some(1_000)),
        // An expiry time before the last activity is still the deadline.
        (None, Some(10), 1_000, Some(10)),
        (
            Some(crate::clock::MAX_TTL_MS),
            None,
            0,
            Some(crate::clock::MAX_TTL_MS as Millis),
        ),
    ]
}

/// EX3 ([`super::lifecycle::expired`]): a deadline, now, and whether the
/// session is gone.
pub fn expired() -> Vec<(Option<Millis>, Millis, bool)> {
    vec![
        (None, 1_000, false),
        (Some(1_000), 999, false),
        (Some(1_000), 1_000, true),
        (Some(1_000), 1_001, true),
    ]
}

/// DL1 ([`super::delay::due_at`]).
pub fn delay() -> Vec<DelayRow> {
    let far = crate::clock::MAX_TTL_MS as Millis;
    vec![
        (None, None, false, 1_000, Some(None)),
        // A time to come holds the event back; one come or gone does not.
        (Some(5_000), None, false, 1_000, Some(Some(5_000))),
        (Some(1_000), None, false, 1_000, Some(None)),
        (Some(900), None, false, 1_000, Some(None)),
        // A delay counts from the store's now.
        (None, Some(2_000), false, 1_000, Some(Some(3_000))),
        (None, Some(0), false, 1_000, Some(None)),
        // A settled event is never claimed: it waits for nothing.
        (Some(5_000), None, true, 1_000, Some(None)),
        // Up to 100 years ahead, not beyond.
        (
            Some(1_000 + far),
            None,
            false,
            1_000,
            Some(Some(1_000 + far)),
        ),
        (Some(1_001 + far), None, false, 1_000, None),
        (Some(Millis::MAX), None, false, 1_000, None),
    ]
}

/// A5, A6 ([`super::append::classify`]): ids found, batch length, and
/// what the batch is.
pub fn classify() -> Vec<(usize, usize, super::append::Found)> {
    use super::append::Found;
    vec![
        (0, 0, Found::None),
        (0, 1, Found::None),
        (0, 3, Found::None),
        (1, 1, Found::All),
        (3, 3, Found::All),
        (1, 3, Found::Some),
        (2, 3, Found::Some),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn ex1_the_deadline_is_the_earlier_of_ttl_and_expiry_time() {
        for (ttl_ms, expires_at, updated_at, expected) in super::deadline() {
            let expiry = crate::Expiry { ttl_ms, expires_at };
            assert_eq!(
                expiry.deadline(updated_at),
                expected,
                "{expiry:?} {updated_at}"
            );
        }
    }

    #[test]
    fn ex3_a_session_is_gone_at_its_deadline() {
        for (deadline, now, expected) in super::expired() {
            assert_eq!(
                crate::rules::lifecycle::expired(deadline, now),
                expected,
                "{deadline:?} {now}"
            );
        }
    }
}
