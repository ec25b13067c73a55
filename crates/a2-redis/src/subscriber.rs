//! Channel subscriptions shared by every feed of a store (ST3).
//!
//! Feeds only see the [`Subscriber`] seam: subscribe a [`Listener`] to a
//! channel, get a [`Subscription`] that unsubscribes when dropped. The
//! listener hears messages, a *resync* whenever messages may have been lost
//! (a subscription took effect, or the connection came back), and a final
//! failure. [`RespSubscriber`] implements the seam with one RESP3
//! connection per store whose pushes carry every channel's messages.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use a2_core::Error;
use redis::{AsyncConnectionConfig, PushKind, Value};
use tokio::sync::{Notify, mpsc};
use tracing::{debug, warn};

/// What a subscriber tells one subscription.
pub trait Listener: Send + Sync + 'static {
    /// A message published on the channel.
    fn message(&self, payload: &[u8]);
    /// Messages may have been missed (the subscription just took effect,
    /// or the connection was re-established): re-read to be exact.
    fn resync(&self);
    /// The subscription is over for good (backend failure or close).
    fn fail(&self, error: Error);
}

/// Subscribes listeners to channels. Subscriptions to one channel are
/// reference-counted: the first subscribes the connection, dropping the
/// last unsubscribes it.
pub trait Subscriber: Send + Sync + 'static {
    /// Starts delivering `channel`'s messages to `listener` until the
    /// returned [`Subscription`] drops.
    fn subscribe(&self, channel: &str, listener: Arc<dyn Listener>) -> Subscription;

    /// Resolves once every channel subscribed so far is in effect on the
    /// server (or failed), so that a write issued afterwards is heard.
    fn settled(&self, channel: &str) -> futures::future::BoxFuture<'static, ()>;

    /// Ends every subscription with `error`; later ones fail at once.
    fn close(&self, error: Error);
}

