//! Deterministic event ids for what an attempt writes (RT10).
//!
//! Events a handler returns, and progress events it appends, get ids derived
//! from the session, the event's index, the attempt and the event's position
//! among what the attempt wrote, when the handler left the id out. Writing
//! them again after a lost acknowledgement is then a replay the store
//! recognises (CO3, A5), not a second copy or a `PartialDuplicateBatch`.
//!
//! The hash is 128-bit FNV-1a over an injective encoding of those parts: no
//! new dependency, stable across processes and compiler versions. It is not
//! a cryptographic hash; a session's owner who crafted a collision would
//! only have one of their own writes refused as a duplicate.

use a2_core::NewEvent;

/// What the attempt wrote: events returned on completion or progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Returned by the handler, appended by `complete_attempt`.
    Returned,
    /// Appended through the context while the handler ran.
    Progress,
}

/// The id of the `position`-th event of `kind` written by attempt `attempt`
/// of event `index` of `session`: 32 lowercase hex digits.
///
/// ```text
/// derive("s", 1, 1, Returned, 0) != derive("s", 1, 2, Returned, 0)
/// ```
pub(crate) fn derive(session: &str, index: u64, attempt: u32, kind: Kind, position: u64) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut hash = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for &byte in bytes {
            hash ^= u128::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    // Length-prefixed session, then fixed-width numbers: injective.
    feed(&(session.len() as u64).to_le_bytes());
    feed(session.as_bytes());
    feed(&index.to_le_bytes());
    feed(&attempt.to_le_bytes());
    feed(&[match kind {
        Kind::Returned => 1,
        Kind::Progress => 2,
    }]);
    feed(&position.to_le_bytes());
    format!("{hash:032x}")
}

/// Gives every event without an id its derived id, counting positions from
/// `first`.
pub(crate) fn fill(
    events: &mut [NewEvent],
    session: &str,
    index: u64,
    attempt: u32,
    kind: Kind,
    first: u64,
) {
    for (offset, event) in events.iter_mut().enumerate() {
        if event.id.is_none() {
            let position = first + offset as u64;
            event.id = Some(derive(session, index, attempt, kind, position));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_by_every_part_and_repeat_exactly() {
        let base = derive("s", 1, 1, Kind::Returned, 0);
        assert_eq!(base, derive("s", 1, 1, Kind::Returned, 0));
        assert_eq!(base.len(), 32);
        for other in [
            derive("t", 1, 1, Kind::Returned, 0),
            derive("s", 2, 1, Kind::Returned, 0),
            derive("s", 1, 2, Kind::Returned, 0),
            derive("s", 1, 1, Kind::Progress, 0),
            derive("s", 1, 1, Kind::Returned, 1),
            // The length prefix keeps "s" + index from colliding with a
            // longer session id.
            derive("s\u{1}", 1, 1, Kind::Returned, 0),
        ] {
            assert_ne!(base, other);
        }
    }
}
