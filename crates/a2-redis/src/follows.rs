//! This store instance's share of each session's `followers` count (ST2):
//! the first live feed of a session counts the instance in
//! (`lua/follow.lua`) and the last one to end counts it out, so a thousand
//! feeds of one session in one process cost two script calls, not two
//! thousand, and the count is the number of instances following.

use std::collections::HashMap;
use std::sync::Mutex;

use a2_core::Result;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

/// Counting the instance in: one call, awaited by every feed that joins
/// before it is done. Each of them drives it, so it does not wait for any
/// one feed's consumer to poll.
pub(crate) type CountIn = Shared<BoxFuture<'static, Result<()>>>;

/// The sessions this instance's feeds follow.
#[derive(Default)]
pub(crate) struct Follows {
    // A std mutex: held for one map operation, never across an `.await`.
    sessions: Mutex<HashMap<String, Session>>,
}

struct Session {
    /// Feeds of this instance that joined and have not left.
    feeds: usize,
    count_in: CountIn,
}

impl Follows {
    /// A feed of `session` joins; returns the call that counts the
    /// instance in, which the feed awaits before its first read. `count_in`
    /// makes that call when the session has none, or when the last one
    /// failed.
    pub(crate) fn join(
        &self,
        session: &str,
        count_in: impl FnOnce() -> BoxFuture<'static, Result<()>>,
    ) -> CountIn {
        let mut make = Some(count_in);
        let mut sessions = self.lock();
        let entry = sessions
            .entry(session.to_owned())
            .or_insert_with(|| Session {
                feeds: 0,
                count_in: (make.take().expect("not used yet"))().shared(),
            });
        if matches!(entry.count_in.peek(), Some(Err(_)))
            && let Some(make) = make.take()
        {
            entry.count_in = make().shared();
        }
        entry.feeds += 1;
        entry.count_in.clone()
    }

    /// A feed of `session` that joined leaves. True when it was the last
    /// one and the instance had been counted in: the caller counts it out.
    pub(crate) fn leave(&self, session: &str) -> bool {
        let mut sessions = self.lock();
        let Some(entry) = sessions.get_mut(session) else {
            return false;
        };
        entry.feeds = entry.feeds.saturating_sub(1);
        if entry.feeds > 0 {
            return false;
        }
        sessions
            .remove(session)
            .is_some_and(|entry| matches!(entry.count_in.peek(), Some(Ok(()))))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // Every critical section leaves the map whole.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use a2_core::Error;

    use super::*;

    /// A `count_in` that counts its calls and succeeds or fails.
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

    #[tokio::test]
    async fn feeds_of_a_session_share_one_count() {
        let (follows, calls) = (Follows::default(), Arc::new(AtomicUsize::new(0)));
        let first = follows.join("s", call(&calls, true));
        let second = follows.join("s", call(&calls, true));
        // The second feed drives the call alone: the first is never polled.
        second.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one call for both");
        assert!(!follows.leave("s"), "a feed still follows");
        drop(first);
        assert!(follows.leave("s"), "the last one counts the instance out");
        assert!(!follows.leave("s"), "nothing left to leave");
        // A new feed starts over.
        follows.join("s", call(&calls, true)).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_count_that_never_landed_is_not_taken_off_and_is_tried_again() {
        let (follows, calls) = (Follows::default(), Arc::new(AtomicUsize::new(0)));
        let failed = follows.join("s", call(&calls, false));
        assert!(failed.await.is_err());
        // A feed joining after the failure makes a new call.
        follows.join("s", call(&calls, true)).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(!follows.leave("s"));
        assert!(
            follows.leave("s"),
            "the second call counted the instance in"
        );
        // A feed that leaves before the call ran leaves nothing to take off.
        let _never_polled = follows.join("t", call(&calls, true));
        assert!(!follows.leave("t"));
    }
}
