//! [`ClusterSubscriber`]: the [`Subscriber`] seam over sharded pub/sub.
//!
//! On a cluster a session's channels are sharded channels (`SSUBSCRIBE`,
//! `SPUBLISH`, Redis ≥ 7) of its partition's slot, so a wake-up travels
//! from the session's master to the subscribers of that master only. One
//! RESP3 cluster connection carries every subscription of a store: the
//! `redis` crate keeps one connection per node under it, subscribes each
//! channel on its slot's master, and after a reconnect or a change of the
//! slot map subscribes every tracked channel again where it now lives.
//!
//! What it cannot see is a slot moving while nothing else happens: the old
//! master then drops its subscribers to the slot's channels with a
//! server-sent `SUNSUBSCRIBE`. This subscriber subscribes such a channel
//! again (the client follows the `MOVED` to the new master) while anyone
//! still listens. Every confirmation of a subscription (`SSUBSCRIBE`
//! answered, whether asked here or by the client after a reconnect) makes
//! the channel's listeners resync, since messages may have been missed
//! meanwhile: feeds re-read, presence subscriptions diff against a fresh
//! read. So moving slots cost latency, never delivery.
//!
//! [`Subscriber::sync`] pings every master after the earlier subscriptions
//! are confirmed. The client forwards pushes through a task of its own, so
//! a message published just before a sync may reach its listener just
//! after the sync returns; presence subscriptions (the one user of sync)
//! allow that a patch applied while they start is reported.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2_core::Error;
use futures::future::BoxFuture;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::subscriber::{
    Command, Handle, Listener, Registry, Shared, Subscriber, Subscription, answer, confirm, deliver,
};

/// How to open the subscriber's cluster connection.
#[derive(Clone)]
pub(crate) struct ClusterSubscriberConfig {
    /// Seed node URLs.
    pub(crate) seeds: Vec<String>,
    /// Bound on connecting.
    pub(crate) connect_timeout: Duration,
    /// Bound on SSUBSCRIBE, SUNSUBSCRIBE and PING replies.
    pub(crate) command_timeout: Duration,
}

/// Sharded pub/sub over one cluster connection (see the module docs).
pub(crate) struct ClusterSubscriber {
    handle: Handle,
}

impl ClusterSubscriber {
    /// Starts the connection task (it connects on the first subscription).
    pub(crate) fn start(config: ClusterSubscriberConfig) -> Self {
        let shared = Arc::new(Shared {
            registry: Mutex::new(Registry::default()),
        });
        let (commands, receiver) = mpsc::unbounded_channel();
        let task = Driver {
            config,
            shared: Arc::downgrade(&shared),
            resubscribe: commands.clone(),
            connection: None,
        };
        tokio::spawn(task.run(receiver));
        Self {
            handle: Handle { shared, commands },
        }
    }
}

impl Subscriber for ClusterSubscriber {
    fn subscribe(&self, channel: &str, listener: Arc<dyn Listener>) -> Subscription {
        self.handle.subscribe(channel, listener)
    }

    fn sync(&self) -> BoxFuture<'static, Result<(), Error>> {
        self.handle.sync()
    }

    fn close(&self, error: Error) {
        self.handle.close(error)
    }
}

type Pushes = mpsc::UnboundedReceiver<PushInfo>;

struct Driver {
    config: ClusterSubscriberConfig,
    shared: std::sync::Weak<Shared>,
    /// Commands to itself: subscribing again a channel a moved slot took.
    /// A weak sender would do as well; the task ends on `Close` or when
    /// the shared registry is gone.
    resubscribe: mpsc::UnboundedSender<Command>,
    connection: Option<(ClusterConnection, Pushes)>,
}

enum Event {
    Command(Option<Command>),
    Push(Option<PushInfo>),
}

