//! Reducer state: `read_state` (S1), `put_snapshots` (S2) and `list_snapshots` (I3).

use super::super::*;

impl MemoryStore {
    pub(in crate::memory) fn read_state_sync(
        &self,
        session_id: &str,
        reducer: &str,
    ) -> Result<StateRead> {
        validate::name("reducer", reducer)?;
        let state = self.inner.lock_for(session_id)?;
        let snapshot = state
            .snapshots
            .get(session_id)
            .and_then(|m| m.get(reducer))
            .map(|s| Snapshot {
                index: s.index,
                state: s.state.clone(),
            });
        let after = snapshot.as_ref().map_or(0, |s| s.index);
        let events = match state.sessions.get(session_id) {
            Some(session) => {
                // TR3: the fold needs every event after the snapshot.
                rules::lifecycle::check_retained(session_id, session.first_index(), after)?;
                session.events(after, u64::MAX, usize::MAX)?
            }
            None => Vec::new(),
        };
        Ok(StateRead { snapshot, events })
    }

    pub(in crate::memory) fn put_snapshots_sync(
        &self,
        session_id: &str,
        snapshots: Vec<SnapshotWrite>,
    ) -> Result<()> {
        validate::snapshots(session_id, &snapshots)?;
        let mut state = self.inner.lock()?;
        let now = self.now();
        let frontier = state.sessions.get(session_id).map_or(0, |s| s.frontier());
        rules::state::check_snapshots(frontier, &snapshots)?;
        if snapshots.is_empty() {
            return Ok(());
        }
        let stored = state.snapshots.entry(session_id.to_owned()).or_default();
        for snapshot in snapshots {
            let current = stored.get(&snapshot.reducer).map(|s| s.index);
            if rules::state::replaces(current, snapshot.index) {
                stored.insert(
                    snapshot.reducer,
                    SnapshotRec {
                        index: snapshot.index,
                        state: snapshot.state,
                        updated_at: now,
                    },
                );
            }
        }
        Ok(())
    }

    pub(in crate::memory) fn list_snapshots_sync(
        &self,
        session_id: &str,
    ) -> Result<Vec<SnapshotInfo>> {
        let state = self.inner.lock_for(session_id)?;
        Ok(state
            .snapshots
            .get(session_id)
            .map(|m| {
                m.iter()
                    .map(|(reducer, s)| SnapshotInfo {
                        reducer: reducer.clone(),
                        index: s.index,
                        updated_at: s.updated_at,
                    })
                    .collect()
            })
            .unwrap_or_default())
    }
}
