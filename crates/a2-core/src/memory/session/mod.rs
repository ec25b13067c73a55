//! One session of the memory store: its log, its lanes, the sets that make
//! claiming O(claimed + log n), and its listing counters.
//!
//! # Readiness
//! A pending event is *ready* when it may be claimed now or once its lease
//! or retry time has passed: a lane-less pending event, or the head of its
//! lane when that head is not dead-lettered (§1). Every ready event sits in
//! exactly one of two sets:
//! - `free`: claimable at once, by index, kept as runs of consecutive
//!   indexes (see `runs`: appending extends the last run);
//! - `timed`: claimable from a time (lease expiry or retry time), by
//!   `(time, index)`.
//!
//! Claiming first moves the due part of `timed` into `free` (each move pays
//! for an earlier claim or failure, so the cost is amortized), then takes the
//! lowest indexes of `free`. The earliest entry of `timed` is C3's `retry_at`.
//! Each record remembers its [`Slot`], so leaving a set is O(log n).

use std::collections::{BTreeSet, VecDeque};
use std::hash::BuildHasher;
use std::sync::Arc;

use crate::clock::Millis;

use crate::error::Result;
use crate::model::{Cause, ClaimOutcome, Event, NewEvent, StoredEvent};

use super::row::Row;
use super::runs::Runs;
use super::texts::Texts;
use super::{HashMap, HashSet};

mod fork;
#[cfg(test)]
mod invariants;
mod work;

/// Where a record sits in the ready sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// Not ready: processed, dead-lettered, or waiting behind its lane head.
    Out,
    /// Ready and claimable at once.
    Free,
    /// Ready and claimable from this time.
    At(Millis),
}

/// A stored event and its place in the ready sets.
#[derive(Debug)]
pub(super) struct Rec {
    pub(super) ev: Row,
    pub(super) slot: Slot,
}

impl Rec {
    /// The slot a ready record belongs in, from its own fields: a held lease
    /// or a retry time makes it timed, else it is free
    /// ([`crate::rules::claim::waits_until`]).
    fn ready_slot(&self) -> Slot {
        match crate::rules::claim::waits_until(&self.ev.record()) {
            Some(at) => Slot::At(at),
            None => Slot::Free,
        }
    }

    /// Whether a ready record may be claimed at `now` (C2:
    /// [`crate::rules::claim::claimable`]).
    fn claimable_at(&self, now: Millis) -> bool {
        crate::rules::claim::claimable(&self.ev.record(), now)
    }
}

/// The maintained counters of I1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counters {
    pub(super) pending_count: u64,
    pub(super) failed_count: u64,
    pub(super) attempt_count: u64,
    pub(super) failure_count: u64,
    pub(super) first_event_at: Millis,
    pub(super) updated_at: Millis,
}

/// One session's log and processing state.
#[derive(Debug)]
pub(super) struct SessionState {
    /// The session id.
    pub(super) id: Arc<str>,
    /// Index `i` lives at position `i - 1 - trimmed`.
    log: VecDeque<Rec>,
    /// How many events were trimmed from the front (TR1): the first
    /// retained index is `trimmed + 1`.
    trimmed: u64,
    /// The frontier and store time of the session's close (CL1), if closed.
    pub(super) closed: Option<(u64, Millis)>,
    /// Its expiry (EX1), if it has one.
    pub(super) expiry: Option<crate::model::Expiry>,
    /// The session and index it was forked from (FK5), if it is a fork.
    pub(super) forked_from: Option<crate::model::ForkOrigin>,
    /// Event id → index, for this session's ids only: an id is unique
    /// within its session (A4, A5, CO6). The table holds indexes and the
    /// ids' hashes, and finds each id in the log, so an id is kept once.
    ids: hashbrown::HashTable<IdSlot>,
    /// The hasher of `ids`.
    id_hasher: foldhash::fast::RandomState,
    /// The ids and payload texts of the log.
    texts: Texts,
    /// Per lane, its pending events in index order; the front is the head.
    /// A dead-lettered head stays at the front and blocks the lane.
    lanes: HashMap<Arc<str>, VecDeque<u64>>,
    /// The event types and lanes of the log, each kept once for the rows
    /// to share: they repeat from event to event.
    names: HashSet<Arc<str>>,
    free: Runs,
    timed: BTreeSet<(Millis, u64)>,
    pub(super) counters: Counters,
}

/// An entry of the id table. The hash is kept so that growing the table
/// moves entries without reading the log: rows in hash order are rows in
/// random order, a cache miss each.
#[derive(Debug, Clone, Copy)]
struct IdSlot {
    hash: u64,
    index: u64,
}

