//! The sessions this store instance's live feeds follow (ST2), and its
//! entry in each one's mark (`lua/follow.lua`): the first feed of a
//! session refreshes the entry before its first read, the keeper
//! (`src/keeper.rs`) refreshes every followed session's entry each period
//! in one request, and the last feed to end releases it. A thousand feeds
//! of one session in one process cost one refresh and one release, not a
//! thousand.
//!
//! A release and a later refresh of the same session are kept in order: a
//! feed that joins while its session's release is in flight refreshes
//! after it, so the release never takes off the entry a new feed needs.

use std::collections::HashMap;
use std::sync::{Mutex, Weak};

use a2_core::Result;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use crate::subscriber::Listener;

/// Refreshing the entry: one call, awaited by every feed that joins before
/// it is done. Each of them drives it, so it does not wait for any one
/// feed's consumer to poll.
pub(crate) type CountIn = Shared<BoxFuture<'static, Result<()>>>;

/// Releasing the entry, once the last feed of a session left.
pub(crate) type Release = Shared<BoxFuture<'static, ()>>;

/// What [`Marks`] keeps per session.
#[derive(Default)]
struct State {
    sessions: HashMap<String, Session>,
    /// Releases in flight, which a refresh of their session waits for.
    releases: HashMap<String, Release>,
    next_id: u64,
}

struct Session {
    /// The feeds of this instance that joined and have not left: told to
    /// read when the keeper finds the mark was lost.
    feeds: HashMap<u64, Weak<dyn Listener>>,
    count_in: CountIn,
}

/// The sessions this instance's feeds follow.
#[derive(Default)]
pub(crate) struct Marks {
    // A std mutex: held for a few map operations, never across an `.await`.
    state: Mutex<State>,
}

impl Marks {
    /// A feed of `session` joins with `listener`; returns its id (for
    /// [`Marks::leave`]) and the refresh it awaits before its first
    /// read. `refresh` makes that call when the session has none, or when
    /// the last one failed; it runs after a release of the session that is
    /// still in flight.
    pub(crate) fn join(
        &self,
        session: &str,
        listener: Weak<dyn Listener>,
        refresh: impl FnOnce() -> BoxFuture<'static, Result<()>>,
    ) -> (u64, CountIn) {
        let mut state = self.lock();
        let pending = state.releases.get(session).cloned();
        let make = move || -> CountIn {
            let call = refresh();
            match pending {
                Some(release) => async move {
                    release.await;
                    call.await
                }
                .boxed()
                .shared(),
                None => call.shared(),
            }
        };
        state.next_id += 1;
        let id = state.next_id;
        let entry = match state.sessions.get_mut(session) {
            Some(entry) => {
                if matches!(entry.count_in.peek(), Some(Err(_))) {
                    entry.count_in = make();
                }
                entry
            }
            None => state
                .sessions
                .entry(session.to_owned())
                .or_insert_with(|| Session {
                    feeds: HashMap::new(),
                    count_in: make(),
                }),
        };
        entry.feeds.insert(id, listener);
        (id, entry.count_in.clone())
    }

    /// Feed `id` of `session` leaves. When it was the last one and the
    /// entry had been refreshed, `release` makes the call that takes it
    /// off, which the caller runs (a later refresh of the session waits
    /// for it).
    pub(crate) fn leave(
        &self,
        session: &str,
        id: u64,
        release: impl FnOnce() -> BoxFuture<'static, ()>,
    ) -> Option<Release> {
        let mut state = self.lock();
        let entry = state.sessions.get_mut(session)?;
        entry.feeds.remove(&id);
        if !entry.feeds.is_empty() {
            return None;
        }
        let entry = state.sessions.remove(session)?;
        if !matches!(entry.count_in.peek(), Some(Ok(()))) {
            return None;
        }
        let call = release().shared();
        state.releases.insert(session.to_owned(), call.clone());
        Some(call)
    }

    /// Forgets `release` of `session` once it is done (unless a newer one
    /// took its place).
    pub(crate) fn released(&self, session: &str, release: &Release) {
        let mut state = self.lock();
        if state
            .releases
            .get(session)
            .is_some_and(|r| r.ptr_eq(release))
        {
            state.releases.remove(session);
        }
    }

    /// The sessions whose entry was refreshed: what the keeper refreshes.
    pub(crate) fn refreshed(&self) -> Vec<String> {
        self.lock()
            .sessions
            .iter()
            .filter(|(_, entry)| matches!(entry.count_in.peek(), Some(Ok(()))))
            .map(|(session, _)| session.clone())
            .collect()
    }

    /// Tells every feed of `session` to read: writes may have gone
    /// unannounced.
    pub(crate) fn resync(&self, session: &str) {
        // Outside the lock: a listener may take locks of its own.
        for listener in self.listeners(session) {
            listener.resync();
        }
    }

