//! A session's shared reader: the one store feed of the session in this
//! process, and the buffer its followers take from.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use foldhash::HashMap;
use futures::StreamExt;

use super::{Hub, SHARED_BUFFER};
use crate::error::Error;
use crate::model::Event;
use crate::store::EventStream;

/// At most this many events are moved into the buffer per poll of the
/// store's feed.
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

/// One session's shared reader: the store's feed of the session and the
/// buffer. No task of its own runs it: a follower that finds nothing left
/// to take polls the feed itself (one follower at a time), with a waker
/// that wakes every waiting follower, so a write reaches each follower in
/// one wake-up, not two (the feed's, then the reader's).
pub(super) struct Reader {
    session: String,
    ring: Mutex<Ring>,
    /// The store's feed; `None` once it ended or its last follower left.
    /// Lock order: this feed, then the hub's map, then the buffer.
    feed: Mutex<Option<EventStream>>,
    waiting: Arc<Waiting>,
    /// What the feed is polled with: wakes every waiting follower.
    waker: Waker,
}

/// The followers waiting for more, and the waker the feed is polled with.
struct Waiting {
    /// By follower id: one waker each, however often it waits.
    wakers: Mutex<HashMap<u64, Waker>>,
    /// The feed woke since it was last polled, or was never polled, or
    /// has more ready than one poll took: polling it may find something.
    /// While false, polling it would only find it pending.
    woken: AtomicBool,
}

impl Waiting {
    fn wakers(&self) -> MutexGuard<'_, HashMap<u64, Waker>> {
        self.wakers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes every waiting follower but `except`.
    fn wake_all(&self, except: Option<u64>) {
        let mut wakers = std::mem::take(&mut *self.wakers());
        if let Some(id) = except {
            wakers.remove(&id);
        }
        for waker in wakers.into_values() {
            waker.wake();
        }
    }
}

impl Wake for Waiting {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    /// The feed may have more: every waiting follower looks (the first to
    /// run polls it).
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        self.wake_all(None);
    }
}

impl Reader {
    /// A reader of `feed` whose buffer starts after `floor` (the event
    /// there has id `floor_id`, when known).
    pub fn new(session: &str, floor: u64, floor_id: Option<String>, feed: EventStream) -> Self {
        let waiting = Arc::new(Waiting {
            wakers: Mutex::default(),
            woken: AtomicBool::new(true),
        });
        Self {
            session: session.to_owned(),
            ring: Mutex::new(Ring {
                events: VecDeque::new(),
                floor,
                floor_id,
                ended: None,
                members: HashMap::default(),
            }),
            feed: Mutex::new(Some(feed)),
            waker: Waker::from(waiting.clone()),
            waiting,
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

    /// The last follower left: drops the store's feed. Called after taking
    /// the reader off the hub's map, with neither the map nor the buffer
    /// locked.
    pub fn stop(&self) {
        let feed = self.feed.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(feed);
    }

    /// Follower `id` no longer waits.
    pub fn forget_waker(&self, id: u64) {
        self.waiting.wakers().remove(&id);
    }

    /// Follower `id`, at `position`, waits for more: ready when the buffer
    /// holds something after `position` (or the feed ended), else pending
    /// until the feed or another follower wakes it.
    pub fn poll_more(
        self: &Arc<Self>,
        hub: &Hub,
        id: u64,
        position: u64,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        // Registered before looking, so a batch published after the look
        // wakes it.
        self.waiting
            .wakers()
            .entry(id)
            .and_modify(|waker| waker.clone_from(cx.waker()))
            .or_insert_with(|| cx.waker().clone());
        {
            let ring = self.ring();
            if position < ring.floor || position < ring.tail() || ring.ended.is_some() {
                return Poll::Ready(());
            }
        }
        // The feed was left pending and has not woken since: it will wake
        // this follower (registered above) when it has more.
        if !self.waiting.woken.load(Ordering::SeqCst) {
            return Poll::Pending;
        }
        if self.pump(hub, id) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Follower `id` polls the store's feed into the buffer, unless another
    /// follower is polling it. True when something was published.
    ///
    /// The feed is polled once per call, never again within the same poll
    /// of the follower's task: a feed that answers `Pending` and wakes at
    /// once — tokio's cooperative budget does that to every resource once
    /// a task spent it, as a task that drives thousands of feeds does —
    /// would otherwise be polled forever, the task never yielding to get
    /// its budget back. When the feed woke while it was being polled, every
    /// waiting follower (this one too) is woken instead, so that one of
    /// them polls it again in a later poll of its task: a follower turned
    /// away meanwhile, which registered its waker before trying, is not
    /// left waiting on a wake-up that came and went.
    fn pump(self: &Arc<Self>, hub: &Hub, id: u64) -> bool {
        let Ok(mut slot) = self.feed.try_lock() else {
            return false;
        };
        let Some(feed) = slot.as_mut() else {
            return false;
        };
        if !self.ring().wants_more() {
            return false;
        }
        self.waiting.woken.store(false, Ordering::SeqCst);
        let mut cx = Context::from_waker(&self.waker);
        let mut batch = Vec::new();
        let mut end = None;
        let mut pending = false;
        // Whatever is ready goes out in the same wake-up.
        while end.is_none() && batch.len() < BATCH {
            match feed.poll_next_unpin(&mut cx) {
                Poll::Ready(Some(Ok(event))) => batch.push(event),
                Poll::Ready(Some(Err(error))) => end = Some(End::Failed(error)),
                Poll::Ready(None) => end = Some(End::Complete),
                Poll::Pending => {
                    pending = true;
                    break;
                }
            }
        }
        if !pending {
            // A full batch: the feed may hold more without waking.
            self.waiting.woken.store(true, Ordering::SeqCst);
        }
        if end.is_some() {
            *slot = None;
        }
        if !batch.is_empty() || end.is_some() {
            // Still holding the feed: batches enter the buffer in the
            // order they were read.
            self.publish(hub, id, batch, end);
            return true;
        }
        drop(slot);
        if self.waiting.woken.load(Ordering::SeqCst) {
            // Woken while this follower held the feed: poll it again in a
            // later poll, never in this one.
            self.waiting.wake_all(None);
        }
        false
    }

    /// Adds `batch`, read by follower `id`, to the buffer and, when the
    /// feed ended, records how; wakes the other waiting followers.
    fn publish(self: &Arc<Self>, hub: &Hub, id: u64, batch: Vec<Event>, end: Option<End>) {
        match end {
            None => {
                let mut ring = self.ring();
                ring.events.extend(batch);
                ring.trim();
            }
            Some(end) => {
                let mut readers = hub.readers();
                Hub::forget(&mut readers, self);
                let mut ring = self.ring();
                ring.events.extend(batch);
                ring.ended = Some(end);
            }
        }
        // Follower `id` polled the feed: it takes the batch as it returns,
        // with no wake-up of its own.
        self.waiting.wake_all(Some(id));
    }
}