impl SessionState {
    pub(super) fn new(id: Arc<str>) -> Self {
        Self {
            id,
            log: VecDeque::new(),
            trimmed: 0,
            closed: None,
            expiry: None,
            forked_from: None,
            ids: hashbrown::HashTable::new(),
            id_hasher: foldhash::fast::RandomState::default(),
            texts: Texts::default(),
            lanes: HashMap::default(),
            names: HashSet::default(),
            free: Runs::default(),
            timed: BTreeSet::new(),
            counters: Counters::default(),
        }
    }

    /// The highest index, 0 when empty.
    pub(super) fn frontier(&self) -> u64 {
        self.trimmed + self.log.len() as u64
    }

    /// When the session expires (EX1): its expiry from its last activity.
    pub(super) fn deadline(&self) -> Option<Millis> {
        self.expiry
            .and_then(|e| e.deadline(self.counters.updated_at))
    }

    /// The first retained index (TR1): 1 until the session is trimmed.
    pub(super) fn first_index(&self) -> u64 {
        self.trimmed + 1
    }

    /// Where `index` lives in the log, if it is retained.
    fn position(&self, index: u64) -> Option<usize> {
        index
            .checked_sub(self.first_index())
            .and_then(|p| usize::try_from(p).ok())
    }

    /// Removes the events through `through` (TR1), with their ids and
    /// texts; the caller checked they are settled (TR2), so none is in a
    /// ready set or a lane. Their ids leave the id table: A5 then knows
    /// only the retained events (TR4). The counters stay (TR5).
    pub(super) fn trim(&mut self, through: u64) {
        while self.first_index() <= through {
            let index = self.first_index();
            let Some(rec) = self.log.pop_front() else {
                break;
            };
            let hash = self.id_hasher.hash_one(self.texts.id(rec.ev.text));
            if let Ok(slot) = self.ids.find_entry(hash, |slot| slot.index == index) {
                slot.remove();
            }
            self.trimmed += 1;
        }
        match self.log.front() {
            Some(rec) => self.texts.forget_before(rec.ev.text),
            None => self.texts.forget_all(),
        }
    }

    /// Whether the session has a pending event (A10).
    pub(super) fn has_pending(&self) -> bool {
        self.counters.pending_count > 0
    }

    /// Whether an event may be claimable at `now`: a free one, or a timed
    /// one whose time has come (PS2).
    pub(super) fn has_claimable(&self, now: Millis) -> bool {
        self.free.iter().next().is_some() || self.timed.first().is_some_and(|&(at, _)| at <= now)
    }

    /// The session's copy of an event type or lane name, made on first use.
    pub(super) fn name(&mut self, name: &str) -> Arc<str> {
        if let Some(name) = self.names.get(name) {
            return name.clone();
        }
        let name: Arc<str> = Arc::from(name);
        self.names.insert(name.clone());
        name
    }

    /// The index of the event with this id in this session, if any.
    pub(super) fn index_of(&self, id: &str) -> Option<u64> {
        let hash = self.id_hasher.hash_one(id);
        self.ids
            .find(hash, |slot| {
                slot.hash == hash && self.id_of(slot.index) == Some(id)
            })
            .map(|slot| slot.index)
    }

    /// The id of the event at `index`, if it exists.
    pub(super) fn id_of(&self, index: u64) -> Option<&str> {
        self.get(index).map(|rec| self.texts.id(rec.ev.text))
    }

    /// Leaves the payload of `index` undecodable, as a half-written entry
    /// would be (test support for E1); false when there is no such event.
    #[cfg(feature = "testing")]
    pub(super) fn damage(&mut self, index: u64) -> bool {
        let Some(p) = self.position(index) else {
            return false;
        };
        let Some(id) = self
            .log
            .get(p)
            .map(|rec| self.texts.id(rec.ev.text).to_owned())
        else {
            return false;
        };
        let text = self.texts.push(&id, "\u{1} not JSON");
        if let Some(rec) = self.log.get_mut(p) {
            rec.ev.text = text;
        }
        true
    }

