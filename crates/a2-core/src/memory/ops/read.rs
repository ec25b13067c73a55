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

    pub(in crate::memory) fn read_history_sync(
        &self,
        session_id: &str,
        options: HistoryOptions,
    ) -> Result<HistoryPage> {
        validate::limit("limit", options.limit)?;
        let state = self.inner.lock_for(session_id)?;
        let Some(session) = state.sessions.get(session_id) else {
            return Ok(HistoryPage::empty());
        };
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

    pub(in crate::memory) fn read_events_sync(
        &self,
        session_id: &str,
        options: ReadEventsOptions,
    ) -> Result<EventsPage> {
        validate::limit("limit", options.limit)?;
        let state = self.inner.lock_for(session_id)?;
        let Some(session) = state.sessions.get(session_id) else {
            return Ok(EventsPage::empty());
        };
        rules::lifecycle::check_retained(session_id, session.first_index(), options.after_index)?;
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
}