/// Keeps a listener subscribed; dropping it unsubscribes.
pub struct Subscription {
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Subscription {
    /// A subscription that runs `release` when dropped.
    pub fn new(release: impl FnOnce() + Send + Sync + 'static) -> Self {
        Self {
            release: Some(Box::new(release)),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

#[derive(Default)]
struct Registry {
    /// channel → listener id → listener.
    channels: HashMap<String, HashMap<u64, Arc<dyn Listener>>>,
    /// Channels whose SUBSCRIBE has not been confirmed yet.
    unconfirmed: HashSet<String>,
    next_id: u64,
    closed: Option<Error>,
}

enum Command {
    Subscribe(String),
    Unsubscribe(String),
    Close,
}

struct Shared {
    // A std mutex: it is never held across an await, and listeners are
    // called outside of it.
    registry: Mutex<Registry>,
    /// Signalled whenever a channel's subscription is confirmed or fails.
    confirmed: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        // A panic while holding the lock cannot leave the registry
        // half-updated (every critical section is a few map operations),
        // so a poisoned lock is still usable.
        self.registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn listeners(&self, channel: &str) -> Vec<Arc<dyn Listener>> {
        self.lock()
            .channels
            .get(channel)
            .map(|l| l.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Ends every current subscription with `error`; they leave the
    /// registry so that the next connection does not resubscribe them.
    fn fail_all(&self, error: &Error) {
        let failed: Vec<Arc<dyn Listener>> = {
            let mut registry = self.lock();
            registry.unconfirmed.clear();
            registry
                .channels
                .drain()
                .flat_map(|(_, listeners)| listeners.into_values())
                .collect()
        };
        self.confirmed.notify_waiters();
        for listener in failed {
            listener.fail(error.clone());
        }
    }
}

/// The RESP3 implementation of [`Subscriber`]: one connection, driven by
/// one task, carries every subscription of a store.
pub struct RespSubscriber {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
}

/// How to open the subscriber connection.
#[derive(Clone)]
pub struct SubscriberConfig {
    /// A client speaking RESP3.
    pub client: redis::Client,
    /// Bound on connecting.
    pub connect_timeout: Duration,
    /// Bound on SUBSCRIBE and UNSUBSCRIBE replies.
    pub command_timeout: Duration,
}

impl RespSubscriber {
    /// Starts the connection task (it connects on the first subscription).
    pub fn start(config: SubscriberConfig) -> Self {
        let shared = Arc::new(Shared {
            registry: Mutex::new(Registry::default()),
            confirmed: Notify::new(),
        });
        let (commands, receiver) = mpsc::unbounded_channel();
        tokio::spawn(drive(config, Arc::downgrade(&shared), receiver));
        Self { shared, commands }
    }
}

impl Subscriber for RespSubscriber {
    fn subscribe(&self, channel: &str, listener: Arc<dyn Listener>) -> Subscription {
        let mut registry = self.shared.lock();
        if let Some(error) = registry.closed.clone() {
            drop(registry);
            listener.fail(error);
            return Subscription::new(|| {});
        }
        let id = registry.next_id;
        registry.next_id += 1;
        let listeners = registry.channels.entry(channel.to_owned()).or_default();
        let first = listeners.is_empty();
        listeners.insert(id, listener);
        if first {
            registry.unconfirmed.insert(channel.to_owned());
            let _ = self.commands.send(Command::Subscribe(channel.to_owned()));
        }
        drop(registry);
        let shared = Arc::downgrade(&self.shared);
        let commands = self.commands.clone();
        let channel = channel.to_owned();
        Subscription::new(move || {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let mut registry = shared.lock();
            let Some(listeners) = registry.channels.get_mut(&channel) else {
                return;
            };
            listeners.remove(&id);
            if listeners.is_empty() {
                registry.channels.remove(&channel);
                registry.unconfirmed.remove(&channel);
                let _ = commands.send(Command::Unsubscribe(channel));
            }
        })
    }

    fn settled(&self, channel: &str) -> futures::future::BoxFuture<'static, ()> {
        let shared = self.shared.clone();
        let channel = channel.to_owned();
        Box::pin(async move {
            loop {
                let notified = shared.confirmed.notified();
                if !shared.lock().unconfirmed.contains(&channel) {
                    return;
                }
                notified.await;
            }
        })
    }

    fn close(&self, error: Error) {
        self.shared.lock().closed = Some(error.clone());
        self.shared.fail_all(&error);
        let _ = self.commands.send(Command::Close);
    }
}

impl Drop for RespSubscriber {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Close);
    }
}

type Pushes = mpsc::UnboundedReceiver<redis::PushInfo>;

async fn connect(
    config: &SubscriberConfig,
) -> Result<(redis::aio::MultiplexedConnection, Pushes), Error> {
    let (sender, pushes) = mpsc::unbounded_channel();
    let connection_config = AsyncConnectionConfig::new()
        .set_push_sender(sender)
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.command_timeout));
    let connecting = config
        .client
        .get_multiplexed_async_connection_with_config(&connection_config);
    match tokio::time::timeout(config.connect_timeout, connecting).await {
        Ok(Ok(connection)) => Ok((connection, pushes)),
        Ok(Err(e)) => Err(Error::unavailable_from(
            "the subscriber connection failed",
            e,
        )),
        Err(_) => Err(Error::unavailable(
            "timed out opening the subscriber connection",
        )),
    }
}

/// The connection task: (re)connects while anything is subscribed,
/// (un)subscribes on request, and routes pushed messages to listeners.
async fn drive(
    config: SubscriberConfig,
    shared: Weak<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut connection: Option<(redis::aio::MultiplexedConnection, Pushes)> = None;
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        if connection.is_none() {
            let wanted: Vec<String> = strong.lock().channels.keys().cloned().collect();
            if !wanted.is_empty() {
                match connect(&config).await {
                    Ok((mut conn, pushes)) => {
                        let subscribed = subscribe(&config, &mut conn, &wanted).await;
                        match subscribed {
                            Ok(()) => {
                                debug!(channels = wanted.len(), "subscriber connected");
                                confirm(&strong, &wanted);
                                connection = Some((conn, pushes));
                            }
                            Err(e) => {
                                warn!(error = %e, "subscriber could not subscribe");
                                strong.fail_all(&e);
                            }
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "subscriber connection failed");
                        strong.fail_all(&e);
                        drop(strong);
                        // Do not spin while the server is away: wait a
                        // little, or for a command.
                        tokio::select! {
                            command = commands.recv() => match command {
                                None | Some(Command::Close) => return,
                                Some(_) => {}
                            },
                            () = tokio::time::sleep(Duration::from_millis(250)) => {}
                        }
                        continue;
                    }
                }
            }
        }
        drop(strong);
        let event = match connection.as_mut() {
            Some((_, pushes)) => tokio::select! {
                command = commands.recv() => Event::Command(command),
                push = pushes.recv() => Event::Push(push),
            },
            None => Event::Command(commands.recv().await),
        };
        let Some(strong) = shared.upgrade() else {
            return;
        };
        match event {
            Event::Command(None | Some(Command::Close)) => return,
            Event::Command(Some(Command::Subscribe(channel))) => {
                let Some((conn, _)) = connection.as_mut() else {
                    // Connecting subscribes every wanted channel.
                    continue;
                };
                if !strong.lock().channels.contains_key(&channel) {
                    continue;
                }
                match subscribe(&config, conn, std::slice::from_ref(&channel)).await {
                    Ok(()) => confirm(&strong, std::slice::from_ref(&channel)),
                    Err(e) => {
                        warn!(error = %e, "SUBSCRIBE failed; reconnecting");
                        connection = None;
                    }
                }
            }
            Event::Command(Some(Command::Unsubscribe(channel))) => {
                let Some((conn, _)) = connection.as_mut() else {
                    continue;
                };
                if strong.lock().channels.contains_key(&channel) {
                    continue;
                }
                let unsubscribing = conn.unsubscribe(&channel);
                if !matches!(
                    tokio::time::timeout(config.command_timeout, unsubscribing).await,
                    Ok(Ok(()))
                ) {
                    connection = None;
                }
            }
            Event::Push(Some(push)) => match push.kind {
                PushKind::Message => deliver(&strong, push.data),
                PushKind::Disconnection => {
                    debug!("subscriber disconnected; reconnecting");
                    connection = None;
                }
                _ => {}
            },
            Event::Push(None) => connection = None,
        }
    }
}

