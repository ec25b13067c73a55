//! Delayed events (DL1, DL3): when an appended event becomes claimable, and
//! which due times are refused.
//!
//! A delayed event is appended at once and waits for its due time as for a
//! retry time: its `retry_at` is the due time until its first claim, so the
//! claim rules ([`super::claim`]) hold it back and name the time in `Busy`
//! (DL3). A delayed lane event heads its lane like any other (DL2): the
//! lane rules need nothing more. What a delay may not be without a clock
//! (both fields, a settled event, a delay over 100 years) is checked with
//! the rest of a new event's fields (`validate::batch`).

use crate::clock::{MAX_TTL_MS, Millis, expiry};
use crate::error::{Error, Result};
use crate::model::NewEvent;

/// DL1: when `event`, appended at store time `now`, becomes claimable:
/// `None` when at once (no due time, one at or before `now`, or a settled
/// event, which is never claimed).
///
/// ```
/// use a2_core::{NewEvent, rules::delay::due};
/// use serde_json::json;
///
/// let e = NewEvent::new("t", json!(1));
/// assert_eq!(due(&e.clone().not_before(5_000), 1_000), Some(5_000));
/// assert_eq!(due(&e.clone().not_before(900), 1_000), None);
/// assert_eq!(due(&e.delay(std::time::Duration::from_secs(2)), 1_000), Some(3_000));
/// ```
pub fn due(event: &NewEvent, now: Millis) -> Option<Millis> {
    let at = match (event.not_before, event.delay_ms) {
        (Some(at), _) => at,
        (None, Some(delay)) => expiry(now, delay),
        (None, None) => return None,
    };
    (at > now && !event.settled).then_some(at)
}

/// DL1: [`due`] for the event at `position` of a batch (its fields checked
/// by `validate::batch`), refusing a `not_before` more than 100 years after
/// `now` with `InvalidArgument`.
///
/// ```
/// use a2_core::{NewEvent, rules::delay::due_at};
/// use serde_json::json;
///
/// let e = NewEvent::new("t", json!(1));
/// assert_eq!(due_at(0, &e.clone().not_before(5_000), 1_000).unwrap(), Some(5_000));
/// assert!(due_at(0, &e.not_before(i64::MAX), 1_000).is_err());
/// ```
pub fn due_at(position: usize, event: &NewEvent, now: Millis) -> Result<Option<Millis>> {
    if let Some(at) = event.not_before
        && at > expiry(now, MAX_TTL_MS)
    {
        return Err(Error::invalid(format!(
            "event {position}: not_before {at} is more than 100 years ({MAX_TTL_MS} ms) after the store's now {now}"
        )));
    }
    Ok(due(event, now))
}

/// [`due_at`] for every event of a batch, in order; `None` when no event
/// names a due time (the common batch, answered without a look at each
/// time).
pub fn due_times(events: &[NewEvent], now: Millis) -> Result<Option<Vec<Option<Millis>>>> {
    if events
        .iter()
        .all(|e| e.not_before.is_none() && e.delay_ms.is_none())
    {
        return Ok(None);
    }
    events
        .iter()
        .enumerate()
        .map(|(position, event)| due_at(position, event, now))
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dl1_a_due_time_after_now_holds_the_event_back_until_it() {
        for (not_before, delay_ms, settled, now, expected) in crate::rules::tables::delay() {
            let mut event = NewEvent::new("t", serde_json::json!(1));
            event.not_before = not_before;
            event.delay_ms = delay_ms;
            event.settled = settled;
            let decided = due_at(0, &event, now).ok();
            assert_eq!(
                decided, expected,
                "{not_before:?} {delay_ms:?} {settled} {now}"
            );
            if let Some(due) = expected {
                assert_eq!(
                    due_times(&[event], now).unwrap(),
                    Some(vec![due]).filter(|_| not_before.is_some() || delay_ms.is_some())
                );
            }
        }
    }
}
