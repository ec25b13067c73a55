//! The keeper: one task per store instance that keeps its entries in the
//! marks of the sessions its live feeds follow (ST2, `lua/follow.lua`).
//!
//! Every refresh period (`RedisOptions::follow_refresh`, default 2 s) it
//! refreshes the entries of every followed session in **one** pipeline:
//! one round trip over RESP, one HTTP request over REST, one call per
//! session sent concurrently on a cluster. Nothing is sent while no feed
//! follows anything. A session whose mark was not in force for this
//! instance (it lapsed while the keeper could not reach the server, or the
//! key or the session's hash was deleted: a flush, a restore, an expiry)
//! may have had writes that published nothing: its feeds read once, and
//! from then on wake-ups flow again. Each refresh also returns the
//! session's frontier, which the keeper hands to its feeds: one behind it
//! (a wake-up lost some other way, such as a sharded subscription left on
//! a master that failed over) reads, one caught up does nothing. This is
//! the batched safety read: one request per period for every session.
//!
//! A refresh that fails makes every followed session's feeds read: where
//! the server is out of reach they end with `StoreUnavailable` (ST5), as
//! they would on their own failed read. After the refresh the keeper
//! checks the push connection (`Subscriber::sync`: a `PING` on RESP,
//! nothing sent over REST), so a dead one reconnects and its feeds read.
//!
//! This refresh is the only periodic cost of an idle feed: a feed reads
//! when a wake-up calls for it, when its subscription (re)starts, and when
//! the keeper says its mark was lost, never on a timer while push delivery
//! is healthy (see `src/feed/mod.rs`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use a2_core::Result;

use crate::inner::Inner;
use crate::ops::follow::{self, Follow};

/// Starts the keeper of `inner`; it stops once the store is closed or
/// dropped.
pub(crate) fn spawn(inner: &Arc<Inner>) {
    let period = inner.follow_refresh;
    let weak = Arc::downgrade(inner);
    tokio::spawn(run(weak, period));
}

async fn run(inner: Weak<Inner>, period: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.is_closed() {
            return;
        }
        let sessions = inner.marks.refreshed();
        if sessions.is_empty() {
            continue;
        }
        match follow_all(&inner, &sessions, Follow::Refresh).await {
            Ok(replies) => {
                for (session, reply) in sessions.iter().zip(replies) {
                    match follow::decode_refresh(reply) {
                        Ok(refreshed) if refreshed.lost => {
                            tracing::debug!(
                                session,
                                "a followed session's mark was lost; its feeds read"
                            );
                            inner.marks.resync(session);
                        }
                        Ok(refreshed) => inner
                            .marks
                            .tell(session, &crate::feed::frontier_message(refreshed.frontier)),
                        Err(error) => {
                            tracing::warn!(%error, session, "a refresh's reply did not decode; its feeds read");
                            inner.marks.resync(session);
                        }
                    }
                }
            }
            Err(error) => {
                // The feeds read: where the server is still out of reach
                // they end with `StoreUnavailable` (ST5), as a feed's own
                // failed read ends it; where it answers again they go on.
                tracing::warn!(%error, sessions = sessions.len(), "could not refresh the marks of followed sessions");
                for session in &sessions {
                    inner.marks.resync(session);
                }
            }
        }
        // The push connection is checked too (a `PING` on RESP, nothing
        // sent over REST): one found dead reconnects and its feeds read.
        let _ = tokio::time::timeout(inner.subscribe_timeout, inner.subscriber.sync()).await;
    }
}

/// Refreshes or releases this instance's entries in the marks of
/// `sessions`, in one pipeline; one reply per session. A server that lacks
/// the script gets it loaded, then the pipeline goes again. Both are
/// harmless to replay (RD8).
pub(crate) async fn follow_all(
    inner: &Inner,
    sessions: &[String],
    mode: Follow,
) -> Result<Vec<redis::Value>> {
    inner.check_open()?;
    let args = follow::encode(mode, &inner.instance, inner.follow_ttl());
    let keys: Vec<_> = sessions.iter().map(|s| inner.session_keys(s)).collect();
    let calls: Vec<([&str; 2], &crate::args::Args)> = keys
        .iter()
        .map(|keys| ([keys.meta.as_str(), keys.followers.as_str()], &args))
        .collect();
    inner.script_pipeline(&crate::lua::FOLLOW, &calls).await
}

/// Releases every entry this instance holds, as the store closes: its
/// sessions' writes stop publishing at once rather than when the entries
/// lapse. A failure leaves them to lapse.
pub(crate) async fn release_all(inner: &Inner) {
    let sessions = inner.marks.refreshed();
    if sessions.is_empty() {
        return;
    }
    if let Err(error) = follow_all(inner, &sessions, Follow::Release).await {
        tracing::debug!(%error, "could not release the marks of followed sessions; they lapse");
    }
}
