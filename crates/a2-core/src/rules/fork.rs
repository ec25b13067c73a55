//! Forks (FK1, FK2, FK3, FK4): what a fork may do, and what it copies.
//!
//! A fork copies each record as it is, but without its lease (FK2): the
//! fork holds the event as if the lease had been released (RL1), so a
//! pending event is claimable in the fork at once (once its lane allows),
//! by a new attempt, while the source's holder goes on in the source.

use crate::error::{Error, Result};
use crate::model::{ForkOrigin, ForkOutcome};
use crate::rules::Record;

/// FK4: the checks that need no store: a fork needs an index from 1 on
/// and a target other than its source. (Both names are checked as
/// session ids first.)
pub fn check_request(source: &str, at_index: u64, target: &str) -> Result<()> {
    if at_index == 0 {
        return Err(Error::invalid(format!(
            "cannot fork session {source:?} at index 0: a fork shares at least the first event"
        )));
    }
    if source == target {
        return Err(Error::invalid(format!(
            "cannot fork session {source:?} onto itself: name another target"
        )));
    }
    Ok(())
}

/// FK3: what a fork does when its target exists (has events and has not
/// expired) with the origin `origin`: the same fork again writes nothing
/// and answers [`ForkOutcome::AlreadyForked`]; anything else is
/// `SessionExists`, nothing written.
pub fn existing_target(
    source: &str,
    at_index: u64,
    target: &str,
    origin: Option<&ForkOrigin>,
) -> Result<ForkOutcome> {
    match origin {
        Some(o) if o.session == source && o.index == at_index => Ok(ForkOutcome::AlreadyForked),
        Some(o) => Err(Error::session_exists(
            target,
            format!(
                "it is a fork of {:?} at index {}, not of {source:?} at {at_index}",
                o.session, o.index
            ),
        )),
        None => Err(Error::session_exists(
            target,
            "it has events of its own: a fork creates its target",
        )),
    }
}

/// FK4: whether `source`, whose frontier is `frontier` (0: no events, or
/// expired) and whose first retained index is `first`, can be forked at
/// `at_index`: it must have events, the index must lie within them, and
/// the events up to it must not all be trimmed away (`Trimmed` names the
/// first retained index).
pub fn check_source(source: &str, frontier: u64, first: u64, at_index: u64) -> Result<()> {
    if frontier == 0 {
        return Err(no_source(source));
    }
    if at_index > frontier {
        return Err(Error::invalid(format!(
            "cannot fork session {source:?} at index {at_index}: its last index is {frontier}"
        )));
    }
    if at_index < first {
        return Err(Error::trimmed(source, first));
    }
    Ok(())
}

/// FK4: `source` has no events (or expired): nothing to fork.
pub fn no_source(source: &str) -> Error {
    Error::invalid(format!(
        "session {source:?} has no events: there is nothing to fork"
    ))
}

/// FK2: the counters of a fork (I1), summed over its copied records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForkCounters {
    /// Pending events (neither processed nor dead-lettered).
    pub pending_count: u64,
    /// Dead-lettered events.
    pub failed_count: u64,
    /// Claims over the copied events.
    pub attempt_count: u64,
    /// Failures over the copied events (since each was appended or revived).
    pub failure_count: u64,
}

impl ForkCounters {
    /// Counts one copied record.
    pub fn add(&mut self, record: &Record<'_>) {
        if record.failed_at.is_some() {
            self.failed_count += 1;
        } else if record.processed_at.is_none() {
            self.pending_count += 1;
        }
        self.attempt_count += u64::from(record.attempt_count);
        self.failure_count += u64::from(record.failure_count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::rules::tables::fixtures::*;

    #[test]
    fn a_fork_needs_an_index_and_another_target() {
        assert!(check_request("a", 1, "b").is_ok());
        for (at, target) in [(0, "b"), (3, "a")] {
            assert_eq!(
                check_request("a", at, target).unwrap_err().code(),
                ErrorCode::InvalidArgument,
                "{at} {target}"
            );
        }
    }

    #[test]
    fn the_same_fork_again_writes_nothing_and_another_is_refused() {
        let same = ForkOrigin {
            session: "a".into(),
            index: 3,
        };
        let other = ForkOrigin {
            session: "a".into(),
            index: 4,
        };
        assert_eq!(
            existing_target("a", 3, "b", Some(&same)).unwrap(),
            ForkOutcome::AlreadyForked
        );
        for origin in [Some(&other), None] {
            assert_eq!(
                existing_target("a", 3, "b", origin).unwrap_err().code(),
                ErrorCode::SessionExists
            );
        }
    }

    #[test]
    fn the_source_must_hold_the_index() {
        let cases = [
            // (frontier, first, at) → outcome
            (5, 1, 5, Ok(())),
            (5, 1, 1, Ok(())),
            (5, 3, 3, Ok(())),
            (0, 1, 1, Err(ErrorCode::InvalidArgument)),
            (5, 1, 6, Err(ErrorCode::InvalidArgument)),
            (5, 4, 3, Err(ErrorCode::Trimmed)),
        ];
        for (frontier, first, at, expected) in cases {
            assert_eq!(
                check_source("a", frontier, first, at).map_err(|e| e.code()),
                expected,
                "frontier {frontier}, first {first}, at {at}"
            );
        }
    }

    #[test]
    fn counters_sum_the_copied_records() {
        static NONE: [String; 0] = [];
        let mut counters = ForkCounters::default();
        for record in [fresh(), leased(2), failed(1), dead(3), processed(1, &NONE)] {
            counters.add(&record);
        }
        assert_eq!(
            counters,
            ForkCounters {
                pending_count: 3,
                failed_count: 1,
                attempt_count: 7,
                failure_count: 2,
            }
        );
    }
}
