//! The feed loop, written once: a store's own live feed of one session
//! (what [`Feeds`](super::Feeds) opens per session, and per follower that
//! fell behind) is this loop over the store's [`LogTail`].
//!
//! A store gives two things: reads of the session's log after a position,
//! with the session's bounds ([`LogPage`]), and a signal of what changed
//! since ([`Change`]). The loop keeps the rest of §6 the same on every
//! store:
//!
//! - it reads in pages of the store's size and holds at most one page
//!   (ST4), reading the next once that one is delivered;
//! - once it delivered an event it starts each read at that event and
//!   checks its id: a session cleared and written again has another event
//!   there, or none, and the feed ends with `SessionCleared` (ST6) —
//!   `SessionExpired` when its deadline had passed (EX4);
//! - a change that carries the appended events is taken without a read
//!   when they continue the feed's position (the event at the position,
//!   when carried, must have the id the feed delivered); anything else
//!   calls for a read;
//! - it reads again at the session's deadline, to find it expired (EX4),
//!   and ends cleanly once it delivered the frontier of a closed session
//!   (CL4);
//! - a log that skips an index ends it with `Corrupted` (E1) after the
//!   events before the gap; a store error ends it with that error.
//!
//! Each store keeps only what is its own: how it reads, how a change
//! reaches it (a frontier channel, a poller, pub/sub wake-ups, an event
//! stream), and what must happen before the first read so that no change
//! after it is missed.

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;

use super::ReadCounter;
use crate::clock::Millis;
use crate::error::{Error, Result};
use crate::model::Event;
use crate::rules;
use crate::store::EventStream;

/// One read of a session's log for a feed.
#[derive(Debug, Default)]
pub struct LogPage {
    /// Whether the page starts with the event at the position read after
    /// (its id is checked, ST6); false when the read could not include it
    /// (the feed delivered nothing yet, or that event was trimmed).
    pub checked: bool,
    /// The events read, in index order.
    pub events: Vec<Event>,
    /// The session's deadline (EX1), if it has one.
    pub deadline: Option<Millis>,
    /// The frontier of the session's close (CL1), if it is closed.
    pub closed: Option<u64>,
}

/// What a store's signal says changed in the session.
#[derive(Debug)]
pub enum Change {
    /// Something may have changed: read.
    Read,
    /// These events were appended, consecutive and in index order: taken
    /// without a read when they continue the feed's position (older ones
    /// are skipped; the one at the position must have the id delivered).
    Appended(Vec<Event>),
    /// The log reached this frontier, its events not carried: a feed
    /// behind it reads, and so does one at it that delivered an event
    /// (the event there may belong to a new log, ST6).
    Reached(u64),
    /// The log reaches at most this frontier (the store looked): a feed at
    /// or past it has nothing to read.
    AtMost(u64),
    /// The feed ends with this error (the store closed, its connection
    /// failed for good).
    End(Error),
}

/// A store's side of one live feed (see the module docs).
#[async_trait]
pub trait LogTail: Send + 'static {
    /// Up to `limit` events of the session after `after`; when `check`, the
    /// read starts at `after` itself so that the loop can check that event
    /// is still the one it delivered (ST6). Every change signalled before
    /// the read began is in it.
    async fn read(&mut self, after: u64, check: bool, limit: usize) -> Result<LogPage>;

    /// Waits for the next change after the last read or change.
    async fn change(&mut self) -> Change;

    /// An error that ends the feed before anything else is delivered (the
    /// store instance closed), checked before each step.
    fn ended(&self) -> Option<Error> {
        None
    }

    /// The store clock.
    fn now(&self) -> Millis;

    /// How many events a read asks for.
    fn page(&self) -> usize;
}

/// A store's live feeds: what [`Feeds`](super::Feeds) opens once per
/// followed session (its shared reader), and once per follower that fell
/// behind, and runs the feed loop over.
pub trait FeedSource: Send + Sync + 'static {
    /// Starts following `session`, already validated. The store's signal
    /// is live when this returns: the first read sees every write before,
    /// the signal every write after (or the first read joins what makes it
    /// so before it reads). A closed store is `StoreUnavailable`.
    fn tail(&self, session: &str) -> Result<Box<dyn LogTail>>;
}

struct Tail {
    log: Box<dyn LogTail>,
    session: String,
    /// The last index queued or delivered.
    last: u64,
    /// The id of the event at `last`, once one was queued (ST6).
    last_id: Option<String>,
    reads: ReadCounter,
    ready: VecDeque<Event>,
    /// Read before waiting: at the start, after a change that was not
    /// taken as it is, and after a full page (more may follow).
    must_read: bool,
    /// The session is closed and the feed read its last event (CL4).
    complete: bool,
    /// The session's deadline at the last read (EX4).
    deadline: Option<Millis>,
    /// An error to end with once `ready` is delivered.
    error: Option<Error>,
    done: bool,
}

