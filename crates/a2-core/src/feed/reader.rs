//! A session's shared reader: the one store feed of the session in this
//! process, and the buffer its followers take from.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{FutureExt, StreamExt};
use tokio::sync::{Notify, watch};

use super::{Hub, SHARED_BUFFER};
use crate::error::Error;
use crate::model::Event;
use crate::store::EventStream;

/// At most this many events are moved into the buffer per wake-up of the
/// followers.
const BATCH: usize = 256;

/// Where a follower stands.
#[derive(Debug, Clone, Copy)]
pub(super) struct Member {
    /// The last index it delivered or queued.
    pub position: u64,
    /// Whether it takes from the buffer (else it reads on its own).
    pub joined: bool,
}

/// How a store's feed of a session ended.
#[derive(Debug, Clone)]
pub(super) enum End {
    /// The log is complete: the session was closed and every event of it
    /// read (CL4).
    Complete,
    /// With this error (ST5, ST6, E1, TR3).
    Failed(Error),
}

/// The buffer: the events after `floor` that some follower may still take.
pub(super) struct Ring {
    pub events: VecDeque<Event>,
    /// The index before the first buffered event.
    pub floor: u64,
    /// The id of the event at `floor`, when the reader read it.
    pub floor_id: Option<String>,
    /// How the reader's feed ended; set together with taking the reader
    /// off the hub's map, so no follower joins an ended reader.
    pub ended: Option<End>,
    /// Set by the last follower to leave.
    pub stopped: bool,
    pub members: HashMap<u64, Member>,
}

impl Ring {
    /// The last index read.
    pub fn tail(&self) -> u64 {
        self.floor + self.events.len() as u64
    }

    /// The id of the event at `index`, when the buffer knows it.
    pub fn id_at(&self, index: u64) -> Option<&str> {
        if index == self.floor {
            return self.floor_id.as_deref();
        }
        let offset = index.checked_sub(self.floor + 1)?;
        self.events
            .get(usize::try_from(offset).ok()?)
            .map(|e| e.id.as_str())
    }

    /// True while the leading follower is less than a buffer behind the
    /// tail: only then does the reader read on.
    fn wants_more(&self) -> bool {
        let lead = self.members.values().map(|m| m.position).max();
        lead.is_some_and(|lead| self.tail() < lead.saturating_add(SHARED_BUFFER as u64))
    }

    /// Drops the events every joined follower has taken, and the oldest
    /// beyond the buffer's size (their followers fall behind).
    fn trim(&mut self) {
        let taken = self
            .members
            .values()
            .filter(|m| m.joined)
            .map(|m| m.position)
            .min();
        while let Some(front) = self.events.front() {
            let consumed = taken.is_some_and(|taken| front.index <= taken);
            if !consumed && self.events.len() <= SHARED_BUFFER {
                break;
            }
            if let Some(event) = self.events.pop_front() {
                self.floor = event.index;
                self.floor_id = Some(event.id);
            }
        }
    }
}

/// One session's shared reader.
pub(super) struct Reader {
    session: String,
    ring: Mutex<Ring>,
    /// Bumped after each batch and at the end: what followers wait on.
    version: watch::Sender<u64>,
    /// A follower advanced or joined: the reader may read on.
    room: Notify,
    /// The last follower left.
    stop: Notify,
}

impl Reader {
    /// A reader whose buffer starts after `floor` (the event there has id
    /// `floor_id`, when known).
    pub fn new(session: &str, floor: u64, floor_id: Option<String>) -> Self {
        Self {
            session: session.to_owned(),
            ring: Mutex::new(Ring {
                events: VecDeque::new(),
                floor,
                floor_id,
                ended: None,
                stopped: false,
                members: HashMap::new(),
            }),
            version: watch::channel(0).0,
            room: Notify::new(),
            stop: Notify::new(),
        }
    }

    pub fn session(&self) -> &str {
        &self.session
    }

    pub fn ring(&self) -> MutexGuard<'_, Ring> {
        // Every critical section leaves the buffer consistent.
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn members(&self) -> usize {
        self.ring().members.len()
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// A follower moved or joined.
    pub fn advanced(&self) {
        self.room.notify_one();
    }

    /// The last follower left: called with the hub's map locked, after
    /// taking the reader off it.
    pub fn stop(&self, ring: &mut Ring) {
        ring.stopped = true;
        self.stop.notify_one();
    }

    /// Reads `feed` into the buffer until the last follower leaves or the
    /// feed ends.
    pub async fn run(self: Arc<Self>, hub: Arc<Hub>, mut feed: EventStream) {
        loop {
            if !self.wait_for_room().await {
                return;
            }
            let first = tokio::select! {
                item = feed.next() => item,
                () = self.stop.notified() => return,
            };
            let mut batch = Vec::new();
            let mut end = None;
            match first {
                Some(Ok(event)) => batch.push(event),
                Some(Err(error)) => end = Some(End::Failed(error)),
                None => end = Some(End::Complete),
            }
            // Whatever else is ready goes out in the same wake-up.
            while end.is_none() && batch.len() < BATCH {
                match feed.next().now_or_never() {
                    Some(Some(Ok(event))) => batch.push(event),
                    Some(Some(Err(error))) => end = Some(End::Failed(error)),
                    Some(None) => end = Some(End::Complete),
                    None => break,
                }
            }
            if !self.publish(&hub, batch, end) {
                return;
            }
        }
    }

    /// Waits until a follower wants more; false once stopped.
    async fn wait_for_room(&self) -> bool {
        loop {
            let room = self.room.notified();
            {
                let ring = self.ring();
                if ring.stopped {
                    return false;
                }
                if ring.wants_more() {
                    return true;
                }
            }
            tokio::select! {
                () = room => {}
                () = self.stop.notified() => return false,
            }
        }
    }

    /// Adds `batch` to the buffer and, when the feed ended, records how;
    /// wakes the followers. False when the reader is done.
    fn publish(self: &Arc<Self>, hub: &Hub, batch: Vec<Event>, end: Option<End>) -> bool {
        let running = match end {
            None => {
                let mut ring = self.ring();
                if ring.stopped {
                    return false;
                }
                ring.events.extend(batch);
                ring.trim();
                true
            }
            Some(end) => {
                let mut readers = hub.readers();
                Hub::forget(&mut readers, self);
                let mut ring = self.ring();
                ring.events.extend(batch);
                ring.ended = Some(end);
                false
            }
        };
        self.version.send_modify(|version| *version += 1);
        running
    }
}
