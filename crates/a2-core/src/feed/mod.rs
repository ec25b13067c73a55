//! Shared readers: in one process, the live feeds of one session share one
//! read of its log.
//!
//! Every store has its own way to follow a session (a frontier channel, a
//! `PRAGMA data_version` poll, pub/sub wake-ups, SSE): its [`FeedSource`].
//! Opened once per follower, a wake-up would cost one store read per
//! follower. [`Feeds`] opens it once per session instead — the session's
//! *reader* — and fans what it yields out to every feed of the session in
//! this process (its *followers*):
//!
//! - the reader keeps the last events it read in a buffer of at most
//!   [`SHARED_BUFFER`] events, trimmed as soon as every follower has taken
//!   them, and reads on only while the leading follower is within that
//!   buffer of its tail, so a session with no reader waiting costs nothing;
//! - no task runs the reader: a follower that finds nothing left to take
//!   polls the store's feed itself (one at a time), with a waker that wakes
//!   every waiting follower of the session. A write therefore reaches each
//!   follower in one wake-up — the first to run reads, the others take what
//!   it read — and a follower that is not polled holds nobody back;
//! - each follower has its own position and its own small queue, and takes
//!   the events after its position from the buffer: exactly once, in order,
//!   with no gap (ST3). A follower that takes slowly never holds back the
//!   reader or the others: once it falls behind the buffer it opens its own
//!   feed from its position — catching up by its own reads, as a follower
//!   with no shared reader would — and rejoins the buffer when it reaches
//!   it, after checking that the event at its position is the one it
//!   delivered (ST6);
//! - when the reader's feed ends (the store closed, a backend failure, the
//!   session cleared, a corrupted log) every follower delivers what it
//!   still has, then ends the same way; a follower that had delivered
//!   nothing when its session was cleared instead follows the new log,
//!   as a fresh feed would;
//! - the last follower to leave drops the reader and its store feed.
//!
//! A wake-up therefore costs one store read per session that changed, not
//! one per follower. [`FeedStats`] counts the reads and deliveries so that
//! "reads per append" can be watched in production.

mod follower;
mod reader;
mod tail;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use foldhash::HashMap;

pub use crate::model::FeedStats;
pub use tail::{Change, FeedSource, LogPage, LogTail};

use crate::store::EventStream;
use crate::validate;

use follower::Follower;
use reader::Reader;

/// A channel's sending side that knows how many receivers are left.
pub trait Listened {
    /// How many receivers are left.
    fn listeners(&self) -> usize;
}

impl<T> Listened for tokio::sync::watch::Sender<T> {
    fn listeners(&self) -> usize {
        self.receiver_count()
    }
}

impl<T> Listened for tokio::sync::broadcast::Sender<T> {
    fn listeners(&self) -> usize {
        self.receiver_count()
    }
}

impl<S: Listened> Listened for Arc<S> {
    fn listeners(&self) -> usize {
        S::listeners(self)
    }
}

/// What a store's feed or presence subscription holds to drop its session's
/// or namespace's channel once the last receiver is gone: on drop it calls
/// `forget(owner, key)`, which takes the store's lock and calls
/// [`forget_unheard`] on the map the channel is in.
pub struct ChannelGuard<T: Send + Sync + 'static> {
    owner: Arc<T>,
    key: String,
    forget: fn(&T, &str),
}

impl<T: Send + Sync + 'static> ChannelGuard<T> {
    /// A guard of `key`'s channel in `owner`.
    pub fn new(owner: Arc<T>, key: &str, forget: fn(&T, &str)) -> Self {
        Self {
            owner,
            key: key.to_owned(),
            forget,
        }
    }

    /// What holds the channel.
    pub fn owner(&self) -> &Arc<T> {
        &self.owner
    }

    /// The session or namespace of the channel.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl<T: Send + Sync + 'static> Drop for ChannelGuard<T> {
    fn drop(&mut self) {
        (self.forget)(&self.owner, &self.key);
    }
}

/// Removes `key`'s channel from `channels` once its last receiver is gone:
/// what the guard of a store's feed or presence subscription does when it
/// drops, so that a session or namespace nobody follows costs nothing.
pub fn forget_unheard<S: Listened, H: std::hash::BuildHasher>(
    channels: &mut std::collections::HashMap<String, S, H>,
    key: &str,
) {
    if channels.get(key).is_some_and(|tx| tx.listeners() == 0) {
        channels.remove(key);
    }
}

/// How many events a session's shared reader keeps for its followers: a
/// follower further behind catches up by its own reads.
pub const SHARED_BUFFER: usize = 512;

/// Counts a feed's reads of the log, for [`FeedStats::reads`].
#[derive(Debug, Clone, Default)]
pub(crate) struct ReadCounter(Arc<AtomicU64>);

