//! Which indexes exist (CO1, F1, RV1), what a read covers (R1, TR3), and
//! logs without holes (E1).

use crate::error::{Error, Result};

/// CO1, F1, RV1: `index` names no event of `session`, whose frontier is
/// `frontier` (0 for an unknown session, which has no events at all).
pub fn out_of_range(session: &str, index: u64, frontier: u64) -> Error {
    if frontier == 0 {
        return Error::invalid(format!(
            "session {session:?} has no events, so no event {index}"
        ));
    }
    Error::invalid(format!(
        "index {index} is outside 1..={frontier} of session {session:?}"
    ))
}

/// CN4, RV1: a call names event `index` of `session`, which holds no
/// event there: `Trimmed` when a trim took it away (below `first`, the
/// first retained index), else [`out_of_range`] of `frontier` (0 for an
/// unknown session, whose `first` is 1).
///
/// ```
/// use a2_core::ErrorCode;
/// use a2_core::rules::read::no_event;
/// assert_eq!(no_event("s", 3, 5, 9).code(), ErrorCode::Trimmed);
/// assert_eq!(no_event("s", 12, 5, 9).code(), ErrorCode::InvalidArgument);
/// assert_eq!(no_event("s", 1, 1, 0).code(), ErrorCode::InvalidArgument);
/// ```
pub fn no_event(session: &str, index: u64, first: u64, frontier: u64) -> Error {
    if super::lifecycle::is_trimmed(first, index) {
        return Error::trimmed(session, first);
    }
    out_of_range(session, index, frontier)
}

/// R1, TR3: the indexes a read of `range` covers, as (after, through], in
/// a log whose first retained index is `first` and whose frontier is
/// `frontier`; a read that starts before `first` needs trimmed events
/// (`Trimmed`).
///
/// ```
/// use a2_core::ReadRange;
/// use a2_core::rules::read::span;
/// let all = ReadRange::default();
/// assert_eq!(span("s", 1, 9, all).unwrap(), (0, 9));
/// let some = ReadRange { after_index: 4, through_index: Some(20) };
/// assert_eq!(span("s", 3, 9, some).unwrap(), (4, 9));
/// assert!(span("s", 6, 9, some).is_err());
/// ```
pub fn span(
    session: &str,
    first: u64,
    frontier: u64,
    range: crate::model::ReadRange,
) -> Result<(u64, u64)> {
    super::lifecycle::check_retained(session, first, range.after_index)?;
    let through = range.through_index.unwrap_or(u64::MAX).min(frontier);
    Ok((range.after_index, through))
}

/// E1: the log of `session` has no entry at `index`, below its frontier.
pub fn missing(session: &str, index: u64) -> Error {
    Error::corrupted(
        format!("event {index} of session {session:?} is missing from the log"),
        Some(session),
        Some(index),
    )
}

/// E1, as a read goes: checks that the rows a read returns follow each
/// other without a hole. Start it after the index the read starts after,
/// feed it each row's index in order, and end it with the index the read
/// must reach.
///
/// ```
/// use a2_core::rules::read::Gapless;
///
/// let mut check = Gapless::after("s", 0);
/// for index in [1, 2, 3] {
///     check.next(index)?;
/// }
/// check.reached(3)?;
/// assert!(check.reached(4).is_err()); // event 4 is missing
/// assert!(Gapless::after("s", 0).next(2).is_err()); // event 1 is missing
/// # Ok::<(), a2_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Gapless<'a> {
    session: &'a str,
    last: u64,
}

impl<'a> Gapless<'a> {
    /// A check of rows of `session` after index `after`.
    pub fn after(session: &'a str, after: u64) -> Self {
        Self {
            session,
            last: after,
        }
    }

    /// The next row is at `index`: `Corrupted` unless it is the one after
    /// the last.
    pub fn next(&mut self, index: u64) -> Result<()> {
        let expected = self.last.saturating_add(1);
        if index != expected {
            return Err(missing(self.session, expected));
        }
        self.last = index;
        Ok(())
    }

    /// The rows reached `through`: `Corrupted`, naming the first missing
    /// index, when they stopped short of it.
    pub fn reached(&self, through: u64) -> Result<()> {
        if self.last < through {
            return Err(missing(self.session, self.last + 1));
        }
        Ok(())
    }

    /// The index of the last row seen (the start while none was).
    pub fn last(&self) -> u64 {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, ErrorCode};

    fn corrupted_at(result: Result<()>) -> Option<u64> {
        match result {
            Err(Error::Corrupted { index, .. }) => index,
            Err(other) => panic!("not Corrupted: {other}"),
            Ok(()) => None,
        }
    }

    #[test]
    fn e1_a_hole_in_the_rows_is_corrupted_at_its_first_index() {
        // (after, row indexes, through, first missing index)
        let table: &[(u64, &[u64], u64, Option<u64>)] = &[
            (0, &[1, 2, 3], 3, None),
            (0, &[], 0, None),
            (5, &[6, 7], 7, None),
            (0, &[1, 3], 3, Some(2)),
            (0, &[2], 2, Some(1)),
            (0, &[1, 2], 4, Some(3)),
            (2, &[], 3, Some(3)),
            // A row repeated is a hole after it too.
            (0, &[1, 1], 2, Some(2)),
        ];
        for &(after, rows, through, expected) in table {
            let mut check = Gapless::after("s", after);
            let got = rows
                .iter()
                .try_for_each(|&index| check.next(index))
                .and_then(|()| check.reached(through));
            assert_eq!(corrupted_at(got), expected, "{after} {rows:?} {through}");
        }
    }

    #[test]
    fn co1_f1_rv1_an_index_out_of_range_is_invalid() {
        let err = out_of_range("s", 9, 3);
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        assert!(err.to_string().contains("1..=3"), "{err}");
        // An unknown session has no range to name.
        let err = out_of_range("s", 1, 0);
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        assert!(err.to_string().contains("has no events"), "{err}");
        assert!(!err.to_string().contains("1..=0"), "{err}");
    }
}
