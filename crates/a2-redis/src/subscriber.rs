//! Channel subscriptions shared by every feed of a store (ST3).
//!
//! Feeds only see the [`Subscriber`] seam: subscribe a [`Listener`] to a
//! channel, get a [`Subscription`] that unsubscribes when dropped, and
//! [`sync`](Subscriber::sync) to wait until it is in effect. The listener
//! hears messages, a *resync* whenever messages may have been lost (a
//! subscription took effect, or the connection came back), and a final
//! failure. [`RespSubscriber`] implements the seam with one RESP3
//! connection per store whose pushes carry every channel's messages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use a2_core::Error;
use redis::{AsyncConnectionConfig, PushKind, Value};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};
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

    /// Whether messages are pushed as they are published; false for one
    /// that polls and hears only what it polls for (no work channels).
    fn pushes(&self) -> bool {
        true
    }

    /// A barrier: resolves once every subscription made before the call is
    /// in effect on the server, and every message the server published
    /// before this resolves has been handed to its listeners. A message
    /// published later reaches them too, unless the connection is lost
    /// (they then hear `resync`). Fails when the subscriber is gone; a
    /// subscription that failed meanwhile has heard `fail`.
    fn sync(&self) -> futures::future::BoxFuture<'static, Result<(), Error>>;

    /// Ends every subscription with `error`; later ones fail at once.
    fn close(&self, error: Error);

    /// How many channels this subscriber follows by polling right now.
    fn polling_channels(&self) -> usize {
        0
    }

    /// How many event-stream connections (REST) it holds right now: one
    /// per channel followed over server-sent events. 0 for the others.
    fn event_streams(&self) -> usize {
        0
    }

    /// This store instance appended to the session of `channel` (an append,
    /// or a completion that returned events). A
    /// subscriber that polls tells the channel's listeners at once, so the
    /// process's own feeds do not wait for the next poll; one that hears
    /// publishes does nothing (the write's wake-up is on its way).
    fn wrote(&self, channel: &str) {
        let _ = channel;
    }

    /// Whether listeners hear what scripts publish. A live feed has its
    /// store instance join its session's mark, so that the session's
    /// writes publish wake-ups (ST2), only on a subscriber that hears
    /// them; only then does the store run its keeper (`src/keeper.rs`).
    fn hears_publishes(&self) -> bool {
        true
    }
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
pub(crate) struct Registry {
    /// channel → listener id → listener.
    pub(crate) channels: HashMap<String, HashMap<u64, Arc<dyn Listener>>>,
    next_id: u64,
    pub(crate) closed: Option<Error>,
}

pub(crate) enum Command {
    Subscribe(String),
    Unsubscribe(String),
    /// Answer once every earlier command is done and every push received
    /// before the answer is routed.
    Sync(oneshot::Sender<()>),
    Close,
}

pub(crate) struct Shared {
    // A std mutex: it is never held across an await, and listeners are
    // called outside of it.
    pub(crate) registry: Mutex<Registry>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Registry> {
        // A panic while holding the lock cannot leave the registry
        // half-updated (every critical section is a few map operations),
        // so a poisoned lock is still usable.
        self.registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn listeners(&self, channel: &str) -> Vec<Arc<dyn Listener>> {
        self.lock()
            .channels
            .get(channel)
            .map(|l| l.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Ends every current subscription with `error`; they leave the
    /// registry so that the next connection does not resubscribe them.
    pub(crate) fn fail_all(&self, error: &Error) {
        let failed: Vec<Arc<dyn Listener>> = self
            .lock()
            .channels
            .drain()
            .flat_map(|(_, listeners)| listeners.into_values())
            .collect();
        for listener in failed {
            listener.fail(error.clone());
        }
    }
}

/// The RESP3 implementation of [`Subscriber`]: one connection, driven by
/// one task, carries every subscription of a store.
pub struct RespSubscriber {
    handle: Handle,
}

/// What a push subscriber's callers hold: the registry it shares with its
/// connection task, and the channel of commands to that task. The RESP3
/// and the cluster subscriber differ only in the task they start.
pub(crate) struct Handle {
    pub(crate) shared: Arc<Shared>,
    pub(crate) commands: mpsc::UnboundedSender<Command>,
}

impl Handle {
    pub(crate) fn subscribe(&self, channel: &str, listener: Arc<dyn Listener>) -> Subscription {
        register(&self.shared, &self.commands, channel, listener)
    }

    pub(crate) fn sync(&self) -> futures::future::BoxFuture<'static, Result<(), Error>> {
        let (done, answer) = oneshot::channel();
        let sent = self.commands.send(Command::Sync(done));
        Box::pin(async move {
            if sent.is_ok() && answer.await.is_ok() {
                return Ok(());
            }
            Err(Error::unavailable("the subscriber connection is closed"))
        })
    }

    pub(crate) fn close(&self, error: Error) {
        self.shared.lock().closed = Some(error.clone());
        self.shared.fail_all(&error);
        let _ = self.commands.send(Command::Close);
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Close);
    }
}

/// How to open the subscriber connection.
#[derive(Clone)]
pub struct SubscriberConfig {
    /// A client speaking RESP3.
    pub client: redis::Client,
    /// When set, asked for the client before each connection instead
    /// (Redis Sentinel: the current master's).
    pub resolve: Option<Resolve>,
    /// Bound on connecting.
    pub connect_timeout: Duration,
    /// Bound on SUBSCRIBE and UNSUBSCRIBE replies.
    pub command_timeout: Duration,
}

/// Finds the server to connect to (see [`SubscriberConfig::resolve`]).
pub type Resolve = Arc<
    dyn Fn() -> futures::future::BoxFuture<'static, Result<redis::Client, Error>> + Send + Sync,
>;

impl RespSubscriber {
    /// Starts the connection task (it connects on the first subscription).
    pub fn start(config: SubscriberConfig) -> Self {
        let shared = Arc::new(Shared {
            registry: Mutex::new(Registry::default()),
        });
        let (commands, receiver) = mpsc::unbounded_channel();
        tokio::spawn(drive(config, Arc::downgrade(&shared), receiver));
        Self {
            handle: Handle { shared, commands },
        }
    }
}

impl Subscriber for RespSubscriber {
    fn subscribe(&self, channel: &str, listener: Arc<dyn Listener>) -> Subscription {
        self.handle.subscribe(channel, listener)
    }

