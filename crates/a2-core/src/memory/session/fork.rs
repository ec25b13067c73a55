//! A session's fork (FK1, FK2): a new session holding a copy of its
//! prefix.

use std::hash::BuildHasher;
use std::sync::Arc;

use crate::clock::Millis;
use crate::model::ForkOrigin;
use crate::rules::fork::ForkCounters;

use super::{IdSlot, Rec, SessionState, Slot};

impl SessionState {
    /// FK1, FK2: a new session `id` whose events are this one's
    /// `first ..= at` (same indexes, ids, types, payloads, times, causes,
    /// lanes) with their records, leases released; its lanes and ready
    /// sets rebuilt from them, its counters summed over them (the caller
    /// checked `at` lies within the retained events).
    pub(in crate::memory) fn forked(&self, id: Arc<str>, at: u64, now: Millis) -> SessionState {
        let mut fork = SessionState::new(id);
        fork.trimmed = self.trimmed;
        fork.forked_from = Some(ForkOrigin {
            session: self.id.to_string(),
            index: at,
        });
        let mut counters = ForkCounters::default();
        for index in self.first_index()..=at.min(self.frontier()) {
            let Some(rec) = self.get(index) else { break };
            let event_id = self.texts.id(rec.ev.text);
            let text = fork.texts.push(event_id, self.texts.payload(rec.ev.text));
            let event_type = fork.name(&rec.ev.event_type);
            let lane = rec.ev.lane.as_deref().map(|lane| fork.name(lane));
            let row = rec.ev.forked(text, event_type, lane);
            counters.add(&row.record());
            let hash = fork.id_hasher.hash_one(event_id);
            let (pending, dead) = (row.is_pending(), row.work().failed_at.is_some());
            let lane = row.lane.clone();
            fork.log.push_back(Rec {
                ev: row,
                slot: Slot::Out,
            });
            fork.ids
                .insert_unique(hash, IdSlot { hash, index }, |slot| slot.hash);
            // A lane keeps its pending and dead-lettered events, in order;
            // its head is ready unless it is dead-lettered (RV2).
            let heads = match lane {
                Some(lane) if pending || dead => {
                    let queue = fork.lanes.entry(lane).or_default();
                    queue.push_back(index);
                    queue.len() == 1
                }
                Some(_) => false,
                None => true,
            };
            if pending && heads {
                fork.reslot(index);
            }
        }
        fork.counters.pending_count = counters.pending_count;
        fork.counters.failed_count = counters.failed_count;
        fork.counters.attempt_count = counters.attempt_count;
        fork.counters.failure_count = counters.failure_count;
        fork.counters.first_event_at = self.counters.first_event_at;
        fork.counters.updated_at = now;
        fork
    }
}