/// Every event of `session` after `after_index`, then every later one
/// (ST1), from `source`; `after_id`, when given, is the id of the event at
/// `after_index`, checked by the first read (ST6).
pub(super) fn stream(
    source: &dyn FeedSource,
    session: &str,
    after_index: u64,
    after_id: Option<String>,
    reads: ReadCounter,
) -> EventStream {
    let log = match source.tail(session) {
        Ok(log) => log,
        Err(error) => return futures::stream::once(async move { Err(error) }).boxed(),
    };
    let tail = Tail {
        log,
        session: session.to_owned(),
        last: after_index,
        last_id: after_id,
        reads,
        ready: VecDeque::new(),
        must_read: true,
        complete: false,
        deadline: None,
        error: None,
        done: false,
    };
    futures::stream::unfold(tail, |mut tail| async move {
        let item = tail.next().await?;
        Some((item, tail))
    })
    .boxed()
}

impl Tail {
    async fn next(&mut self) -> Option<Result<Event>> {
        loop {
            if self.done {
                return None;
            }
            if let Some(error) = self.log.ended() {
                self.done = true;
                return Some(Err(error));
            }
            if let Some(event) = self.ready.pop_front() {
                return Some(Ok(event));
            }
            if let Some(error) = self.error.take() {
                self.done = true;
                return Some(Err(error));
            }
            if self.complete {
                // CL4: the log is final and every event of it delivered.
                return None;
            }
            if self.must_read {
                if let Err(error) = self.read().await {
                    // Events queued before the failure still go out first.
                    self.error = Some(error);
                }
                continue;
            }
            let change = match self.until_deadline() {
                Some(wait) => tokio::select! {
                    change = self.log.change() => change,
                    () = tokio::time::sleep(wait) => Change::Read,
                },
                None => self.log.change().await,
            };
            self.take(change);
        }
    }

    /// EX4: how long until an idle session's deadline has passed.
    fn until_deadline(&self) -> Option<Duration> {
        let deadline = self.deadline?;
        let left = deadline.saturating_sub(self.log.now()).max(0);
        Some(Duration::from_millis(u64::try_from(left).unwrap_or(0) + 1))
    }

    /// Applies one change: queues what it carries, or calls for a read,
    /// or ends the feed.
    fn take(&mut self, change: Change) {
        match change {
            Change::Read => self.must_read = true,
            Change::Appended(events) => self.must_read = !self.take_appended(events),
            Change::Reached(frontier) => {
                self.must_read =
                    frontier > self.last || (frontier == self.last && self.last_id.is_some());
            }
            Change::AtMost(frontier) => self.must_read = frontier > self.last,
            Change::End(error) => self.error = Some(error),
        }
    }

    /// Queues the carried events that follow the feed's position; false
    /// when they do not continue it (a gap, or another event at its
    /// position: a read decides).
    fn take_appended(&mut self, events: Vec<Event>) -> bool {
        for event in events {
            if event.index < self.last {
                continue;
            }
            if event.index == self.last {
                if self.last_id.as_ref().is_some_and(|id| *id != event.id) {
                    return false;
                }
                continue;
            }
            if event.index != self.last + 1 {
                return false;
            }
            self.last = event.index;
            self.last_id = Some(event.id.clone());
            self.ready.push_back(event);
        }
        true
    }

    /// One page after the last queued event; another follows on the next
    /// turn when this one was full.
    async fn read(&mut self) -> Result<()> {
        let check = self.last_id.is_some() && self.last > 0;
        let limit = self.log.page().max(1);
        self.reads.count();
        let page = self.log.read(self.last, check, limit).await?;
        self.must_read = page.events.len() >= limit;
        let mut events = page.events.into_iter();
        if page.checked {
            let still_there = events.next().is_some_and(|event| {
                event.index == self.last && Some(&event.id) == self.last_id.as_ref()
            });
            if !still_there {
                return Err(rules::lifecycle::log_gone(
                    &self.session,
                    self.deadline,
                    self.log.now(),
                ));
            }
        }
        self.deadline = page.deadline;
        for event in events {
            if event.index != self.last + 1 {
                return Err(Error::corrupted(
                    format!(
                        "the log of {:?} skips from {} to {}",
                        self.session, self.last, event.index
                    ),
                    Some(&self.session),
                    Some(self.last + 1),
                ));
            }
            self.last = event.index;
            self.last_id = Some(event.id.clone());
            self.ready.push_back(event);
        }
        self.complete = rules::lifecycle::feed_complete(page.closed, self.last);
        Ok(())
    }
}
