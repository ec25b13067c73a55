//! Presence: `presence_set` (P1, P2) and `presence_read` (P3).

use super::super::*;

impl MemoryStore {
    pub(in crate::memory) fn presence_apply_sync(
        &self,
        write: PresenceRequest<'_>,
    ) -> Result<Option<PresencePatch>> {
        let ns = write.ns;
        let mut state = self.inner.lock()?;
        let now = self.now();
        let namespace = state.presence.entry(ns.to_owned()).or_default();
        let patch = namespace.set(write.participant, write.values, write.meta, now);
        if namespace.is_empty() {
            state.presence.remove(ns);
        }
        if let (Some(patch), Some(tx)) = (&patch, state.presence_channels.get(ns)) {
            // An error only means no subscriber is listening right now.
            let _ = tx.send(patch.clone());
        }
        Ok(patch)
    }

    pub(in crate::memory) fn presence_read_sync(&self, ns: &str) -> Result<Vec<PresenceEntry>> {
        validate::name("namespace", ns)?;
        let mut state = self.inner.lock()?;
        let now = self.now();
        Ok(read_namespace(&mut state, ns, now))
    }
}
