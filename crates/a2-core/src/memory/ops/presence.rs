//! Presence: `presence_set` (P1, P2) and `presence_read` (P3).

use super::super::*;

impl MemoryStore {
    pub(in crate::memory) fn presence_set_sync(
        &self,
        ns: &str,
        participant: &str,
        values: BTreeMap<String, Option<Value>>,
        meta: PresenceMeta,
    ) -> Result<Option<PresencePatch>> {
        validate::presence_set(ns, participant, &values, &meta)?;
        let mut state = self.inner.lock()?;
        let now = self.now();
        if values.is_empty() {
            return Ok(None);
        }
        let namespace = state.presence.entry(ns.to_owned()).or_default();
        let patch = namespace.set(participant, values, meta, now);
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
