//! Offsets of a stream and the session indexes they name.
//!
//! An offset is `{base:016}_{sub:016}`. In a stream that was never forked
//! the base is the index of the last event read and the sub part is 0. A
//! fork shares its source's offset space (the protocol's §8): its events
//! up to the fork point keep their source's offsets, and its own appends
//! continue from there. But a fork's session holds events its source never
//! had at that place — its own configuration marker and, when it was forked
//! in the middle of a byte chunk, a chunk with that chunk's first bytes —
//! which take indexes. Those [`Inserted`] events are listed in the fork's
//! configuration, and offsets count around them:
//!
//! - an event that is not inserted has the base `index - k` (k: the
//!   inserted events at or before it) and sub part 0;
//! - an inserted chunk holding the first `n` units of its source's next
//!   event has `{index - k}_{n}`: after the fork point, before the source's
//!   next offset;
//! - an inserted marker has the offset of the event before it (no data).
//!
//! With nothing inserted this is the plain index, so every offset a client
//! kept of a stream that was never forked stays valid.

use serde::{Deserialize, Serialize};

/// An event a fork inserted: its index, and for a partial chunk the units
/// of its source's next event it holds (`None`: the fork's marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Inserted(pub u64, pub Option<u64>);

/// A position in a stream's offset space: `{base}_{sub}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Position {
    pub base: u64,
    pub sub: u64,
}

impl Position {
    /// The plain offset of a session index.
    pub fn index(index: u64) -> Self {
        Self {
            base: index,
            sub: 0,
        }
    }
}

/// The offset of the event at `index` of a stream whose inserted events
/// are `inserted` (in index order).
pub(crate) fn offset_of(inserted: &[Inserted], index: u64) -> Position {
    let mut before = 0;
    for (k, &Inserted(at, partial)) in inserted.iter().enumerate() {
        if at > index {
            break;
        }
        before = k as u64 + 1;
        if at == index {
            return match partial {
                Some(units) => Position {
                    base: index - before,
                    sub: units,
                },
                // A marker: where the event before it stands.
                None if index == 0 => Position::index(0),
                None => offset_of(&inserted[..k], index - 1),
            };
        }
    }
    Position::index(index.saturating_sub(before))
}

/// The last index whose offset is at or before `position`: what a read
/// from `position` reads after, and what a fork at `position` takes.
pub(crate) fn index_after(inserted: &[Inserted], position: Position) -> u64 {
    let mut shifted = 0u64;
    for &Inserted(at, _) in inserted {
        if offset_of(inserted, at) <= position {
            shifted += 1;
        }
    }
    position.base.saturating_add(shifted)
}

/// `position` as the protocol writes it, at the end of `out`. Written by
/// hand rather than with `format!`'s padding, which cost more than the
/// rest of an append's answer.
pub(crate) fn push(out: &mut Vec<u8>, position: Position) {
    let mut bytes = *b"0000000000000000_0000000000000000";
    let fits = |n: u64| n < 10_000_000_000_000_000;
    if !fits(position.base) || !fits(position.sub) {
        // Past 16 digits (never, in practice): the plain form.
        out.extend_from_slice(format!("{:016}_{:016}", position.base, position.sub).as_bytes());
        return;
    }
    for (end, mut n) in [(16, position.base), (33, position.sub)] {
        let mut at = end;
        while n > 0 {
            at -= 1;
            bytes[at] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    }
    out.extend_from_slice(&bytes);
}

/// `position` as the protocol writes it.
pub(crate) fn text(position: Position) -> String {
    let mut out = Vec::with_capacity(33);
    push(&mut out, position);
    // ASCII digits and `_` only.
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(base: u64, sub: u64) -> Position {
        Position { base, sub }
    }

    #[test]
    fn a_stream_never_forked_counts_indexes() {
        assert_eq!(offset_of(&[], 7), pos(7, 0));
        assert_eq!(index_after(&[], pos(7, 0)), 7);
        assert_eq!(
            index_after(&[], pos(7, 3)),
            7,
            "a sub part means nothing here"
        );
    }

    /// A fork at index 10 of its source: its marker at 11, its appends from
    /// 12 on continue the source's offsets from 10.
    #[test]
    fn a_forks_marker_takes_no_offset() {
        let inserted = [Inserted(11, None)];
        let offsets: Vec<Position> = (9..=13).map(|i| offset_of(&inserted, i)).collect();
        assert_eq!(
            offsets,
            [pos(9, 0), pos(10, 0), pos(10, 0), pos(11, 0), pos(12, 0)]
        );
        assert_eq!(index_after(&inserted, pos(10, 0)), 11, "after the marker");
        assert_eq!(index_after(&inserted, pos(11, 0)), 12);
        assert_eq!(index_after(&inserted, pos(9, 0)), 9);
    }

    /// A fork at index 10 and 4 bytes into its source's event 11: marker at
    /// 11, those 4 bytes at 12 (offset 10_4, after the fork point and before
    /// the source's next offset), its appends from 13 on at 11, 12, …; a
    /// fork of that fork at its tail inherits both and adds its marker.
    #[test]
    fn a_partial_chunk_sits_between_the_fork_point_and_the_next_offset() {
        let inserted = [Inserted(11, None), Inserted(12, Some(4))];
        assert_eq!(offset_of(&inserted, 12), pos(10, 4));
        assert_eq!(offset_of(&inserted, 13), pos(11, 0));
        assert!(pos(10, 0) < pos(10, 4) && pos(10, 4) < pos(11, 0));
        assert_eq!(index_after(&inserted, pos(10, 0)), 11);
        assert_eq!(index_after(&inserted, pos(10, 4)), 12);
        assert_eq!(index_after(&inserted, pos(11, 0)), 13);
        let chained = [
            Inserted(11, None),
            Inserted(12, Some(4)),
            Inserted(13, None),
        ];
        assert_eq!(offset_of(&chained, 13), pos(10, 4), "the child's marker");
        assert_eq!(
            offset_of(&chained, 14),
            pos(11, 0),
            "the child's first append"
        );
        assert_eq!(index_after(&chained, pos(10, 4)), 13);
    }

    /// A fork at 0: its marker is its first event.
    #[test]
    fn a_fork_at_the_start_begins_at_zero() {
        let inserted = [Inserted(1, None)];
        assert_eq!(offset_of(&inserted, 1), pos(0, 0));
        assert_eq!(offset_of(&inserted, 2), pos(1, 0));
        assert_eq!(index_after(&inserted, pos(0, 0)), 1);
    }

    #[test]
    fn positions_are_written_as_the_protocol_sorts_them() {
        assert_eq!(text(pos(0, 0)), "0000000000000000_0000000000000000");
        assert_eq!(
            text(pos(1_234_567, 89)),
            "0000000001234567_0000000000000089"
        );
        assert!(text(pos(9, 5)) < text(pos(10, 0)));
        assert!(text(pos(10, 0)) < text(pos(10, 4)));
        assert_eq!(text(pos(u64::MAX, 0)), format!("{}_{:016}", u64::MAX, 0));
    }
}
