//! Retention (RT16): what a worker keeps of the sessions it drains, as
//! BullMQ's `removeOnComplete: {count, age}` — trimmed as it processes,
//! never by a sweep over all sessions.

use std::time::Duration;

use a2_core::{Error, HistoryOptions, ReadEventsOptions, Result, SnapshotWrite, StoredEvent};

use crate::shared::{Shared, TRACKED, Tracked};

/// What a worker keeps of each session it drains (RT16): its last
/// `keep_last` events, and of the older ones only those processed within
/// `max_age`. An event beyond either goes, once it and every event before
/// it are settled.
///
/// ```
/// use std::time::Duration;
/// use a2_runtime::Retention;
///
/// let chat = Retention::keep_last(1_000).max_age(Duration::from_secs(86_400));
/// assert_eq!(chat.keep_last, Some(1_000));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retention {
    /// Keep at most this many of the newest events (at least 1).
    pub keep_last: Option<u64>,
    /// Drop events processed longer ago than this.
    pub max_age: Option<Duration>,
}

impl Retention {
    /// Keep the newest `n` events of each session.
    pub fn keep_last(n: u64) -> Self {
        Self {
            keep_last: Some(n),
            max_age: None,
        }
    }

    /// Also drop events processed longer ago than `age`.
    pub fn max_age(mut self, age: Duration) -> Self {
        self.max_age = Some(age);
        self
    }

    /// RT12: a policy that keeps nothing at all, or checks nothing, is a
    /// mistake: `keep_last` 0 would trim the events a retried append needs
    /// to be recognised (TR4).
    pub(crate) fn check(&self) -> Result<()> {
        if self.keep_last == Some(0) {
            return Err(Error::invalid("retention keep_last must be at least 1"));
        }
        if self.keep_last.is_none() && self.max_age.is_none() {
            return Err(Error::invalid(
                "a retention policy needs keep_last, max_age or both",
            ));
        }
        Ok(())
    }

    /// How many completions a drain lets pass between two trims: a quarter
    /// of what it keeps, at least 64, so the cost of a trim spreads over
    /// many events.
    pub(crate) fn step(&self) -> u64 {
        self.keep_last.map_or(64, |n| (n / 4).max(64))
    }
}

/// RT16: attempts of `session` finished, `highest` the highest index among
/// them.
pub(crate) fn finished(app: &Shared, session: &str, n: u64, highest: u64) {
    if app.options.retention.is_none() || n == 0 {
        return;
    }
    let now = app.store.clock().now_ms();
    let mut retained = app.retained.lock().unwrap_or_else(|p| p.into_inner());
    if retained.len() >= TRACKED && !retained.contains_key(session) {
        retained.clear();
    }
    let entry = retained.entry(session.to_owned()).or_insert(Tracked {
        count: 0,
        since: now,
        highest: 0,
        held: 0,
    });
    entry.count += n;
    entry.highest = entry.highest.max(highest);
}

/// RT16: whether `session` is due a trim — a step of completions since the
/// last, or with `max_age`, some completions a quarter of it after the
/// last — and the highest index finished here. Marks it trimmed now when
/// it is due.
pub(crate) fn due(app: &Shared, session: &str, retention: Retention) -> Option<u64> {
    let now = app.store.clock().now_ms();
    let mut retained = app.retained.lock().unwrap_or_else(|p| p.into_inner());
    let entry = retained.get_mut(session)?;
    let aged = retention.max_age.is_some_and(|age| {
        let quarter = i64::try_from(age.as_millis() / 4).unwrap_or(i64::MAX);
        entry.count > 0 && now.saturating_sub(entry.since) >= quarter
    });
    if entry.count >= retention.step() || aged {
        entry.count = 0;
        entry.since = now;
        return Some(entry.highest);
    }
    None
}

