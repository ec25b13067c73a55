//! Snapshots stay within the log (S2).

use crate::error::{Error, Result};
use crate::model::SnapshotWrite;

/// S2: a snapshot is of a prefix of the log: one at an index beyond the
/// session's `frontier` is `InvalidArgument`, and nothing is written.
pub fn check_snapshots(frontier: u64, snapshots: &[SnapshotWrite]) -> Result<()> {
    match snapshots.iter().find(|s| s.index > frontier) {
        Some(bad) => Err(Error::invalid(format!(
            "snapshot of {:?} at index {} is beyond the frontier {frontier}",
            bad.reducer, bad.index
        ))),
        None => Ok(()),
    }
}

/// S2: whether a snapshot at `index` replaces the stored one (`stored`: its
/// index, if any): a snapshot never moves backward.
pub fn replaces(stored: Option<u64>, index: u64) -> bool {
    stored.is_none_or(|stored| index > stored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use serde_json::json;

    fn snapshot(index: u64) -> SnapshotWrite {
        SnapshotWrite {
            reducer: "r".into(),
            index,
            state: json!(null),
        }
    }

    #[test]
    fn s2_snapshots_never_pass_the_frontier_nor_move_backward() {
        assert!(check_snapshots(3, &[snapshot(0), snapshot(3)]).is_ok());
        assert!(check_snapshots(0, &[]).is_ok());
        let err = check_snapshots(3, &[snapshot(1), snapshot(4)]).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        let table = [
            (None, 0, true),
            (Some(3), 4, true),
            (Some(3), 3, false),
            (Some(3), 2, false),
        ];
        for (stored, index, expected) in table {
            assert_eq!(replaces(stored, index), expected, "{stored:?} {index}");
        }
    }
}
