//! Last writer wins, per participant and field (P1).

use crate::clock::Millis;

/// P1: whether a write sent at `at` applies over the stored entry
/// (`stored`: its `at` and expiry, if there is one) at store time `now`.
/// A stored entry with a strictly newer `at` survives; a tie goes to the
/// incoming write; an entry already expired counts as absent.
pub fn applies(stored: Option<(Millis, Millis)>, at: Millis, now: Millis) -> bool {
    match stored {
        Some((stored_at, expires_at)) => expires_at <= now || stored_at <= at,
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p1_the_newer_write_wins_and_a_tie_goes_to_the_incoming_one() {
        // (stored (at, expires_at), incoming at, now, applies)
        let table = [
            (None, 5, 10, true),
            (Some((4, 20)), 5, 10, true),
            (Some((5, 20)), 5, 10, true),
            (Some((6, 20)), 5, 10, false),
            // Expired entries count as absent.
            (Some((6, 10)), 5, 10, true),
        ];
        for (stored, at, now, expected) in table {
            assert_eq!(applies(stored, at, now), expected, "{stored:?} {at} {now}");
        }
    }
}