/// RT16: trims `session` as `retention` says, after writing each
/// registered reducer's snapshot at the trim point (TR3). Never past the
/// first unsettled event (TR2), but up to it; a failure only delays the
/// trim to the next pass. `highest` is the highest index finished here:
/// with a count alone, the trim goes through `highest - keep_last` in one
/// call, the store checking that those events are settled (TR2) — no read;
/// when the store refuses because an event of the range is unsettled, it
/// names that event, and the trim goes up to it instead.
pub(crate) async fn retain(
    app: &Shared,
    session: &str,
    retention: Retention,
    highest: u64,
) -> Result<()> {
    let store = &app.store;
    if let (Some(keep), None) = (retention.keep_last, retention.max_age) {
        let through = highest.saturating_sub(keep);
        if through == 0 {
            return Ok(());
        }
        // A session held at an unsettled event is asked again only once
        // that event settled: one event read, where a trim refused again
        // would cost the store a check (on Redis, a read of the range's
        // ids) at every step for as long as the event stays.
        let held = held_at(app, session);
        if held > 0 && held <= through && !settled(app, session, held).await? {
            return Ok(());
        }
        snapshot_reducers(app, session, through).await?;
        let Some(unsettled) = trim(app, session, through).await? else {
            hold(app, session, 0);
            return Ok(());
        };
        // A dead letter or a delayed event can stay for days: what
        // settled before it goes now (the snapshots are at `through`,
        // past this trim point, so state still folds).
        if unsettled > 1 && trim(app, session, unsettled - 1).await?.is_some() {
            // Something before it is unsettled now too (revived, or
            // another process's view): the next step asks the store again.
            return Ok(());
        }
        hold(app, session, unsettled);
        return Ok(());
    }
    let newest = store.read_history(session, HistoryOptions::new(1)).await?;
    let Some(frontier) = newest.events.last().map(|e| e.event.index) else {
        return Ok(());
    };
    let first = newest.first_index;
    let by_count = retention
        .keep_last
        .map_or(0, |keep| frontier.saturating_sub(keep));
    // The candidates: the prefix the count would trim, or (by age) a page
    // from the first retained event.
    let page_end = if retention.max_age.is_some() {
        frontier.min(first.saturating_add(999))
    } else {
        by_count
    };
    if page_end < first {
        return Ok(());
    }
    let limit = (page_end - first + 1) as usize;
    let rows = store
        .read_events(
            session,
            ReadEventsOptions::new(limit)
                .after_index(first - 1)
                .through_index(Some(page_end)),
        )
        .await?
        .events;
    let now = store.clock().now_ms();
    let through = trim_point(&rows, by_count, retention.max_age, now);
    if through < first {
        return Ok(());
    }
    snapshot_reducers(app, session, through).await?;
    trim(app, session, through).await.map(drop)
}

/// The event `session`'s last trim stopped at (0: none).
fn held_at(app: &Shared, session: &str) -> u64 {
    let retained = app.retained.lock().unwrap_or_else(|p| p.into_inner());
    retained.get(session).map_or(0, |t| t.held)
}

/// Notes the event `session`'s trims wait for (0: none).
fn hold(app: &Shared, session: &str, index: u64) {
    let mut retained = app.retained.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(tracked) = retained.get_mut(session) {
        tracked.held = index;
    }
}

/// Whether the event at `index` of `session` settled (or is gone: a trim
/// by someone else, a clear).
async fn settled(app: &Shared, session: &str, index: u64) -> Result<bool> {
    let range = a2_core::ReadRange {
        after_index: index - 1,
        through_index: Some(index),
    };
    match app.store.read(session, range).await {
        Ok(rows) => Ok(rows.first().is_none_or(|row| row.processed_at.is_some())),
        Err(Error::Trimmed { .. }) => Ok(true),
        Err(error) => Err(error),
    }
}

/// TR1: trims `session` through `through`. A refusal because an event in
/// the range is not settled yet (TR2) answers that event's index, when the
/// store names it; any other refusal (the session expired or was cleared
/// meanwhile) only puts the trim off to the next pass.
async fn trim(app: &Shared, session: &str, through: u64) -> Result<Option<u64>> {
    match app.store.trim(session, through).await {
        Ok(_) => Ok(None),
        Err(Error::InvalidArgument { index, message }) => {
            tracing::debug!(session, %message, "retention: trim refused");
            Ok(index)
        }
        Err(error) => Err(error),
    }
}

