//! Closing (CL1, CL2) and trimming (TR1, TR2, TR3).

use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::model::CloseOutcome;
use crate::rules::Record;
use crate::validate::MAX_LIMIT;

/// CL1: what closing a session does, given its frontier and its close (if
/// it was closed). `Ok(Closed)` is the close to record; `AlreadyClosed`
/// writes nothing; a session without events has nothing to close.
pub fn close(
    session: &str,
    frontier: u64,
    closed: Option<(u64, Millis)>,
    now: Millis,
) -> Result<CloseOutcome> {
    if let Some((frontier, closed_at)) = closed {
        return Ok(CloseOutcome::AlreadyClosed {
            frontier,
            closed_at,
        });
    }
    if frontier == 0 {
        return Err(nothing_to_close(session));
    }
    Ok(CloseOutcome::Closed {
        frontier,
        closed_at: now,
    })
}

/// CL1: `session` has no events (or it expired), so nothing to close.
pub fn nothing_to_close(session: &str) -> Error {
    Error::invalid(format!(
        "session {session:?} has no events: there is nothing to close"
    ))
}

/// TR2: a trim through `through` past the session's last index
/// `frontier`.
pub fn beyond_frontier(session: &str, through: u64, frontier: u64) -> Error {
    Error::invalid(format!(
        "cannot trim session {session:?} through {through}: its last index is {frontier}"
    ))
}

/// EX2: `session` has no events (or it expired), so no expiry to set.
pub fn no_session(session: &str) -> Error {
    Error::invalid(format!(
        "session {session:?} has no events: there is no expiry to set"
    ))
}

/// EX3: whether a session whose deadline is `deadline` has expired at
/// `now`.
pub fn expired(deadline: Option<Millis>, now: Millis) -> bool {
    deadline.is_some_and(|d| d <= now)
}

/// ST6, EX4: how a feed ends that finds the event it delivered last gone,
/// or another in its place: its session expired when the deadline the feed
/// last read (`deadline`) has passed at `now`, else it was cleared.
pub fn log_gone(session: &str, deadline: Option<Millis>, now: Millis) -> Error {
    if expired(deadline, now) {
        return Error::session_expired(session);
    }
    Error::SessionCleared {
        session: session.to_owned(),
    }
}

/// CL2, CL3: a write that would add events to `session`, which is closed
/// when `closed` is true: refused. (Replays are answered before this.)
pub fn check_open(session: &str, closed: bool) -> Result<()> {
    if closed {
        return Err(Error::session_closed(session));
    }
    Ok(())
}

/// TR1, TR2: the events a trim through `through` removes from a session
/// whose frontier is `frontier` and whose first retained index is `first`:
/// `first ..= last`, at most [`MAX_LIMIT`] (X1) of them, or `None` when the trim
/// removes nothing (at or below an earlier one).
pub fn trim_range(
    session: &str,
    frontier: u64,
    first: u64,
    through: u64,
) -> Result<Option<(u64, u64)>> {
    if through > frontier {
        return Err(beyond_frontier(session, through, frontier));
    }
    if through < first {
        return Ok(None);
    }
    let most = MAX_LIMIT as u64;
    Ok(Some((first, through.min(first.saturating_add(most - 1)))))
}

/// TR2: the event at `index`, whose record is `record`, may be trimmed only
/// when it is settled (processed); a pending or dead-lettered event refuses
/// the trim, naming itself.
pub fn check_trimmable(session: &str, index: u64, record: &Record<'_>) -> Result<()> {
    if record.processed_at.is_some() {
        return Ok(());
    }
    Err(unsettled(session, index, record.failed_at.is_some()))
}

/// TR2: the refusal of a trim whose range holds the unsettled event at
/// `index` (dead-lettered when `dead`, else pending).
pub fn unsettled(session: &str, index: u64, dead: bool) -> Error {
    let state = if dead { "dead-lettered" } else { "pending" };
    Error::InvalidArgument {
        message: format!(
            "cannot trim session {session:?} through event {index}: it is {state} (only settled events are trimmed)"
        ),
        index: Some(index),
    }
}

/// TR3: a read of `session` after `after_index` needs trimmed events when
/// it starts before the first retained index `first`.
pub fn check_retained(session: &str, first: u64, after_index: u64) -> Result<()> {
    if after_index.saturating_add(1) < first {
        return Err(Error::trimmed(session, first));
    }
    Ok(())
}

/// TR3: an append's cause at `index` needs the event there, which a trim
/// took away when `index` is below the first retained index `first`.
pub fn check_cause_retained(session: &str, first: u64, index: u64) -> Result<()> {
    if is_trimmed(first, index) {
        return Err(Error::trimmed(session, first));
    }
    Ok(())
}

/// RT19: the snapshots a trim through `through` would leave behind: those
/// older than the new first retained index (`through + 1`), whose
/// reducers' state could no longer be read (TR3), by reducer name.
pub fn snapshots_behind(
    snapshots: &[crate::model::SnapshotInfo],
    through: u64,
) -> Vec<&crate::model::SnapshotInfo> {
    snapshots.iter().filter(|s| s.index < through).collect()
}