    fn sync(&self) -> futures::future::BoxFuture<'static, Result<(), Error>> {
        self.handle.sync()
    }

    fn close(&self, error: Error) {
        self.handle.close(error)
    }
}

/// Adds `listener` to `channel` in the registry, asking the connection
/// task to subscribe when it is the channel's first; the returned
/// subscription removes it, and unsubscribes after the last.
pub(crate) fn register(
    shared: &Arc<Shared>,
    commands: &mpsc::UnboundedSender<Command>,
    channel: &str,
    listener: Arc<dyn Listener>,
) -> Subscription {
    let mut registry = shared.lock();
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
        let _ = commands.send(Command::Subscribe(channel.to_owned()));
    }
    drop(registry);
    let shared = Arc::downgrade(shared);
    let commands = commands.clone();
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
            let _ = commands.send(Command::Unsubscribe(channel));
        }
    })
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
    let resolved = match &config.resolve {
        Some(resolve) => Some(resolve().await?),
        None => None,
    };
    let client = resolved.as_ref().unwrap_or(&config.client);
    let connecting = client.get_multiplexed_async_connection_with_config(&connection_config);
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

/// The subscriber's connection and the pushes it receives.
type Connection = (redis::aio::MultiplexedConnection, Pushes);

/// The connection task: (re)connects while anything is subscribed,
/// (un)subscribes on request, routes pushed messages to listeners, and
/// answers syncs. Commands are handled in order, so a sync is answered
/// after the `SUBSCRIBE` of every subscription made before it.
async fn drive(
    config: SubscriberConfig,
    shared: Weak<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut connection: Option<Connection> = None;
    // Syncs waiting for the connection to come back; dropped (the caller
    // sees an error, its listener `fail`) when it cannot.
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        if connection.is_none() {
            match connect_wanted(&config, &strong, &mut waiting).await {
                Ok(connected) => connection = connected,
                Err(()) => {
                    drop(strong);
                    if !back_off(&mut commands, &mut waiting).await {
                        return;
                    }
                    continue;
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
            Event::Command(Some(command)) => {
                on_command(&config, &strong, &mut connection, &mut waiting, command).await;
            }
            Event::Push(Some(push)) => {
                if !route(&strong, push) {
                    debug!("subscriber disconnected; reconnecting");
                    connection = None;
                }
            }
            Event::Push(None) => connection = None,
        }
    }
}

/// Connects and subscribes every channel the registry wants: `Ok(None)`
/// when it wants none (the waiting syncs are answered: nothing to wait
/// for) or the subscription failed (every listener is failed); `Err` when
/// the server cannot be reached (every listener is failed too).
async fn connect_wanted(
    config: &SubscriberConfig,
    strong: &Shared,
    waiting: &mut Vec<oneshot::Sender<()>>,
) -> Result<Option<Connection>, ()> {
    let wanted: Vec<String> = strong.lock().channels.keys().cloned().collect();
    if wanted.is_empty() {
        answer(waiting);
        return Ok(None);
    }
    let (mut conn, pushes) = match connect(config).await {
        Ok(connected) => connected,
        Err(e) => {
            warn!(error = %e, "subscriber connection failed");
            strong.fail_all(&e);
            waiting.clear();
            return Err(());
        }
    };
    match subscribe(config, &mut conn, &wanted).await {
        Ok(()) => {
            debug!(channels = wanted.len(), "subscriber connected");
            confirm(strong, &wanted);
            // A fresh connection has heard nothing before its SUBSCRIBE.
            answer(waiting);
            Ok(Some((conn, pushes)))
        }
        Err(e) => {
            warn!(error = %e, "subscriber could not subscribe");
            strong.fail_all(&e);
            waiting.clear();
            Ok(None)
        }
    }
}

/// Does not spin while the server is away: waits a little, or for a
/// command. False when the subscriber is closing.
async fn back_off(
    commands: &mut mpsc::UnboundedReceiver<Command>,
    waiting: &mut Vec<oneshot::Sender<()>>,
) -> bool {
    tokio::select! {
        command = commands.recv() => match command {
            None | Some(Command::Close) => return false,
            Some(Command::Sync(done)) => waiting.push(done),
            // The registry says what to subscribe.
            Some(_) => {}
        },
        () = tokio::time::sleep(Duration::from_millis(250)) => {}
    }
    true
}

/// Carries out `command` (not `Close`) on the connection, if there is one;
/// drops the connection when it fails, so the next turn reconnects.
async fn on_command(
    config: &SubscriberConfig,
    strong: &Shared,
    connection: &mut Option<Connection>,
    waiting: &mut Vec<oneshot::Sender<()>>,
    command: Command,
) {
    let Some((conn, pushes)) = connection.as_mut() else {
        // Connecting subscribes every wanted channel and answers syncs.
        if let Command::Sync(done) = command {
            waiting.push(done);
        }
        return;
    };
    match command {
        Command::Close => {}
        Command::Subscribe(channel) => {
            if !strong.lock().channels.contains_key(&channel) {
                return;
            }
            match subscribe(config, conn, std::slice::from_ref(&channel)).await {
                Ok(()) => confirm(strong, std::slice::from_ref(&channel)),
                Err(e) => {
                    warn!(error = %e, "SUBSCRIBE failed; reconnecting");
                    *connection = None;
                }
            }
        }
        Command::Unsubscribe(channel) => {
            if strong.lock().channels.contains_key(&channel) {
                return;
            }
            let unsubscribing = conn.unsubscribe(&channel);
            if !matches!(
                tokio::time::timeout(config.command_timeout, unsubscribing).await,
                Ok(Ok(()))
            ) {
                *connection = None;
            }
        }
        Command::Sync(done) => {
            // The server answers the PING after sending every message
            // published before it; the connection hands pushes over in the
            // order they arrived, so once the answer is in, all of those
            // are queued in `pushes`: route them before answering.
            let ping = redis::cmd("PING");
            let ping = ping.query_async::<Value>(conn);
            let pinged = matches!(
                tokio::time::timeout(config.command_timeout, ping).await,
                Ok(Ok(_))
            );
            if pinged && drain(strong, pushes) {
                let _ = done.send(());
            } else {
                debug!("subscriber lost its connection during a sync; reconnecting");
                waiting.push(done);
                *connection = None;
            }
        }
    }
}

/// Answers the syncs waiting for the connection.
pub(crate) fn answer(waiting: &mut Vec<oneshot::Sender<()>>) {
    for done in waiting.drain(..) {
        let _ = done.send(());
    }
}

/// Routes one push; false when it says the connection is gone.
fn route(shared: &Shared, push: redis::PushInfo) -> bool {
    match push.kind {
        PushKind::Message => {
            deliver(shared, push.data);
            true
        }
        PushKind::Disconnection => false,
        _ => true,
    }
}

/// Routes every push received so far; false when the connection is gone.
fn drain(shared: &Shared, pushes: &mut Pushes) -> bool {
    loop {
        match pushes.try_recv() {
            Ok(push) => {
                if !route(shared, push) {
                    return false;
                }
            }
            Err(TryRecvError::Empty) => return true,
            Err(TryRecvError::Disconnected) => return false,
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
pub(crate) fn confirm(shared: &Shared, channels: &[String]) {
    let listeners: Vec<Arc<dyn Listener>> = {
        let registry = shared.lock();
        channels
            .iter()
            .filter_map(|c| registry.channels.get(c))
            .flat_map(|l| l.values().cloned())
            .collect()
    };
    for listener in listeners {
        listener.resync();
    }
}

pub(crate) fn deliver(shared: &Shared, data: Vec<Value>) {
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