impl Driver {
    async fn connect(&self) -> Result<(ClusterConnection, Pushes), Error> {
        let (sender, pushes) = mpsc::unbounded_channel();
        let client = super::client_builder(
            &self.config.seeds,
            self.config.command_timeout,
            self.config.connect_timeout,
        )
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(sender)
        .build()
        .map_err(|e| Error::unavailable_from("bad cluster seeds", e))?;
        match tokio::time::timeout(self.config.connect_timeout, client.get_async_connection()).await
        {
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

    /// Handles commands in order (a sync is answered after the `SSUBSCRIBE`
    /// of every subscription made before it) and routes pushes.
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        loop {
            let event = match self.connection.as_mut() {
                Some((_, pushes)) => tokio::select! {
                    command = commands.recv() => Event::Command(command),
                    push = pushes.recv() => Event::Push(push),
                },
                None => Event::Command(commands.recv().await),
            };
            let Some(shared) = self.shared.upgrade() else {
                return;
            };
            match event {
                Event::Command(None | Some(Command::Close)) => return,
                Event::Command(Some(Command::Subscribe(channel))) => {
                    if !shared.lock().channels.contains_key(&channel) {
                        continue;
                    }
                    self.subscribe(&shared, channel).await;
                }
                Event::Command(Some(Command::Unsubscribe(channel))) => {
                    let Some((connection, _)) = self.connection.as_mut() else {
                        continue;
                    };
                    if shared.lock().channels.contains_key(&channel) {
                        continue;
                    }
                    let leaving = connection.sunsubscribe(&channel);
                    if !matches!(
                        tokio::time::timeout(self.config.command_timeout, leaving).await,
                        Ok(Ok(()))
                    ) {
                        debug!(channel, "SUNSUBSCRIBE failed");
                    }
                }
                Event::Command(Some(Command::Sync(done))) => {
                    let mut waiting = vec![done];
                    if self.connection.is_some() && !self.ping(&shared).await {
                        // Nothing heard from some master: its listeners
                        // will hear `resync` when it is back, as after
                        // any lost connection.
                        debug!("a sync's PING failed");
                    }
                    answer(&mut waiting);
                }
                Event::Push(Some(push)) => self.route(&shared, push),
                Event::Push(None) => {
                    // The client is gone; the next subscription reconnects
                    // and subscribes every wanted channel.
                    self.connection = None;
                    let wanted: Vec<String> = shared.lock().channels.keys().cloned().collect();
                    for channel in wanted {
                        let _ = self.resubscribe.send(Command::Subscribe(channel));
                    }
                }
            }
        }
    }

    async fn subscribe(&mut self, shared: &Shared, channel: String) {
        if self.connection.is_none() {
            match self.connect().await {
                Ok(connection) => self.connection = Some(connection),
                Err(e) => {
                    warn!(error = %e, "subscriber connection failed");
                    shared.fail_all(&e);
                    return;
                }
            }
        }
        let Some((connection, _)) = self.connection.as_mut() else {
            return;
        };
        let joining = connection.ssubscribe(&channel);
        match tokio::time::timeout(self.config.command_timeout, joining).await {
            Ok(Ok(())) => confirm(shared, std::slice::from_ref(&channel)),
            outcome => {
                let error = match outcome {
                    Ok(Err(e)) => Error::unavailable_from("SSUBSCRIBE failed", e),
                    _ => Error::unavailable("SSUBSCRIBE timed out"),
                };
                warn!(error = %error, channel, "could not subscribe");
                let failed = shared.lock().channels.remove(&channel);
                for listener in failed.into_iter().flat_map(|l| l.into_values()) {
                    listener.fail(error.clone());
                }
            }
        }
    }

    /// PING every master, then route every push received so far; false
    /// when a master did not answer.
    async fn ping(&mut self, shared: &Shared) -> bool {
        let Some((connection, _)) = self.connection.as_mut() else {
            return false;
        };
        let routing = RoutingInfo::MultiNode((
            MultipleNodeRoutingInfo::AllMasters,
            Some(ResponsePolicy::AllSucceeded),
        ));
        let ping = connection.route_command(redis::cmd("PING"), routing);
        let pinged = matches!(
            tokio::time::timeout(self.config.command_timeout, ping).await,
            Ok(Ok(_))
        );
        if let Some((_, pushes)) = self.connection.as_mut() {
            while let Ok(push) = pushes.try_recv() {
                route_push(shared, &self.resubscribe, push);
            }
        }
        pinged
    }

    fn route(&mut self, shared: &Shared, push: PushInfo) {
        route_push(shared, &self.resubscribe, push);
    }
}

/// Routes one push: messages to their listeners, confirmations to a
/// resync, and a server-sent `SUNSUBSCRIBE` of a channel still listened
/// to (its slot moved) to a new `SSUBSCRIBE`.
fn route_push(shared: &Shared, resubscribe: &mpsc::UnboundedSender<Command>, push: PushInfo) {
    match push.kind {
        PushKind::SMessage | PushKind::Message => deliver(shared, push.data),
        PushKind::SSubscribe => {
            if let Some(channel) = channel_of(&push.data) {
                confirm(shared, &[channel]);
            }
        }
        PushKind::SUnsubscribe => {
            if let Some(channel) = channel_of(&push.data)
                && shared.lock().channels.contains_key(&channel)
            {
                debug!(channel, "the channel's slot moved; subscribing again");
                let _ = resubscribe.send(Command::Subscribe(channel));
            }
        }
        PushKind::Disconnection => {
            // The client reconnects and subscribes again by itself; its
            // confirmations make the listeners resync. Until then they
            // may miss messages: make them re-read now as well.
            let wanted: Vec<String> = shared.lock().channels.keys().cloned().collect();
            confirm(shared, &wanted);
        }
        _ => {}
    }
}

fn channel_of(data: &[Value]) -> Option<String> {
    data.first()
        .cloned()
        .and_then(|v| crate::codec::opt_string(v).ok().flatten())
}
