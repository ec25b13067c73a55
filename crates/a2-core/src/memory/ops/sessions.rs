//! The listings of sessions, `pending_sessions` (PS1) and `list_sessions` (I1), and `clear` (I4).

use super::super::*;

impl MemoryStore {
    pub(in crate::memory) fn pending_sessions_sync(
        &self,
        page: PageRequest,
    ) -> Result<SessionPage> {
        let state = self.inner.lock_paged(page.limit)?;
        let start = match &page.cursor {
            Some(cursor) => Bound::Excluded(cursor.as_str()),
            None => Bound::Unbounded,
        };
        let mut iter = state
            .pending
            .range::<str, _>((start, Bound::Unbounded))
            .map(|s| s.to_string());
        let sessions: Vec<String> = iter
            .by_ref()
            .take(validate::effective_limit(page.limit))
            .collect();
        let cursor = match iter.next() {
            Some(_) => sessions.last().cloned(),
            None => None,
        };
        Ok(SessionPage { sessions, cursor })
    }

    pub(in crate::memory) fn list_sessions_sync(
        &self,
        options: ListSessionsOptions,
    ) -> Result<SessionList> {
        let state = self.inner.lock_paged(options.limit)?;
        let prefix = options.prefix.as_deref().unwrap_or("");
        let start = match options.cursor.as_deref() {
            Some(cursor) if cursor >= prefix => Bound::Excluded(cursor),
            _ => Bound::Included(prefix),
        };
        let mut iter = state
            .sessions
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(id, _)| id.starts_with(prefix))
            .map(|(id, s)| SessionSummary {
                session_id: id.to_string(),
                event_count: s.frontier(),
                pending_count: s.counters.pending_count,
                failed_count: s.counters.failed_count,
                attempt_count: s.counters.attempt_count,
                failure_count: s.counters.failure_count,
                first_event_at: s.counters.first_event_at,
                updated_at: s.counters.updated_at,
                // TR5, CL5.
                first_index: s.first_index(),
                closed_at: s.closed.map(|(_, at)| at),
                deadline: s.deadline(),
                forked_from: s.forked_from.clone(),
            });
        let sessions: Vec<SessionSummary> = iter
            .by_ref()
            .take(validate::effective_limit(options.limit))
            .collect();
        let cursor = match iter.next() {
            Some(_) => sessions.last().map(|s| s.session_id.clone()),
            None => None,
        };
        Ok(SessionList { sessions, cursor })
    }

    pub(in crate::memory) fn clear_sync(&self, session_id: &str) -> Result<()> {
        let mut guard = self.inner.lock_for(session_id)?;
        let state = &mut *guard;
        state.remove(session_id);
        state.presence.remove(session_id);
        Ok(())
    }
}