/// RT19: how a trim that would leave `behind` unreadable is refused, naming
/// each reducer and its snapshot's index, and `how` to go on anyway.
pub fn snapshots_behind_message(
    session: &str,
    through: u64,
    behind: &[&crate::model::SnapshotInfo],
    how: &str,
) -> String {
    let names: Vec<String> = behind
        .iter()
        .map(|s| format!("{:?} (at #{})", s.reducer, s.index))
        .collect();
    format!(
        "trimming {session:?} through #{through} would leave the snapshots of {} behind: \
         their state could no longer be read (TR3). Write them at #{through} or later first \
         (App::trim does), or {how}",
        names.join(", ")
    )
}

/// CL4: a feed that read through `after` has read the whole log of a
/// session closed at `closed` (the close's frontier), and ends cleanly.
pub fn feed_complete(closed: Option<u64>, after: u64) -> bool {
    closed.is_some_and(|frontier| after >= frontier)
}

/// TR3: `index` names an event that was trimmed away.
pub fn is_trimmed(first: u64, index: u64) -> bool {
    index >= 1 && index < first
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::rules::tables::fixtures::*;

    #[test]
    fn snapshots_behind_the_trim_point_are_named() {
        let info = |reducer: &str, index| crate::model::SnapshotInfo {
            reducer: reducer.into(),
            index,
            updated_at: 0,
        };
        let snapshots = [info("a", 4), info("b", 5), info("c", 9)];
        let names = |through| -> Vec<String> {
            snapshots_behind(&snapshots, through)
                .iter()
                .map(|s| s.reducer.clone())
                .collect()
        };
        assert_eq!(names(3), Vec::<String>::new(), "all at or past the trim");
        assert_eq!(
            names(5),
            ["a"],
            "a snapshot at the trim point stays readable"
        );
        assert_eq!(names(6), ["a", "b"]);
        assert_eq!(names(10), ["a", "b", "c"]);
        let behind = snapshots_behind(&snapshots, 6);
        let message = snapshots_behind_message("s", 6, &behind, "pass --force");
        assert!(
            message.contains("\"a\" (at #4), \"b\" (at #5)") && message.ends_with("pass --force"),
            "{message}"
        );
    }

    #[test]
    fn closes_once_and_answers_the_first_close_after() {
        let cases = [
            (
                3,
                None,
                Ok(CloseOutcome::Closed {
                    frontier: 3,
                    closed_at: 9,
                }),
            ),
            (
                5,
                Some((3, 7)),
                Ok(CloseOutcome::AlreadyClosed {
                    frontier: 3,
                    closed_at: 7,
                }),
            ),
            (0, None, Err(ErrorCode::InvalidArgument)),
        ];
        for (frontier, closed, expected) in cases {
            let got = close("s", frontier, closed, 9).map_err(|e| e.code());
            assert_eq!(got, expected, "frontier {frontier}, closed {closed:?}");
        }
        assert_eq!(
            check_open("s", true).unwrap_err().code(),
            ErrorCode::SessionClosed
        );
        assert!(check_open("s", false).is_ok());
    }

    #[test]
    fn trims_what_lies_between_the_first_index_and_the_bound() {
        let cases = [
            // (frontier, first, through) → range or error
            (10, 1, 4, Ok(Some((1, 4)))),
            (10, 5, 4, Ok(None)),
            (10, 5, 10, Ok(Some((5, 10)))),
            (10, 1, 0, Ok(None)),
            (10, 1, 11, Err(ErrorCode::InvalidArgument)),
            (0, 1, 1, Err(ErrorCode::InvalidArgument)),
            (50_000, 1, 50_000, Ok(Some((1, 10_000)))),
        ];
        for (frontier, first, through, expected) in cases {
            let got = trim_range("s", frontier, first, through).map_err(|e| e.code());
            assert_eq!(
                got, expected,
                "frontier {frontier}, first {first}, through {through}"
            );
        }
    }

    #[test]
    fn only_settled_events_are_trimmed() {
        static NONE: [String; 0] = [];
        assert!(check_trimmable("s", 1, &processed(1, &NONE)).is_ok());
        for record in [fresh(), leased(1), failed(1), dead(1)] {
            let error = check_trimmable("s", 7, &record).unwrap_err();
            assert_eq!(error.code(), ErrorCode::InvalidArgument);
            assert!(error.to_string().contains("event 7"), "{error}");
        }
    }

    #[test]
    fn reads_before_the_first_retained_index_are_trimmed() {
        assert!(check_retained("s", 1, 0).is_ok());
        assert!(check_retained("s", 5, 4).is_ok());
        assert!(check_retained("s", 5, 9).is_ok());
        let error = check_retained("s", 5, 3).unwrap_err();
        assert!(
            matches!(error, Error::Trimmed { ref session, first_index: 5 } if session == "s"),
            "{error}"
        );
        assert!(is_trimmed(5, 4) && !is_trimmed(5, 5) && !is_trimmed(5, 0));
    }

    #[test]
    fn a_log_gone_after_its_deadline_expired_else_it_was_cleared() {
        let cases = [
            (Some(10), 10, ErrorCode::SessionExpired),
            (Some(10), 9, ErrorCode::SessionCleared),
            (None, 1_000, ErrorCode::SessionCleared),
        ];
        for (deadline, now, code) in cases {
            assert_eq!(
                log_gone("s", deadline, now).code(),
                code,
                "{deadline:?} at {now}"
            );
        }
    }
}