    /// Hands `message` to every feed of `session`, as if published.
    pub(crate) fn tell(&self, session: &str, message: &[u8]) {
        for listener in self.listeners(session) {
            listener.message(message);
        }
    }

    fn listeners(&self, session: &str) -> Vec<std::sync::Arc<dyn Listener>> {
        match self.lock().sessions.get(session) {
            Some(entry) => entry.feeds.values().filter_map(Weak::upgrade).collect(),
            None => Vec::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section leaves the maps whole.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use a2_core::Error;

    use super::*;

    /// A `refresh` that counts its calls and succeeds or fails.
    fn call(calls: &Arc<AtomicUsize>, ok: bool) -> impl FnOnce() -> BoxFuture<'static, Result<()>> {
        let calls = calls.clone();
        move || {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if ok {
                    Ok(())
                } else {
                    Err(Error::unavailable("refused"))
                }
            }
            .boxed()
        }
    }

    #[derive(Default)]
    struct Heard(AtomicUsize);

    impl Listener for Heard {
        fn message(&self, _: &[u8]) {}
        fn resync(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn fail(&self, _: Error) {}
    }

    fn listener() -> (Arc<Heard>, Weak<dyn Listener>) {
        let heard = Arc::new(Heard::default());
        let weak = Arc::downgrade(&heard) as Weak<dyn Listener>;
        (heard, weak)
    }

    fn no_release() -> BoxFuture<'static, ()> {
        async {}.boxed()
    }

    #[tokio::test]
    async fn feeds_of_a_session_share_one_refresh_and_one_release() {
        let (follows, calls) = (Marks::default(), Arc::new(AtomicUsize::new(0)));
        let (one, l1) = listener();
        let (two, l2) = listener();
        let (id1, first) = follows.join("s", l1, call(&calls, true));
        let (id2, second) = follows.join("s", l2, call(&calls, true));
        // The second feed drives the call alone: the first is never polled.
        second.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one call for both");
        assert_eq!(follows.refreshed(), vec!["s".to_owned()]);
        follows.resync("s");
        assert_eq!(one.0.load(Ordering::SeqCst), 1);
        assert_eq!(two.0.load(Ordering::SeqCst), 1);
        assert!(
            follows.leave("s", id1, no_release).is_none(),
            "a feed still follows"
        );
        drop(first);
        let release = follows
            .leave("s", id2, no_release)
            .expect("the last one releases");
        release.clone().await;
        follows.released("s", &release);
        assert!(follows.refreshed().is_empty());
        assert!(
            follows.leave("s", id2, no_release).is_none(),
            "nothing left to leave"
        );
        // A new feed starts over.
        let (_, l3) = listener();
        follows.join("s", l3, call(&calls, true)).1.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_refresh_that_failed_is_not_released_and_is_tried_again() {
        let (follows, calls) = (Marks::default(), Arc::new(AtomicUsize::new(0)));
        let (_a, l1) = listener();
        let (id1, failed) = follows.join("s", l1, call(&calls, false));
        assert!(failed.await.is_err());
        assert!(follows.refreshed().is_empty(), "nothing to keep fresh");
        // A feed joining after the failure makes a new call.
        let (_b, l2) = listener();
        let (id2, again) = follows.join("s", l2, call(&calls, true));
        again.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(follows.leave("s", id1, no_release).is_none());
        assert!(follows.leave("s", id2, no_release).is_some());
        // A feed that leaves before the call ran leaves nothing to release.
        let (_c, l3) = listener();
        let (id3, _never_polled) = follows.join("t", l3, call(&calls, true));
        assert!(follows.leave("t", id3, no_release).is_none());
    }

    /// A feed joining while its session's release is in flight refreshes
    /// only once the release is done.
    #[tokio::test]
    async fn a_refresh_waits_for_the_release_in_flight() {
        let follows = Arc::new(Marks::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let (_a, l1) = listener();
        let (id, first) = follows.join("s", l1, || async { Ok(()) }.boxed());
        first.await.unwrap();
        let (gate, opened) = tokio::sync::oneshot::channel::<()>();
        let log = order.clone();
        let release = follows
            .leave("s", id, move || {
                async move {
                    let _ = opened.await;
                    log.lock().unwrap().push("release");
                }
                .boxed()
            })
            .expect("the last feed releases");
        let log = order.clone();
        let (_b, l2) = listener();
        let (_, refresh) = follows.join("s", l2, move || {
            async move {
                log.lock().unwrap().push("refresh");
                Ok(())
            }
            .boxed()
        });
        let refresh = tokio::spawn(refresh);
        let release = tokio::spawn(release);
        tokio::task::yield_now().await;
        assert!(order.lock().unwrap().is_empty(), "the refresh waits");
        gate.send(()).unwrap();
        release.await.unwrap();
        refresh.await.unwrap().unwrap();
        assert_eq!(*order.lock().unwrap(), ["release", "refresh"]);
    }
}
