//! [`PollingSubscriber`]: live feeds and presence where the REST endpoint
//! offers no subscriptions.
//!
//! Every poll interval, one task sends **one** `/pipeline` request holding
//! a cheap probe per subscribed channel (the newest log entry of a session,
//! the presence hash of a namespace). A channel whose probe answer changed
//! hears `resync`, so its feeds re-read (ST2) and its presence
//! subscriptions diff (P4): the cost is one request per interval per store,
//! whatever the number of feeds and sessions, plus one read per feed whose
//! session actually changed. Delivery takes up to one interval plus the
//! probe and the read round trips.
//!
//! While nothing changes the interval doubles after each quiet poll, up to
//! the idle interval (four times the base by default): an idle store costs
//! a request every two seconds, not two a second, and the first change
//! after a quiet spell is seen within the idle interval. Any change, a
//! write of this instance or a new subscription brings the base interval
//! back at once.
//!
//! A failed poll ends every subscription with `StoreUnavailable`, as a lost
//! connection does on RESP (ST5).

use std::sync::{Arc, Weak};
use std::time::Duration;

use a2_core::Error;
use futures::future::BoxFuture;
use redis::{Cmd, Value};
use tokio::sync::{mpsc, oneshot};

use super::channels::{Added, Channels};
use crate::subscriber::{Listener, Subscriber, Subscription};
use crate::transport::Transport;

/// The command whose answer changes whenever something is published on a
/// channel, or `None` for a channel that cannot be polled.
pub(crate) type Probe = Arc<dyn Fn(&str) -> Option<Cmd> + Send + Sync>;

/// A channel's last probe answer (`None` before the first poll).
#[derive(Default)]
struct Seen(Option<Value>);

struct Shared {
    channels: Channels<Seen>,
}

type Waiter = oneshot::Sender<Result<(), Error>>;

/// The [`Subscriber`] that polls (see the module docs).
pub struct PollingSubscriber {
    shared: Arc<Shared>,
    polls: mpsc::UnboundedSender<Waiter>,
    /// Brings the poll interval back to its base (see the module docs).
    busy: Arc<tokio::sync::Notify>,
}

/// How often the subscriber polls: `base` while things change, backing off
/// to `idle` while they do not.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    pub base: Duration,
    pub idle: Duration,
}

impl PollingSubscriber {
    pub(crate) fn start(transport: Arc<dyn Transport>, probe: Probe, pace: Pace) -> Self {
        let shared = Arc::new(Shared {
            channels: Channels::default(),
        });
        let (polls, requests) = mpsc::unbounded_channel();
        let busy = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(run(
            transport,
            probe,
            pace,
            busy.clone(),
            Arc::downgrade(&shared),
            requests,
        ));
        Self {
            shared,
            polls,
            busy,
        }
    }
}

impl Subscriber for PollingSubscriber {
    fn pushes(&self) -> bool {
        false
    }

    fn subscribe(&self, channel: &str, listener: Arc<dyn Listener>) -> Subscription {
        let id = match self
            .shared
            .channels
            .add(channel, listener.clone(), Seen::default)
        {
            Ok(Added::First(id) | Added::Joined(id)) => id,
            Err(error) => {
                listener.fail(error);
                return Subscription::new(|| {});
            }
        };
        // A new subscription is activity: poll at the base pace.
        self.busy.notify_one();
        let shared = Arc::downgrade(&self.shared);
        let channel = channel.to_owned();
        Subscription::new(move || {
            if let Some(shared) = shared.upgrade() {
                shared.channels.remove(&channel, id);
            }
        })
    }

    /// Polls at once; resolves when that poll is done, so every channel
    /// subscribed before has a first probe answer to compare later ones
    /// with.
    fn sync(&self) -> BoxFuture<'static, Result<(), Error>> {
        let (done, answer) = oneshot::channel();
        let sent = self.polls.send(done).is_ok() && !self.shared.channels.is_closed();
        Box::pin(async move {
            if !sent {
                return Err(Error::closed("the subscriber is closed"));
            }
            answer
                .await
                .unwrap_or_else(|_| Err(Error::closed("the subscriber is closed")))
        })
    }

    fn close(&self, error: Error) {
        self.shared.channels.close(&error);
    }

    /// The probes read the log and the presence hash, not wake-ups.
    fn hears_publishes(&self) -> bool {
        false
    }

    fn polling_channels(&self) -> usize {
        self.shared.channels.each(|_, _| Some(())).len()
    }

    /// The channel's feeds read now instead of at the next poll, and the
    /// polls go back to their base pace (a write is activity).
    fn wrote(&self, channel: &str) {
        self.busy.notify_one();
        for listener in self.shared.channels.listeners(channel) {
            listener.resync();
        }
    }
}

async fn run(
    transport: Arc<dyn Transport>,
    probe: Probe,
    pace: Pace,
    busy: Arc<tokio::sync::Notify>,
    shared: Weak<Shared>,
    mut requests: mpsc::UnboundedReceiver<Waiter>,
) {
    let mut waiting: Vec<Waiter> = Vec::new();
    let mut interval = pace.base;
    let mut next = tokio::time::Instant::now() + interval;
    loop {
        tokio::select! {
            request = requests.recv() => match request {
                Some(done) => waiting.push(done),
                None => return,
            },
            () = busy.notified() => {
                // Back to the base pace, from the last poll on.
                let sooner = next - interval + pace.base;
                interval = pace.base;
                if sooner < next {
                    next = sooner;
                }
                continue;
            }
            () = tokio::time::sleep_until(next) => {}
        }
        while let Ok(done) = requests.try_recv() {
            waiting.push(done);
        }
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let result = poll(&*transport, &probe, &strong).await;
        drop(strong);
        interval = match result {
            Ok(true) => pace.base,
            // Quiet: poll less often, down to the idle pace.
            Ok(false) => (interval * 2).min(pace.idle).max(pace.base),
            Err(_) => pace.base,
        };
        next = tokio::time::Instant::now() + interval;
        for done in waiting.drain(..) {
            let _ = done.send(result.clone().map(drop));
        }
    }
}

/// One poll: one pipeline of every channel's probe; `resync` for each
/// channel whose answer is new. True when one was.
async fn poll(transport: &dyn Transport, probe: &Probe, shared: &Shared) -> Result<bool, Error> {
    let probes: Vec<(String, Cmd)> = shared
        .channels
        .each(|name, _| probe(name).map(|cmd| (name.to_owned(), cmd)));
    if probes.is_empty() {
        return Ok(false);
    }
    let (names, cmds): (Vec<String>, Vec<Cmd>) = probes.into_iter().unzip();
    let replies = match transport.pipeline(cmds).await {
        Ok(replies) => replies,
        Err(error) => {
            shared.channels.fail_all(&error);
            return Err(error);
        }
    };
    let mut any = false;
    for (name, reply) in names.iter().zip(replies) {
        let changed = shared.channels.with(name, |seen| {
            let changed = seen.0.as_ref() != Some(&reply);
            seen.0 = Some(reply);
            changed
        });
        if changed == Some(true) {
            any = true;
            for listener in shared.channels.listeners(name) {
                listener.resync();
            }
        }
    }
    Ok(any)
}
