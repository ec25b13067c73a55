//! What an append does with its batch: ids (A3, A11), retries and partial
//! duplicates (A4, A5, A6), and causes (A7).

use super::Record;
use crate::clock::IdSource;
use crate::error::{Error, Result};
use crate::model::{Cause, Event, NewEvent};

/// Gives every event of a batch its final id (A11), in place: an event
/// without one gets the id source's next id. A repeated id, given or
/// generated, is `PartialDuplicateBatch` (A3).
///
/// The one behaviour of every store: ids are drawn in batch order and the
/// check stops at the first repeat, so a refused batch draws no more ids
/// than it needed and names the first id that repeats an earlier one.
/// After `Ok`, [`final_id`] reads each event's id.
pub fn assign_ids(events: &mut [NewEvent], ids: &dyn IdSource) -> Result<()> {
    /// Up to this many events, comparing with every earlier id beats
    /// building a hash set.
    const SCAN_UP_TO: usize = 16;
    let small = events.len() <= SCAN_UP_TO;
    let mut seen = std::collections::HashSet::<String, foldhash::fast::RandomState>::default();
    for position in 0..events.len() {
        let (earlier, rest) = events.split_at_mut(position);
        let Some(event) = rest.first_mut() else {
            break;
        };
        let id = match event.id.take() {
            Some(id) => id,
            None => ids.next_id(),
        };
        let repeated = if small {
            earlier.iter().any(|e| final_id(e) == id)
        } else {
            !seen.insert(id.clone())
        };
        if repeated {
            return Err(Error::duplicate(format!(
                "id {id:?} appears twice in the batch"
            )));
        }
        event.id = Some(id);
    }
    Ok(())
}

/// The id of an event that went through [`assign_ids`] (empty before).
pub fn final_id(event: &NewEvent) -> &str {
    event.id.as_deref().unwrap_or_default()
}

/// What a batch with final ids is, given which of its ids the session has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Existing {
    /// No id exists in the session: the batch is new.
    None,
    /// Every id exists (A5): the batch may be a retry; the stored indexes,
    /// in batch order. Each event must still match its row
    /// ([`check_retry`]).
    All(Vec<u64>),
}

/// What a batch is by how many of its ids the session has (A5, A6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// None of them (or the batch is empty): a new batch.
    None,
    /// Every one: the batch may be a retry (A5).
    All,
    /// Some but not all: `PartialDuplicateBatch` (A6).
    Some,
}

/// A5, A6: a batch of `len` events of which `found` have ids the session
/// has (A4: its own ids only).
pub fn classify(found: usize, len: usize) -> Found {
    if found == 0 {
        Found::None
    } else if found == len {
        Found::All
    } else {
        Found::Some
    }
}

/// A4, A5, A6: looks up each final id in the session (`index_of`: the
/// session's own ids only, A4) and classifies the batch ([`classify`]).
/// Some ids existing and others not is `PartialDuplicateBatch`. An empty
/// batch is [`Existing::None`].
pub fn existing(
    events: &[NewEvent],
    mut index_of: impl FnMut(&str) -> Result<Option<u64>>,
) -> Result<Existing> {
    let mut found = Vec::new();
    for event in events {
        if let Some(index) = index_of(final_id(event))? {
            found.push(index);
        }
    }
    match classify(found.len(), events.len()) {
        Found::None => Ok(Existing::None),
        Found::All => Ok(Existing::All(found)),
        Found::Some => Err(Error::duplicate(format!(
            "{} of the {} ids of the batch already exist",
            found.len(),
            events.len()
        ))),
    }
}

/// A5: an event of a retried batch matches the row `stored` under its id
/// when its type and payload are the stored ones (payloads compare as
/// values: the texts of `0.0` and `-0.0` differ, the values do not).
pub fn check_retry(event: &NewEvent, stored: &Event) -> Result<()> {
    if event.event_type != stored.event_type || event.payload != stored.payload {
        return Err(Error::duplicate(format!(
            "id {:?} exists with another type or payload",
            stored.id
        )));
    }
    Ok(())
}

