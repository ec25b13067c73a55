//! [`AdaptiveSubscriber`]: event streams while they work, polling while
//! they do not, for [`LiveMode::Auto`](super::LiveMode::Auto) on an
//! endpoint that offers subscriptions.
//!
//! Each subscription goes to the [`SseSubscriber`] through a relay. When
//! its channel's event stream fails for good (the provider stops serving
//! `/subscribe`, refuses more connections, a proxy kills streams), the
//! relay does not end the feed: it subscribes the same listener to the
//! [`PollingSubscriber`] (one request per poll interval for every channel
//! that fell back), makes it read once, and tries the event stream again
//! after a while (twice the poll interval, doubling up to a minute). Once
//! the stream is confirmed again the polling subscription is dropped: the
//! feed is push-driven again. Only a failure of polling itself (the
//! endpoint is gone) ends the feed with `StoreUnavailable` (ST5).
//!
//! [`AdaptiveSubscriber::fallen_back`] counts the channels polling right
//! now, for tests and metrics.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use a2_core::Error;
use futures::future::BoxFuture;

use super::polling::PollingSubscriber;
use super::sse::SseSubscriber;
use crate::subscriber::{Listener, Subscriber, Subscription};

/// The longest wait before trying an event stream again.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// See the module docs.
pub struct AdaptiveSubscriber {
    shared: Arc<Shared>,
}

struct Shared {
    sse: SseSubscriber,
    polling: PollingSubscriber,
    first_retry: Duration,
    fallen_back: AtomicUsize,
}

impl AdaptiveSubscriber {
    pub(crate) fn new(sse: SseSubscriber, polling: PollingSubscriber, poll: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                sse,
                polling,
                first_retry: (poll * 2).min(MAX_RETRY),
                fallen_back: AtomicUsize::new(0),
            }),
        }
    }

    /// How many subscriptions poll right now because their event stream
    /// failed.
    pub fn fallen_back(&self) -> usize {
        self.shared.fallen_back.load(Ordering::SeqCst)
    }
}

/// Where one subscription gets its news from.
#[derive(Default)]
struct Route {
    /// The event stream's subscription, while it is wanted.
    sse: Option<Subscription>,
    /// The polling subscription, while the stream is down.
    polling: Option<Subscription>,
    /// How long to wait before the next try of the stream.
    retry: Duration,
    /// The subscription was dropped.
    ended: bool,
}

/// Stands between the event stream and the subscription's listener.
struct Relay {
    /// Itself, for the retry a failure schedules (a listener is called
    /// through `&self`).
    me: Weak<Relay>,
    channel: String,
    listener: Arc<dyn Listener>,
    shared: Weak<Shared>,
    route: Mutex<Route>,
}

impl Relay {
    fn lock(&self) -> std::sync::MutexGuard<'_, Route> {
        // Every critical section leaves the route whole.
        self.route.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// (Re)subscribes the event stream.
    fn connect(self: &Arc<Self>, shared: &Shared) {
        let subscription = shared
            .sse
            .subscribe(&self.channel, self.clone() as Arc<dyn Listener>);
        let mut route = self.lock();
        if route.ended {
            return;
        }
        route.sse = Some(subscription);
    }

    /// Tries the event stream again after `wait`.
    fn retry_later(self: &Arc<Self>, wait: Duration) {
        let relay = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let Some(relay) = relay.upgrade() else {
                return;
            };
            let Some(shared) = relay.shared.upgrade() else {
                return;
            };
            if relay.lock().ended {
                return;
            }
            relay.connect(&shared);
        });
    }
}

impl Listener for Relay {
    fn message(&self, payload: &[u8]) {
        self.listener.message(payload);
    }

    /// The event stream is (again) in effect: polling is no longer needed.
    fn resync(&self) {
        let polling = {
            let mut route = self.lock();
            route.retry = Duration::ZERO;
            route.polling.take()
        };
        if polling.is_some()
            && let Some(shared) = self.shared.upgrade()
        {
            shared.fallen_back.fetch_sub(1, Ordering::SeqCst);
            tracing::info!(
                channel = self.channel,
                "the event stream is back; polling stops"
            );
        }
        drop(polling);
        self.listener.resync();
    }

    /// The event stream failed for good: poll until it can be tried again.
    fn fail(&self, error: Error) {
        let Some(shared) = self.shared.upgrade() else {
            self.listener.fail(error);
            return;
        };
        if matches!(error, Error::StoreClosed { .. }) {
            self.listener.fail(error);
            return;
        }
        let (first, wait) = {
            let mut route = self.lock();
            if route.ended {
                return;
            }
            route.sse = None;
            route.retry = if route.retry.is_zero() {
                shared.first_retry
            } else {
                (route.retry * 2).min(MAX_RETRY)
            };
            (route.polling.is_none(), route.retry)
        };
        if first {
            tracing::warn!(channel = self.channel, %error, "the event stream failed; polling until it is back");
            let polling = shared
                .polling
                .subscribe(&self.channel, self.listener.clone());
            let mut route = self.lock();
            if route.ended {
                return;
            }
            route.polling = Some(polling);
            drop(route);
            shared.fallen_back.fetch_add(1, Ordering::SeqCst);
            // What the stream would have said meanwhile, the feed reads.
            self.listener.resync();
        }
        if let Some(relay) = self.me.upgrade() {
            relay.retry_later(wait);
        }
    }
}

impl Subscriber for AdaptiveSubscriber {
    fn subscribe(&self, channel: &str, listener: Arc<dyn Listener>) -> Subscription {
        let relay = Arc::new_cyclic(|me| Relay {
            me: me.clone(),
            channel: channel.to_owned(),
            listener,
            shared: Arc::downgrade(&self.shared),
            route: Mutex::new(Route::default()),
        });
        relay.connect(&self.shared);
        let shared = Arc::downgrade(&self.shared);
        Subscription::new(move || {
            let (sse, polling) = {
                let mut route = relay.lock();
                route.ended = true;
                (route.sse.take(), route.polling.take())
            };
            if polling.is_some()
                && let Some(shared) = shared.upgrade()
            {
                shared.fallen_back.fetch_sub(1, Ordering::SeqCst);
            }
            drop((sse, polling));
        })
    }

    /// The event streams' sync, and a poll only while some subscription
    /// polls (a poll is a request: the keeper syncs every period).
    fn sync(&self) -> BoxFuture<'static, Result<(), Error>> {
        let sse = self.shared.sse.sync();
        let polling = (self.fallen_back() > 0).then(|| self.shared.polling.sync());
        Box::pin(async move {
            sse.await?;
            match polling {
                Some(polling) => polling.await,
                None => Ok(()),
            }
        })
    }

    fn close(&self, error: Error) {
        self.shared.sse.close(error.clone());
        self.shared.polling.close(error);
    }

    fn wrote(&self, channel: &str) {
        self.shared.polling.wrote(channel);
    }

    fn polling_channels(&self) -> usize {
        self.fallen_back()
    }

    fn event_streams(&self) -> usize {
        self.shared.sse.event_streams()
    }
}
