//! A follower: one feed of a session, taking from the session's shared
//! reader, or reading on its own while it is behind.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;

use super::Hub;
use super::reader::{End, Member, Reader};
use crate::error::{Error, Result};
use crate::model::Event;
use crate::store::EventStream;

/// At most this many events move from the buffer to a follower's queue at
/// a time.
const TAKE: usize = 64;

pub(super) struct Follower {
    hub: Arc<Hub>,
    session: String,
    id: u64,
    /// The session's reader, once joined.
    reader: Option<Arc<Reader>>,
    /// Its own feed, while it is behind the reader's buffer.
    own: Option<EventStream>,
    /// The last index queued.
    after: u64,
    /// The id of the event at `after`, once one was queued (ST6).
    after_id: Option<String>,
    queue: VecDeque<Event>,
    done: bool,
}

/// What a look at the buffer found.
enum Took {
    Events,
    Behind,
    Nothing,
    Ended(End),
}

impl Follower {
    pub fn stream(hub: Arc<Hub>, session: &str, after_index: u64) -> EventStream {
        hub.followers.fetch_add(1, Ordering::Relaxed);
        let id = hub.next_follower.fetch_add(1, Ordering::Relaxed);
        let follower = Follower {
            hub,
            session: session.to_owned(),
            id,
            reader: None,
            own: None,
            after: after_index,
            after_id: None,
            queue: VecDeque::new(),
            done: false,
        };
        futures::stream::unfold(follower, |mut follower| async move {
            let item = follower.next().await?;
            Some((item, follower))
        })
        .boxed()
    }

