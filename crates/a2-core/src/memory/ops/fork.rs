//! `fork` (FK1, FK2, FK3, FK4, FK5): the decisions are
//! [`rules::fork`]'s; the copy is the session's (`session/fork.rs`).

use super::super::*;

impl MemoryStore {
    pub(in crate::memory) fn fork_sync(
        &self,
        source: &str,
        at: u64,
        target: &str,
    ) -> Result<ForkOutcome> {
        validate::session_id(source)?;
        validate::session_id(target)?;
        rules::fork::check_request(source, at, target)?;
        let mut guard = self.inner.lock()?;
        let now = self.now();
        // EX2: a fork is a new session: the store's default expiry.
        let expiry = self
            .inner
            .options
            .default_expiry
            .map(|e| validate::session_expiry(e, now))
            .transpose()?;
        let state = &mut *guard;
        if let Some(existing) = state.sessions.get(target) {
            return rules::fork::existing_target(source, at, target, existing.forked_from.as_ref());
        }
        let Some(from) = state.sessions.get(source) else {
            return Err(rules::fork::no_source(source));
        };
        rules::fork::check_source(source, from.frontier(), from.first_index(), at)?;
        let fork = from.forked(Arc::from(target), at, now);
        let first_index = fork.first_index();
        // FK2: the snapshots the shared prefix already folded.
        let snapshots: BTreeMap<String, SnapshotRec> = state
            .snapshots
            .get(source)
            .map(|by_reducer| {
                by_reducer
                    .iter()
                    .filter(|(_, snapshot)| snapshot.index <= at)
                    .map(|(reducer, snapshot)| (reducer.clone(), snapshot.clone()))
                    .collect()
            })
            .unwrap_or_default();
        if !snapshots.is_empty() {
            state.snapshots.insert(target.to_owned(), snapshots);
        }
        let id = fork.id.clone();
        state.sessions.insert(id.clone(), fork);
        if let Some(expiry) = expiry {
            state.set_expiry(target, Some(expiry));
        }
        let State {
            sessions,
            pending,
            feeds,
            ..
        } = state;
        let mut wake = FeedWake::default();
        if let Some(session) = sessions.get(&id) {
            // PS1, PS2: the fork's pending events are its own work.
            if sync_pending(pending, session) && self.inner.wakeups.receiver_count() > 0 {
                let _ = self.inner.wakeups.send(id.clone());
            }
            wake = FeedWake::of(feeds, session);
        }
        drop(guard);
        wake.send();
        Ok(ForkOutcome::Forked { first_index })
    }
}