    /// What the rules read of the processing record at `index`, if it
    /// exists.
    pub(super) fn record(&self, index: u64) -> Option<crate::rules::Record<'_>> {
        self.get(index).map(|rec| rec.ev.record())
    }

    /// The record at `index`, if it exists.
    pub(super) fn get(&self, index: u64) -> Option<&Rec> {
        self.position(index).and_then(|p| self.log.get(p))
    }

    fn get_mut(&mut self, index: u64) -> Option<&mut Rec> {
        self.position(index).and_then(|p| self.log.get_mut(p))
    }

    /// The records with `after < index ≤ through`, at most `limit`, with
    /// their indexes.
    fn rows(&self, after: u64, through: u64, limit: usize) -> impl Iterator<Item = (u64, &Rec)> {
        let through = through.min(self.frontier());
        let after = after.max(self.trimmed);
        let (start, end) = if through <= after {
            (0, 0)
        } else {
            // Both bounds are ≤ the log length, which is a usize.
            let start = (after - self.trimmed) as usize;
            let end = (through - self.trimmed) as usize;
            (start, end.min(start.saturating_add(limit)))
        };
        // Counted from `start`, not `after + 1`: an empty range may start
        // after `u64::MAX`.
        (self.trimmed + start as u64 + 1..).zip(self.log.range(start..end))
    }

    /// The stored events with `after < index ≤ through`, at most `limit`.
    pub(super) fn stored_events(
        &self,
        after: u64,
        through: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>> {
        self.rows(after, through, limit)
            .map(|(index, rec)| rec.ev.stored(&self.texts, &self.id, index))
            .collect()
    }

    /// The events with `after < index ≤ through`, at most `limit`.
    pub(super) fn events(&self, after: u64, through: u64, limit: usize) -> Result<Vec<Event>> {
        self.rows(after, through, limit)
            .map(|(index, rec)| rec.ev.event(&self.texts, &self.id, index))
            .collect()
    }

    /// The stored event at `index`, if it exists.
    pub(super) fn stored(&self, index: u64) -> Option<Result<StoredEvent>> {
        self.get(index)
            .map(|rec| rec.ev.stored(&self.texts, &self.id, index))
    }

    /// Moves a record between ready sets.
    fn set_slot(&mut self, index: u64, slot: Slot) {
        let Some(rec) = self.position(index).and_then(|p| self.log.get_mut(p)) else {
            return;
        };
        match rec.slot {
            Slot::Out => {}
            Slot::Free => {
                self.free.remove(index);
            }
            Slot::At(at) => {
                self.timed.remove(&(at, index));
            }
        }
        match slot {
            Slot::Out => {}
            Slot::Free => {
                self.free.insert(index);
            }
            Slot::At(at) => {
                self.timed.insert((at, index));
            }
        }
        rec.slot = slot;
    }

    /// Puts a ready record in the set its fields call for.
    fn reslot(&mut self, index: u64) {
        if let Some(slot) = self.get(index).map(Rec::ready_slot) {
            self.set_slot(index, slot);
        }
    }

    /// Appends `new`, with its final `id` and its payload's compact JSON
    /// `text`, at index `frontier + 1` (A1, A8, A9, A11), caused by `cause`
    /// when a completion returned it (CO2): indexes its id, counts it, and
    /// makes it ready when it is pending and lane-less or heads its lane.
    pub(super) fn append(
        &mut self,
        id: &str,
        new: &NewEvent,
        text: &str,
        now: Millis,
        cause: Option<Cause>,
    ) {
        let hash = self.id_hasher.hash_one(id);
        let text = self.texts.push(id, text);
        let event_type = self.name(&new.event_type);
        let lane = new.lane.as_deref().map(|lane| self.name(lane));
        self.push(Row::appended(text, new, event_type, lane, now, cause), hash);
    }

    /// Appends a row whose id hashes to `hash` (see [`Self::append`]).
    fn push(&mut self, ev: Row, hash: u64) {
        let index = self.frontier() + 1;
        let pending = ev.is_pending();
        let lane = ev.lane.clone();
        if self.frontier() == 0 {
            self.counters.first_event_at = ev.created_at;
        }
        self.touch(ev.created_at);
        self.log.push_back(Rec {
            ev,
            slot: Slot::Out,
        });
        self.ids
            .insert_unique(hash, IdSlot { hash, index }, |slot| slot.hash);
        if !pending {
            // Settled at append: never claimable, never in a lane (A8).
            return;
        }
        self.counters.pending_count += 1;
        // Free, or timed at its due time when delayed (DL1); a delayed
        // lane head holds its lane like any head (DL2).
        match lane {
            None => self.reslot(index),
            Some(lane) => {
                let queue = self.lanes.entry(lane).or_default();
                queue.push_back(index);
                if queue.len() == 1 {
                    self.reslot(index);
                }
            }
        }
    }

    /// Records a write at `now` for `updated_at` (the latest store time of a
    /// write, so a clock moved backward never makes it go back).
    pub(super) fn touch(&mut self, now: Millis) {
        self.counters.updated_at = self.counters.updated_at.max(now);
    }
}