impl ReadCounter {
    /// Counts one read.
    pub(crate) fn count(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The live feeds of one store instance, with one shared reader per
/// followed session (see the module docs).
///
/// ```
/// use a2_core::{MemoryStore, NewEvent, Store, StoreOptions};
/// use futures::StreamExt;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> a2_core::Result<()> {
/// let store = MemoryStore::new(StoreOptions::default());
/// let mut first = store.stream("chat", 0);
/// let mut second = store.stream("chat", 0);
/// store.append("chat", vec![NewEvent::new("message", serde_json::json!("hi"))]).await?;
/// assert_eq!(first.next().await.unwrap()?.index, 1);
/// assert_eq!(second.next().await.unwrap()?.index, 1);
/// assert_eq!(store.feed_stats().followers, 2);
/// assert_eq!(store.session_followers("chat"), 2);
/// # Ok(())
/// # }
/// ```
pub struct Feeds {
    hub: Arc<Hub>,
}

impl std::fmt::Debug for Feeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feeds")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

struct Hub {
    source: Arc<dyn FeedSource>,
    /// The sessions with a shared reader. Lock order: this map, then a
    /// reader's buffer.
    readers: Mutex<HashMap<String, Arc<Reader>>>,
    reads: ReadCounter,
    deliveries: AtomicU64,
    followers: AtomicU64,
    next_follower: AtomicU64,
}

impl Hub {
    fn readers(&self) -> MutexGuard<'_, HashMap<String, Arc<Reader>>> {
        // Every critical section leaves the map consistent.
        self.readers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store's own feed of `session` after `after_index` (whose event,
    /// when given, has the id `after_id`): the feed loop over the store's
    /// [`LogTail`].
    fn open(&self, session: &str, after_index: u64, after_id: Option<String>) -> EventStream {
        tail::stream(
            &*self.source,
            session,
            after_index,
            after_id,
            self.reads.clone(),
        )
    }

    /// Takes `reader` off the map if it is still the session's reader.
    fn forget(readers: &mut HashMap<String, Arc<Reader>>, reader: &Arc<Reader>) {
        if readers
            .get(reader.session())
            .is_some_and(|current| Arc::ptr_eq(current, reader))
        {
            readers.remove(reader.session());
        }
    }
}

impl Feeds {
    /// The feeds of a store whose own feed of a session is `source`.
    pub fn new(source: Arc<dyn FeedSource>) -> Self {
        Self {
            hub: Arc::new(Hub {
                source,
                readers: Mutex::new(HashMap::default()),
                reads: ReadCounter::default(),
                deliveries: AtomicU64::new(0),
                followers: AtomicU64::new(0),
                next_follower: AtomicU64::new(0),
            }),
        }
    }

    /// A live feed of `session` after `after_index` (ST1), sharing the
    /// session's reader with the other feeds of this instance.
    pub fn follow(&self, session: &str, after_index: u64) -> EventStream {
        if let Err(error) = validate::session_id(session) {
            return Box::pin(futures::stream::once(async move { Err(error) }));
        }
        Follower::stream(self.hub.clone(), session, after_index)
    }

    /// What the feeds did so far, and what is open now.
    pub fn stats(&self) -> FeedStats {
        FeedStats {
            reads: self.hub.reads.get(),
            deliveries: self.hub.deliveries.load(Ordering::Relaxed),
            followers: self.hub.followers.load(Ordering::Relaxed),
            readers: self.hub.readers().len() as u64,
        }
    }

    /// How many feeds of `session` are open in this instance.
    pub fn followers(&self, session: &str) -> usize {
        let reader = self.hub.readers().get(session).cloned();
        reader.map_or(0, |reader| reader.members())
    }
}

/// The messages of a broadcast channel as a stream of hints: wake-ups
/// (PS2) and cancels (CN5) that a store sends within its process. A
/// receiver that fell behind skips what it missed (a hint may be lost:
/// workers list, and renew, anyway); the stream ends when the channel
/// closes.
///
/// ```
/// use futures::StreamExt;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (tx, rx) = tokio::sync::broadcast::channel(4);
/// let mut hints = a2_core::feed::broadcast_stream(rx);
/// tx.send("chat-1").unwrap();
/// assert_eq!(hints.next().await.unwrap().unwrap(), "chat-1");
/// # }
/// ```
pub fn broadcast_stream<T: Clone + Send + 'static>(
    receiver: tokio::sync::broadcast::Receiver<T>,
) -> futures::stream::BoxStream<'static, crate::Result<T>> {
    use tokio::sync::broadcast::error::RecvError;
    Box::pin(futures::stream::unfold(
        receiver,
        |mut receiver| async move {
            loop {
                match receiver.recv().await {
                    Ok(item) => return Some((Ok(item), receiver)),
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return None,
                }
            }
        },
    ))
}