/// A5: a batch whose every id exists in the session is a retry when each
/// event has the type and payload of its stored row (`stored`, in batch
/// order, [`check_retry`]): the outcome holds the stored rows in index
/// order and claims nothing (AC3); `has_pending` is the session's.
pub fn replayed(
    events: &[NewEvent],
    mut stored: Vec<crate::model::StoredEvent>,
    has_pending: bool,
) -> Result<crate::model::AppendOutcome> {
    for (event, row) in events.iter().zip(&stored) {
        check_retry(event, &row.event)?;
    }
    stored.sort_by_key(|r| r.event.index);
    Ok(crate::model::AppendOutcome {
        events: stored,
        has_pending,
        claimed: Vec::new(),
    })
}

/// A7: the event at `position` of a batch names `cause`, whose record in
/// `session` is `record` (`None`: no such index). The cause must exist
/// (else `InvalidArgument`), and its attempt must be the latest and not
/// dead-lettered (else `SupersededAttempt`).
pub fn check_cause(
    session: &str,
    position: usize,
    cause: Cause,
    record: Option<Record<'_>>,
) -> Result<()> {
    let Some(record) = record else {
        return Err(Error::invalid(format!(
            "event {position}: cause index {} does not exist in session {session:?}",
            cause.index
        )));
    };
    if record.attempt_count != cause.attempt
        || record.failed_at.is_some()
        || record.cancelled_at.is_some()
    {
        return Err(Error::superseded(format!(
            "event {position}: attempt {} of index {} is not the current attempt (a newer one exists, or it was dead-lettered or cancelled)",
            cause.attempt, cause.index
        )));
    }
    Ok(())
}

/// A13: an append that expects the session's frontier to be `expected`
/// (when it names one) and finds `frontier` instead is refused with
/// `FrontierMoved`. Replays (A5) and empty batches (A2) are answered before
/// this; the closed check (CL2) too.
pub fn check_frontier(session: &str, expected: Option<u64>, frontier: u64) -> Result<()> {
    match expected {
        Some(expected) if expected != frontier => Err(Error::FrontierMoved {
            session: session.to_owned(),
            expected,
            frontier,
        }),
        _ => Ok(()),
    }
}

/// [`times`]' answer: the claim with its lease's expiry, and the
/// session's expiry, both checked.
pub type Times<'c> = (
    Option<(&'c crate::model::AppendClaim, crate::Millis)>,
    Option<crate::Expiry>,
);

/// What an append checks against the store clock before it reads or
/// writes anything: the lease of its claim (AC1, as a claim's), the
/// session's expiry (EX1) and every due time (DL1). Returns the claim with
/// its lease's expiry and the expiry checked.
pub fn times<'c>(
    claim: Option<&'c crate::model::AppendClaim>,
    expiry: Option<crate::Expiry>,
    events: &[crate::NewEvent],
    now: crate::Millis,
) -> Result<Times<'c>> {
    let lease = claim
        .map(|c| crate::validate::claim_expiry(c.lease, now).map(|at| (c, at)))
        .transpose()?;
    let expiry = expiry
        .map(|e| crate::validate::session_expiry(e, now))
        .transpose()?;
    super::delay::due_times(events, now)?;
    Ok((lease, expiry))
}

/// EX2: the expiry an append writes — its own (checked by
/// [`times`]), else the store's default for a session it creates
/// (`creates`), else none (the session keeps its own).
pub fn expiry(
    own: Option<crate::Expiry>,
    default: Option<crate::Expiry>,
    creates: bool,
    now: crate::Millis,
) -> Result<Option<crate::Expiry>> {
    match (own, creates) {
        (Some(own), _) => Ok(Some(own)),
        (None, true) => default
            .map(|e| crate::validate::session_expiry(e, now))
            .transpose(),
        (None, false) => Ok(None),
    }
}

/// What an append's checks read of its session (`None` for a session
/// without events): whether it is closed (CL2), its frontier (A13) and its
/// first retained index (TR3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Closed (CL1): its log is final.
    pub closed: bool,
    /// The index of its last event.
    pub frontier: u64,
    /// The first index a trim left (1 when never trimmed).
    pub first_index: u64,
}

