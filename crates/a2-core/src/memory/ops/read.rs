//! The reads of the log: `read` (R1), `read_history` (R2) and `read_events` (I2).

use super::super::*;

impl MemoryStore {
    pub(in crate::memory) fn read_sync(
        &self,
        session_id: &str,
        range: ReadRange,
    ) -> Result<Vec<StoredEvent>> {
        let state = self.inner.lock_for(session_id)?;
        let Some(session) = state.sessions.get(session_id) else {
            return Ok(Vec::new());
        };
        rules::lifecycle::check_retained(session_id, session.first_index(), range.after_index)?;
        let through = range.through_index.unwrap_or(u64::MAX);
        session.stored_events(range.after_index, through, usize::MAX)
    }

    /// Runs `read` on `session_id` under the lock, for a page of at most
    /// `limit` events; a session without events reads as `empty()`.
    pub(in crate::memory) fn read_page<T>(
        &self,
        session_id: &str,
        limit: usize,
        empty: fn() -> T,
        read: impl FnOnce(&SessionState) -> Result<T>,
    ) -> Result<T> {
        validate::limit("limit", limit)?;
        let state = self.inner.lock_for(session_id)?;
        match state.sessions.get(session_id) {
            Some(session) => read(session),
            None => Ok(empty()),
        }
    }
}

/// R2: the newest events of `session` before `options.before_index`.
pub(in crate::memory) fn history(
    session: &SessionState,
    options: &HistoryOptions,
) -> Result<HistoryPage> {
    let frontier = session.frontier();
    let through = match options.before_index {
        Some(before) => before.saturating_sub(1).min(frontier),
        None => frontier,
    };
    let limit = validate::effective_limit(options.limit);
    // TR3: a page reaches back at most to the first retained event.
    let first = session.first_index();
    let after = through.saturating_sub(limit as u64).max(first - 1);
    let events = session.stored_events(after, through, limit)?;
    Ok(HistoryPage {
        events,
        has_more: after + 1 > first,
        first_index: first,
    })
}

/// I2: the events of `session` after `options.after_index`.
pub(in crate::memory) fn events_page(
    session: &SessionState,
    options: &ReadEventsOptions,
) -> Result<EventsPage> {
    rules::lifecycle::check_retained(&session.id, session.first_index(), options.after_index)?;
    let frontier = session.frontier();
    let through = options.through_index.unwrap_or(frontier).min(frontier);
    let events = session.stored_events(
        options.after_index,
        through,
        validate::effective_limit(options.limit),
    )?;
    Ok(EventsPage {
        events,
        through_index: through,
    })
}