/// The last index to trim among `rows` (a prefix of the retained log, in
/// index order): the events the count trims (through `by_count`), or
/// processed before `now - max_age`, whichever reaches further, within the
/// settled prefix of `rows`.
fn trim_point(
    rows: &[StoredEvent],
    by_count: u64,
    max_age: Option<Duration>,
    now: a2_core::Millis,
) -> u64 {
    let cutoff =
        max_age.map(|age| now.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)));
    let mut through = 0;
    for row in rows {
        let Some(processed_at) = row.processed_at.filter(|_| row.failed_at.is_none()) else {
            break;
        };
        let index = row.event.index;
        let old = cutoff.is_some_and(|cutoff| processed_at <= cutoff);
        if index <= by_count || old {
            through = index;
        } else if cutoff.is_none() {
            break;
        }
    }
    through
}

impl crate::App {
    /// Trims `session`'s settled prefix through `through` (TR1) the safe
    /// way (RT19): each registered reducer's snapshot is written at
    /// `through` first (as retention does, RT16), so [`App::state`](crate::App::state)
    /// still folds afterwards instead of failing with `Trimmed` (TR3).
    /// Trims in as many store calls as it takes (each removes at most
    /// 10 000 events) and answers the first retained index. A pending or
    /// dead-lettered event in the range is `InvalidArgument` naming it
    /// (TR2), with nothing trimmed by that call.
    ///
    /// ```
    /// # use a2_core::{MemoryStore, NewEvent, StoreOptions};
    /// # use a2_runtime::App;
    /// # use serde_json::json;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> a2_core::Result<()> {
    /// let app = App::builder(MemoryStore::new(StoreOptions::default()))
    ///     .reducer("count", 0u64, |n: &mut u64, _| *n += 1)
    ///     .build()?;
    /// let notes = (0..10).map(|n| NewEvent::new("note", json!(n)).settled()).collect();
    /// app.append("chat", notes).await?;
    /// assert_eq!(app.trim("chat", 8).await?.first_index, 9);
    /// assert_eq!(app.state::<u64>("chat", "count").await?, 10);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn trim(&self, session: &str, through: u64) -> Result<a2_core::TrimOutcome> {
        snapshot_reducers(&self.inner, session, through).await?;
        let mut outcome = self.inner.store.trim(session, through).await?;
        while outcome.first_index <= through {
            let next = self.inner.store.trim(session, through).await?;
            if next.first_index == outcome.first_index {
                break;
            }
            outcome = next;
        }
        Ok(outcome)
    }
}

/// TR3: every registered reducer gets a snapshot at or after `through`, so
/// its state still folds once the events before go.
async fn snapshot_reducers(app: &Shared, session: &str, through: u64) -> Result<()> {
    for (name, reducer) in &app.reducers {
        let read = app.store.read_state(session, name).await?;
        let (state, base) = match read.snapshot {
            Some(snapshot) if snapshot.index >= through => continue,
            Some(snapshot) => (snapshot.state, snapshot.index),
            None => (reducer.initial()?, 0),
        };
        let upto: Vec<_> = read
            .events
            .into_iter()
            .filter(|e| e.index > base && e.index <= through)
            .collect();
        let state = reducer.fold(state, &upto)?;
        app.store
            .put_snapshots(
                session,
                vec![SnapshotWrite {
                    reducer: name.clone(),
                    index: through,
                    state,
                }],
            )
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2_core::NewEvent;

    fn row(index: u64, processed_at: Option<i64>) -> StoredEvent {
        let mut row = StoredEvent::appended(
            format!("e{index}"),
            NewEvent::new("t", serde_json::json!(0)),
            "s",
            index,
            0,
            None,
            None,
        );
        row.processed_at = processed_at;
        row
    }

    #[test]
    fn the_trim_point_stops_at_the_first_unsettled_event() {
        let rows = [
            row(1, Some(10)),
            row(2, Some(20)),
            row(3, None),
            row(4, Some(5)),
        ];
        assert_eq!(
            trim_point(&rows, 4, None, 100),
            2,
            "count, up to the pending event"
        );
        assert_eq!(trim_point(&rows, 1, None, 100), 1);
        let hour = Some(Duration::from_millis(85));
        assert_eq!(
            trim_point(&rows, 0, hour, 100),
            1,
            "processed at 10 is older than 15"
        );
        assert_eq!(
            trim_point(&rows, 0, Some(Duration::from_millis(50)), 100),
            2
        );
        assert_eq!(trim_point(&[], 5, hour, 100), 0);
    }
}