enum Event {
    Command(Option<Command>),
    Push(Option<redis::PushInfo>),
}

async fn subscribe(
    config: &SubscriberConfig,
    conn: &mut redis::aio::MultiplexedConnection,
    channels: &[String],
) -> Result<(), Error> {
    match tokio::time::timeout(config.command_timeout, conn.subscribe(channels)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::unavailable_from("SUBSCRIBE failed", e)),
        Err(_) => Err(Error::unavailable("SUBSCRIBE timed out")),
    }
}

/// The subscriptions to `channels` are in effect: their listeners re-read,
/// since anything published before may have been missed.
fn confirm(shared: &Shared, channels: &[String]) {
    let listeners: Vec<Arc<dyn Listener>> = {
        let mut registry = shared.lock();
        for channel in channels {
            registry.unconfirmed.remove(channel);
        }
        channels
            .iter()
            .filter_map(|c| registry.channels.get(c))
            .flat_map(|l| l.values().cloned())
            .collect()
    };
    shared.confirmed.notify_waiters();
    for listener in listeners {
        listener.resync();
    }
}

fn deliver(shared: &Shared, data: Vec<Value>) {
    let mut data = data.into_iter();
    let (Some(channel), Some(payload)) = (data.next(), data.next()) else {
        return;
    };
    let (Ok(Some(channel)), Ok(Some(payload))) = (
        crate::codec::opt_string(channel),
        crate::codec::opt_bytes(payload),
    ) else {
        return;
    };
    for listener in shared.listeners(&channel) {
        listener.message(&payload);
    }
}