    async fn next(&mut self) -> Option<Result<Event>> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                self.hub.deliveries.fetch_add(1, Ordering::Relaxed);
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            if self.reader.is_none() && self.own.is_none() {
                self.join();
            }
            if self.own.is_some() {
                match self.read_own().await {
                    Ok(true) => {}
                    // CL4: its own feed read the whole of a closed log.
                    Ok(false) => self.done = true,
                    Err(error) => {
                        self.done = true;
                        return Some(Err(error));
                    }
                }
                continue;
            }
            match self.take() {
                Took::Events => {}
                Took::Behind => self.fall_behind(),
                Took::Nothing => {
                    if let Some(reader) = self.reader.clone() {
                        let (hub, id, position) = (self.hub.clone(), self.id, self.after);
                        std::future::poll_fn(|cx| reader.poll_more(&hub, id, position, cx)).await;
                    }
                }
                Took::Ended(End::Failed(Error::SessionCleared { .. }))
                    if self.after_id.is_none() =>
                {
                    // Nothing of the old log was delivered: follow the new
                    // one, as a feed opened now would.
                    self.leave();
                }
                Took::Ended(End::Complete) => self.done = true,
                Took::Ended(End::Failed(error)) => {
                    self.done = true;
                    return Some(Err(error));
                }
            }
        }
    }

    /// Joins the session's reader, opening one when there is none: as a
    /// member taking from the buffer when its position is in it, else with
    /// a feed of its own.
    fn join(&mut self) {
        if tokio::runtime::Handle::try_current().is_err() {
            // No runtime for the stores' feeds to share: read alone.
            self.open_own();
            return;
        }
        let reader = {
            let mut readers = self.hub.readers();
            let reader = readers
                .entry(self.session.clone())
                .or_insert_with(|| {
                    let feed = self
                        .hub
                        .open(&self.session, self.after, self.after_id.clone());
                    Arc::new(Reader::new(
                        &self.session,
                        self.after,
                        self.after_id.clone(),
                        feed,
                    ))
                })
                .clone();
            let joined = {
                let mut ring = reader.ring();
                let joined = self.after >= ring.floor
                    && (self.after_id.is_none()
                        || ring.id_at(self.after) == self.after_id.as_deref());
                ring.members.insert(
                    self.id,
                    Member {
                        position: self.after,
                        joined,
                    },
                );
                joined
            };
            drop(readers);
            if !joined {
                self.open_own();
            }
            reader
        };
        self.reader = Some(reader);
    }

    fn open_own(&mut self) {
        self.own = Some(
            self.hub
                .open(&self.session, self.after, self.after_id.clone()),
        );
    }

    /// Moves the events after this follower's position from the buffer to
    /// its queue.
    fn take(&mut self) -> Took {
        let Some(reader) = self.reader.clone() else {
            return Took::Nothing;
        };
        let mut ring = reader.ring();
        if self.after < ring.floor {
            return Took::Behind;
        }
        if self.after < ring.tail() {
            let skip = usize::try_from(self.after - ring.floor).unwrap_or(usize::MAX);
            for event in ring.events.iter().skip(skip).take(TAKE) {
                self.queue.push_back(event.clone());
            }
            if let Some(last) = self.queue.back() {
                self.after = last.index;
                self.after_id = Some(last.id.clone());
            }
            if let Some(member) = ring.members.get_mut(&self.id) {
                member.position = self.after;
            }
            return Took::Events;
        }
        match &ring.ended {
            Some(end) => Took::Ended(end.clone()),
            None => Took::Nothing,
        }
    }

    /// Leaves the buffer for a feed of its own, from its position.
    fn fall_behind(&mut self) {
        if let Some(reader) = &self.reader
            && let Some(member) = reader.ring().members.get_mut(&self.id)
        {
            member.joined = false;
        }
        self.open_own();
    }

    /// Reads one event from its own feed; rejoins the buffer once the event
    /// it read is the one the buffer holds at that index (ST6). False when
    /// its feed ended cleanly: the session is closed and read to its end
    /// (CL4).
    async fn read_own(&mut self) -> Result<bool> {
        let Some(own) = self.own.as_mut() else {
            return Ok(true);
        };
        let event = match own.next().await {
            Some(Ok(event)) => event,
            Some(Err(error)) => return Err(error),
            None => return Ok(false),
        };
        self.after = event.index;
        self.after_id = Some(event.id.clone());
        self.queue.push_back(event);
        if let Some(reader) = self.reader.clone() {
            let mut ring = reader.ring();
            let rejoin = ring.ended.is_none()
                && self.after >= ring.floor
                && ring.id_at(self.after) == self.after_id.as_deref();
            if let Some(member) = ring.members.get_mut(&self.id) {
                member.position = self.after;
                member.joined = rejoin;
            }
            drop(ring);
            if rejoin {
                self.own = None;
            }
        }
        Ok(true)
    }

    /// Leaves the session's reader, stopping it when this was its last
    /// follower.
    fn leave(&mut self) {
        let Some(reader) = self.reader.take() else {
            return;
        };
        reader.forget_waker(self.id);
        let last = {
            let mut readers = self.hub.readers();
            let mut ring = reader.ring();
            ring.members.remove(&self.id);
            let last = ring.members.is_empty() && ring.ended.is_none();
            if last {
                Hub::forget(&mut readers, &reader);
            }
            last
        };
        if last {
            reader.stop();
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.leave();
        self.hub.followers.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use serde_json::json;

    use crate::{MemoryStore, NewEvent, Store, StoreOptions};

    /// No wake-up is lost when followers take turns polling the store's
    /// feed: 40 followers waiting at the tail, each in a task of its own on
    /// two threads, while single events are appended one by one, each
    /// receive every event in order — and the log is read once per
    /// wake-up at most (ST7), not once per follower.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn followers_polling_the_feed_in_turn_lose_no_wake_up() {
        const EVENTS: u64 = 2_000;
        let store = std::sync::Arc::new(MemoryStore::new(StoreOptions::default()));
        let followers: Vec<_> = (0..40)
            .map(|_| {
                let mut feed = store.stream("s", 0);
                tokio::spawn(async move {
                    for index in 1..=EVENTS {
                        let event = feed.next().await.expect("an event").expect("no error");
                        assert_eq!(event.index, index, "in order, with no gap");
                    }
                })
            })
            .collect();
        for n in 0..EVENTS {
            store
                .append("s", vec![NewEvent::new("t", json!(n))])
                .await
                .expect("append");
            if n % 7 == 0 {
                tokio::task::yield_now().await;
            }
        }
        for follower in followers {
            tokio::time::timeout(std::time::Duration::from_secs(30), follower)
                .await
                .expect("every follower receives every event: no wake-up lost")
                .expect("the follower");
        }
        let stats = store.feed_stats();
        assert!(
            stats.reads <= EVENTS + 2,
            "{} reads for {EVENTS} appends followed by 40 feeds",
            stats.reads
        );
    }

    /// Outside a tokio runtime a feed reads on its own, with one feed for
    /// its whole life.
    #[test]
    fn a_feed_polled_outside_tokio_reads_on_its_own() {
        let store = MemoryStore::new(StoreOptions::default());
        let events = (0..5).map(|n| NewEvent::new("t", json!(n))).collect();
        futures::executor::block_on(async {
            store.append("s", events).await.expect("append");
            let mut feed = store.stream("s", 0);
            for index in 1..=5 {
                let event = feed.next().await.expect("an event").expect("no error");
                assert_eq!(event.index, index);
            }
            let stats = store.feed_stats();
            assert_eq!((stats.readers, stats.followers), (0, 1));
            assert_eq!(stats.reads, 1, "one feed, one read of the five events");
        });
    }
}