/// The cause indexes a batch names, in batch order: what a store loads
/// before [`check_new`].
pub fn causes(events: &[NewEvent]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| e.cause)
        .map(|c| c.index)
        .collect()
}

/// CL2, A13, A7: what a batch that is not a replay must pass, in this
/// order — the session is open, its frontier is the one the append
/// expects, and each cause was not trimmed away (TR3), exists and is the
/// live attempt. `record` gives the record of a cause's index in the
/// session (`None`: no such event); a session without events (`target`
/// `None`) has no records at all.
pub fn check_new<'r>(
    session: &str,
    target: Option<Target>,
    events: &[NewEvent],
    if_frontier: Option<u64>,
    record: impl Fn(u64) -> Option<Record<'r>>,
) -> Result<()> {
    super::lifecycle::check_open(session, target.is_some_and(|t| t.closed))?;
    check_frontier(session, if_frontier, target.map_or(0, |t| t.frontier))?;
    let first = target.map_or(1, |t| t.first_index);
    for (position, event) in events.iter().enumerate() {
        let Some(cause) = event.cause else {
            continue;
        };
        super::lifecycle::check_cause_retained(session, first, cause.index)?;
        let found = target.and_then(|_| record(cause.index));
        check_cause(session, position, cause, found)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SequentialIds;
    use crate::error::ErrorCode;
    use crate::rules::tables::fixtures::*;
    use serde_json::json;

    fn batch(ids: &[Option<&str>]) -> Vec<NewEvent> {
        ids.iter()
            .map(|id| {
                let event = NewEvent::new("t", json!(1));
                match id {
                    Some(id) => event.id(*id),
                    None => event,
                }
            })
            .collect()
    }

    #[test]
    fn a11_a3_ids_are_assigned_in_order_and_a_repeat_stops_the_batch() {
        // (given ids, expected final ids or the repeated id)
        /// The final ids, or the id found repeated.
        type Expected = std::result::Result<&'static [&'static str], &'static str>;
        let table: &[(&[Option<&str>], Expected)] = &[
            (&[], Ok(&[])),
            (&[None, None], Ok(&["g1", "g2"])),
            (&[Some("a"), None, Some("b")], Ok(&["a", "g1", "b"])),
            (&[Some("a"), Some("a")], Err("a")),
            // A generated id that repeats a given one is a duplicate too.
            (&[Some("g1"), None, None], Err("g1")),
        ];
        for (given, expected) in table {
            let ids = SequentialIds::new("g");
            let mut events = batch(given);
            let got = assign_ids(&mut events, &ids);
            match expected {
                Ok(want) => {
                    got.unwrap();
                    let finals: Vec<&str> = events.iter().map(final_id).collect();
                    assert_eq!(&finals, want, "{given:?}");
                }
                Err(id) => {
                    let err = got.unwrap_err();
                    assert_eq!(err.code(), ErrorCode::PartialDuplicateBatch);
                    assert!(err.to_string().contains(&format!("{id:?}")), "{err}");
                }
            }
        }
    }

    #[test]
    fn a3_the_check_stops_at_the_first_repeat_drawing_no_more_ids() {
        for n in [4, 40] {
            let ids = SequentialIds::new("g");
            let mut given = vec![Some("x"), Some("x")];
            given.extend(std::iter::repeat_n(None, n));
            assert!(assign_ids(&mut batch(&given), &ids).is_err());
            // The next id drawn is the first: the failed batch drew none.
            assert_eq!(ids.next_id(), "g1", "batch of {}", n + 2);
            // A large batch with a late repeat is found by the set too.
            let mut late = batch(&vec![None; n]);
            late.push(NewEvent::new("t", json!(1)).id(format!("g{}", n + 1)));
            late.push(NewEvent::new("t", json!(1)).id(format!("g{}", n + 1)));
            assert!(assign_ids(&mut late, &SequentialIds::new("g")).is_err());
        }
    }

    #[test]
    fn a5_a6_batches_are_new_retries_or_partial_duplicates() {
        let stored = |id: &str| -> Result<Option<u64>> {
            Ok(match id {
                "a" => Some(1),
                "b" => Some(2),
                _ => None,
            })
        };
        let table: &[(&[Option<&str>], Option<Existing>)] = &[
            (&[], Some(Existing::None)),
            (&[Some("x"), Some("y")], Some(Existing::None)),
            (&[Some("b"), Some("a")], Some(Existing::All(vec![2, 1]))),
            (&[Some("a"), Some("x")], None),
        ];
        for (given, expected) in table {
            let got = existing(&batch(given), stored);
            match expected {
                Some(want) => assert_eq!(&got.unwrap(), want, "{given:?}"),
                None => assert_eq!(
                    got.unwrap_err().code(),
                    ErrorCode::PartialDuplicateBatch,
                    "{given:?}"
                ),
            }
        }
    }

    #[test]
    fn a5_a6_a_batch_is_what_the_count_of_its_ids_found_says() {
        for (found, len, expected) in crate::rules::tables::classify() {
            assert_eq!(classify(found, len), expected, "{found} of {len}");
        }
    }

    #[test]
    fn a5_a_retry_matches_by_type_and_payload_value() {
        let event = NewEvent::new("t", json!({"x": 0.0})).id("a");
        let table = [
            ("t", json!({"x": 0.0}), true),
            ("t", json!({"x": -0.0}), true),
            ("u", json!({"x": 0.0}), false),
            ("t", json!({"x": 1}), false),
        ];
        for (stored_type, payload, ok) in table {
            let stored = Event {
                id: "a".into(),
                event_type: stored_type.into(),
                payload: payload.clone(),
                index: 1,
                session_id: "s".into(),
                created_at: 0,
                cause: None,
                lane: None,
            };
            let got = check_retry(&event, &stored);
            assert_eq!(got.is_ok(), ok, "{stored_type} {payload}");
        }
    }

    #[test]
    fn a7_a_cause_must_exist_and_be_the_live_attempt() {
        let cause = Cause::new(3, 2);
        let table: &[(Option<Record<'static>>, Option<ErrorCode>)] = &[
            (None, Some(ErrorCode::InvalidArgument)),
            (Some(leased(2)), None),
            // An expired or released lease still names the latest attempt.
            (Some(failed(2)), None),
            (Some(leased(3)), Some(ErrorCode::SupersededAttempt)),
            (Some(leased(1)), Some(ErrorCode::SupersededAttempt)),
            (Some(dead(2)), Some(ErrorCode::SupersededAttempt)),
            (Some(fresh()), Some(ErrorCode::SupersededAttempt)),
        ];
        for (record, expected) in table {
            let got = check_cause("s", 0, cause, *record);
            assert_eq!(got.err().map(|e| e.code()), *expected, "{record:?}");
        }
    }

    #[test]
    fn cl2_a13_a7_a_new_batch_is_checked_in_order() {
        use crate::error::ErrorCode;
        let open = Target {
            closed: false,
            frontier: 5,
            first_index: 3,
        };
        let caused = |index| {
            let mut e = NewEvent::new("t", serde_json::json!(1));
            e.cause = Some(Cause::new(index, 1));
            vec![e]
        };
        let live = Record {
            attempt_count: 1,
            ..Record::default()
        };
        let code = |target, events: &[NewEvent], expect| {
            check_new("s", target, events, expect, |i| (i == 4).then_some(live))
                .map_err(|e| e.code())
        };
        assert_eq!(code(Some(open), &caused(4), None), Ok(()));
        assert_eq!(code(Some(open), &caused(4), Some(5)), Ok(()));
        assert_eq!(
            code(Some(open), &caused(4), Some(4)),
            Err(ErrorCode::FrontierMoved)
        );
        let closed = Target {
            closed: true,
            ..open
        };
        assert_eq!(
            code(Some(closed), &caused(4), Some(4)),
            Err(ErrorCode::SessionClosed),
            "CL2 before A13"
        );
        assert_eq!(code(Some(open), &caused(2), None), Err(ErrorCode::Trimmed));
        assert_eq!(
            code(Some(open), &caused(5), None),
            Err(ErrorCode::InvalidArgument)
        );
        assert_eq!(
            code(None, &caused(4), None),
            Err(ErrorCode::InvalidArgument)
        );
        assert_eq!(causes(&caused(4)), [4]);
    }
}
