//! What a completion does (CO2, CO3, CO4, CO5, CO6).

use super::Record;
use crate::error::{Error, Result};

/// The decision on a completion of `attempt` of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// CO2: the current attempt of a claimed event: mark it processed and
    /// append the returned events (whose ids [`check_new_ids`] checks).
    Complete,
    /// CO3: this very completion was recorded already: answer with the
    /// rows of the returned ids as stored; nothing is written.
    Replay,
    /// CO4, CO5: another attempt processed it, a newer attempt exists, this
    /// attempt failed, the event is dead-lettered or was never claimed (or
    /// its claim was released): `Superseded`, nothing written.
    Superseded,
}

/// CO3, CO4, CO5: the fate of a completion of `attempt` that returns
/// `returned` (final ids, in order), for an event whose record is
/// `record` (its index exists, CO1). The same attempt completed with
/// other returned ids is `PartialDuplicateBatch`.
pub fn decide<'i>(
    record: &Record<'_>,
    index: u64,
    attempt: u32,
    returned: impl ExactSizeIterator<Item = &'i str>,
) -> Result<Completion> {
    if record.processed_at.is_some() {
        if record.processed_by_attempt != Some(attempt) {
            return Ok(Completion::Superseded);
        }
        let same = record.returned_event_ids.len() == returned.len()
            && record
                .returned_event_ids
                .iter()
                .zip(returned)
                .all(|(a, b)| a == b);
        if !same {
            return Err(Error::duplicate(format!(
                "index {index} was completed by attempt {attempt} with other returned ids"
            )));
        }
        return Ok(Completion::Replay);
    }
    if record.attempt_count != attempt
        || record.claim_holder.is_none()
        || record.failed_at.is_some()
        || record.last_failed_attempt == Some(attempt)
    {
        return Ok(Completion::Superseded);
    }
    Ok(Completion::Complete)
}

/// CO6: every returned id is new in this session (`index_of`: the
/// session's own ids, A4); one that exists is `PartialDuplicateBatch`.
pub fn check_new_ids<'i>(
    returned: impl IntoIterator<Item = &'i str>,
    mut index_of: impl FnMut(&str) -> Result<Option<u64>>,
) -> Result<()> {
    for id in returned {
        if index_of(id)?.is_some() {
            return Err(Error::duplicate(format!(
                "returned id {id:?} already exists"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::rules::tables::fixtures::*;

    static AB: std::sync::LazyLock<Vec<String>> =
        std::sync::LazyLock::new(|| vec!["a".to_owned(), "b".to_owned()]);

    #[test]
    fn co2_co3_co4_co5_decide_each_completion() {
        let released = Record {
            claim_holder: None,
            claim_expires_at: None,
            ..leased(2)
        };
        let expired = Record {
            claim_expires_at: Some(1),
            ..leased(2)
        };
        // (record, attempt, returned ids, outcome or error code)
        /// The outcome, or the error's code.
        type Expected = std::result::Result<Completion, ErrorCode>;
        let table: Vec<(Record<'static>, u32, &[&str], Expected)> = vec![
            (leased(2), 2, &[], Ok(Completion::Complete)),
            // An expired lease still counts while no newer claim exists.
            (expired, 2, &["x"], Ok(Completion::Complete)),
            (leased(2), 1, &[], Ok(Completion::Superseded)),
            (leased(2), 3, &[], Ok(Completion::Superseded)),
            (fresh(), 0, &[], Ok(Completion::Superseded)),
            (released, 2, &[], Ok(Completion::Superseded)),
            (failed(2), 2, &[], Ok(Completion::Superseded)),
            (dead(2), 2, &[], Ok(Completion::Superseded)),
            (processed(2, &AB), 2, &["a", "b"], Ok(Completion::Replay)),
            (
                processed(2, &AB),
                1,
                &["a", "b"],
                Ok(Completion::Superseded),
            ),
            (
                processed(2, &AB),
                2,
                &["b", "a"],
                Err(ErrorCode::PartialDuplicateBatch),
            ),
            (
                processed(2, &AB),
                2,
                &["a"],
                Err(ErrorCode::PartialDuplicateBatch),
            ),
            (processed(2, &[]), 2, &[], Ok(Completion::Replay)),
        ];
        for (record, attempt, returned, expected) in table {
            let got = decide(&record, 7, attempt, returned.iter().copied()).map_err(|e| e.code());
            assert_eq!(got, expected, "{record:?} attempt {attempt} {returned:?}");
        }
    }

    #[test]
    fn co6_returned_ids_must_be_new_in_the_session() {
        let stored = |id: &str| Ok((id == "old").then_some(1));
        assert!(check_new_ids(["a", "b"], stored).is_ok());
        let err = check_new_ids(["a", "old"], stored).unwrap_err();
        assert_eq!(err.code(), ErrorCode::PartialDuplicateBatch);
    }
}
