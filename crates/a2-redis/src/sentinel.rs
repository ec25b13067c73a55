//! Redis Sentinel: `redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT…]/SERVICE[/DB]`.
//!
//! The listed addresses are Sentinels; `SERVICE` is the name they monitor
//! the master under; the password and database are the master's. The store
//! asks the Sentinels for the master (the `redis` crate's Sentinel client,
//! which also checks that the address it is given answers as a master)
//! and works on it with the usual RESP transport and subscriber. After a
//! failover the old master refuses writes (`READONLY`) or is gone: the first
//! call that fails makes the transport ask the Sentinels again and, when
//! the master moved, open a connection to the new one for the calls that
//! follow ([`SentinelTransport`]). The call that failed reports
//! `StoreUnavailable` (retry it: every write is idempotent or fenced); a
//! call whose replay is harmless (RD8) goes once more to the new master by
//! itself. The subscriber asks the Sentinels before each (re)connection,
//! and its reconnection makes every feed read (ST2).
//!
//! Replication to the replicas is asynchronous: a write acknowledged by a
//! master that fails before its replicas have it is lost, as with any
//! Redis deployment without `WAIT`.

use std::sync::Arc;
use std::time::Duration;

use a2_core::{Error, Result};
use async_trait::async_trait;
use futures::future::BoxFuture;
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{Cmd, RedisConnectionInfo, Script, Value};
use tokio::sync::Mutex as AsyncMutex;

use crate::args::Args;

use crate::transport::{FunctionCall, RespTransport, Transport};

/// The URL scheme.
pub const SCHEME: &str = "redis+sentinel://";

/// Whether `url` names Sentinels.
pub fn is_sentinel_url(url: &str) -> bool {
    url.starts_with(SCHEME)
}

/// A parsed `redis+sentinel://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    /// `redis://HOST:PORT` of each Sentinel.
    pub(crate) sentinels: Vec<String>,
    pub(crate) service: String,
    pub(crate) db: i64,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl SentinelUrl {
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "bad Sentinel URL {url:?}: {why}; use redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT…]/SERVICE[/DB]"
            ))
        };
        let rest = url
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("not redis+sentinel://"))?;
        let (authority, path) = rest.split_once('/').ok_or_else(|| bad("no service name"))?;
        let (credentials, hosts) = match authority.rsplit_once('@') {
            Some((credentials, hosts)) => (Some(credentials), hosts),
            None => (None, authority),
        };
        let (username, password) = match credentials {
            None => (None, None),
            Some(c) => match c.split_once(':') {
                Some((user, pass)) => (
                    Some(user.to_owned()).filter(|u| !u.is_empty()),
                    Some(pass.to_owned()),
                ),
                None => (Some(c.to_owned()), None),
            },
        };
        let sentinels: Vec<String> = hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(|h| format!("redis://{h}"))
            .collect();
        if sentinels.is_empty() {
            return Err(bad("no Sentinel address"));
        }
        let mut parts = path.split('/');
        let service = parts.next().unwrap_or("").to_owned();
        if service.is_empty() {
            return Err(bad("no service name"));
        }
        let db = match parts.next().filter(|d| !d.is_empty()) {
            Some(db) => db
                .parse()
                .map_err(|_| bad("the database is not a number"))?,
            None => 0,
        };
        if parts.next().is_some() {
            return Err(bad("too many path segments"));
        }
        Ok(Self {
            sentinels,
            service,
            db,
            username,
            password,
        })
    }
}

/// Asks the Sentinels where the master is.
pub(crate) struct Master {
    sentinel: AsyncMutex<Sentinel>,
    service: String,
    node: RedisConnectionInfo,
    connect_timeout: Duration,
}

impl Master {
    pub(crate) fn new(url: &SentinelUrl, connect_timeout: Duration) -> Result<Self> {
        let sentinel = Sentinel::build(url.sentinels.clone())
            .map_err(|e| Error::invalid(format!("bad Sentinel address: {e}")))?;
        let mut node = RedisConnectionInfo::default().set_db(url.db);
        if let Some(username) = &url.username {
            node = node.set_username(username);
        }
        if let Some(password) = &url.password {
            node = node.set_password(password);
        }
        Ok(Self {
            sentinel: AsyncMutex::new(sentinel),
            service: url.service.clone(),
            node,
            connect_timeout,
        })
    }

    /// A client of the current master, speaking RESP3 when `resp3`.
    pub(crate) async fn client(&self, resp3: bool) -> Result<redis::Client> {
        let mut node = self.node.clone();
        if resp3 {
            node = node.set_protocol(redis::ProtocolVersion::RESP3);
        }
        let info = SentinelNodeConnectionInfo::default().set_redis_connection_info(node);
        let mut sentinel = self.sentinel.lock().await;
        let asking = sentinel.async_master_for(&self.service, Some(&info));
        match tokio::time::timeout(self.connect_timeout, asking).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(Error::unavailable_from(
                format!("the Sentinels name no master for {:?}", self.service),
                e,
            )),
            Err(_) => Err(Error::unavailable(format!(
                "timed out asking the Sentinels for the master of {:?}",
                self.service
            ))),
        }
    }

    /// What the subscriber calls before each connection.
    pub(crate) fn resolver(
        self: &Arc<Self>,
    ) -> Arc<dyn Fn() -> BoxFuture<'static, Result<redis::Client>> + Send + Sync> {
        let master = self.clone();
        Arc::new(move || {
            let master = master.clone();
            Box::pin(async move { master.client(true).await })
        })
    }
}

/// How soon after asking the Sentinels a failed call may ask again.
const ASK_AGAIN_AFTER: Duration = Duration::from_millis(100);

/// The master's address, to tell whether it moved.
fn address(client: &redis::Client) -> String {
    client.get_connection_info().addr().to_string()
}

/// The connection to the current master, and which one it is.
struct Current {
    generation: u64,
    address: String,
    transport: Arc<RespTransport>,
}

/// [`Transport`] to whichever server the Sentinels name master (see the
/// module docs).
pub struct SentinelTransport {
    master: Arc<Master>,
    /// A std mutex: held to clone or swap, never across an await.
    current: std::sync::Mutex<Arc<Current>>,
    /// One caller at a time asks the Sentinels after a failure; when it
    /// last asked (a burst of failures asks once, not once per call).
    moving: AsyncMutex<Option<tokio::time::Instant>>,
    command_timeout: Duration,
    connect_timeout: Duration,
}

impl SentinelTransport {
    pub(crate) async fn connect(
        master: Arc<Master>,
        command_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self> {
        let client = master.client(false).await?;
        let address = address(&client);
        let transport = RespTransport::connect(client, command_timeout, connect_timeout).await?;
        tracing::info!(
            master = address,
            "connected to the master the Sentinels name"
        );
        Ok(Self {
            master,
            current: std::sync::Mutex::new(Arc::new(Current {
                generation: 0,
                address,
                transport: Arc::new(transport),
            })),
            moving: AsyncMutex::new(None),
            command_timeout,
            connect_timeout,
        })
    }

    fn current(&self) -> Arc<Current> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// After a call on `seen` failed: asks the Sentinels for the master
    /// (unless another caller did since) and, when it moved, connects to
    /// it. Returns whether the calls that follow go elsewhere.
    async fn follow_master(&self, seen: &Current) -> bool {
        let mut asked = self.moving.lock().await;
        if self.current().generation != seen.generation {
            return true;
        }
        // The calls that failed with this one need not ask again.
        if asked.is_some_and(|at| at.elapsed() < ASK_AGAIN_AFTER) {
            return false;
        }
        *asked = Some(tokio::time::Instant::now());
        let client = match self.master.client(false).await {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(%error, "could not ask the Sentinels for the master");
                return false;
            }
        };
        let address = address(&client);
        if address == seen.address {
            return false;
        }
        match RespTransport::connect(client, self.command_timeout, self.connect_timeout).await {
            Ok(transport) => {
                tracing::warn!(
                    from = seen.address,
                    to = address,
                    "the master moved; following it"
                );
                *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(Current {
                    generation: seen.generation + 1,
                    address,
                    transport: Arc::new(transport),
                });
                true
            }
            Err(error) => {
                tracing::warn!(%error, master = address, "could not connect to the new master");
                false
            }
        }
    }
}

/// Runs `$call` (with `$t`, the transport to the current master); after a
/// failure, follows the master and, when `$replayable` and it moved, runs it
/// once more there.
macro_rules! on_master {
    ($self:ident, $replayable:expr, |$t:ident| $call:expr) => {{
        let current = $self.current();
        let $t = &current.transport;
        match $call.await {
            Ok(value) => Ok(value),
            Err(error) => {
                let moved = $self.follow_master(&current).await;
                if moved && $replayable {
                    let current = $self.current();
                    let $t = &current.transport;
                    $call.await
                } else {
                    Err(error)
                }
            }
        }
    }};
}

#[async_trait]
impl Transport for SentinelTransport {
    async fn call(&self, cmd: Cmd) -> Result<Value> {
        on_master!(self, false, |t| t.call(cmd.clone()))
    }

    async fn script(&self, script: &Script, keys: &[&str], args: &Args) -> Result<Value> {
        on_master!(self, false, |t| t.script(script, keys, args))
    }

    async fn pipeline(&self, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        on_master!(self, false, |t| t.pipeline(cmds.clone()))
    }

    async fn call_replayable(&self, cmd: Cmd) -> Result<Value> {
        on_master!(self, true, |t| t.call_replayable(cmd.clone()))
    }

    async fn script_replayable(
        &self,
        script: &Script,
        keys: &[&str],
        args: &Args,
    ) -> Result<Value> {
        on_master!(self, true, |t| t.script_replayable(script, keys, args))
    }

    async fn pipeline_replayable(&self, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        on_master!(self, true, |t| t.pipeline_replayable(cmds.clone()))
    }

    async fn reload(&self, script: &Script, keys: &[&str], args: &Args) -> Result<()> {
        on_master!(self, true, |t| t.reload(script, keys, args))
    }

    async fn function(&self, call: FunctionCall<'_>, replayable: bool) -> Result<Option<Value>> {
        on_master!(self, replayable, |t| t.function(call, replayable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let url = SentinelUrl::parse("redis+sentinel://:pw@10.0.0.1:26379,10.0.0.2:26380/main/2")
            .unwrap();
        assert_eq!(
            url.sentinels,
            ["redis://10.0.0.1:26379", "redis://10.0.0.2:26380"]
        );
        assert_eq!(url.service, "main");
        assert_eq!(url.db, 2);
        assert_eq!(url.password.as_deref(), Some("pw"));
        assert_eq!(url.username, None);
        let plain = SentinelUrl::parse("redis+sentinel://h:1/m").unwrap();
        assert_eq!((plain.db, plain.password), (0, None));
        for bad in [
            "redis+sentinel://h:1",
            "redis+sentinel://h:1/",
            "redis+sentinel:///m",
            "redis+sentinel://h:1/m/x",
            "redis+sentinel://h:1/m/1/2",
        ] {
            let error = SentinelUrl::parse(bad).unwrap_err();
            assert!(
                error.to_string().contains("redis+sentinel://"),
                "{bad}: {error}"
            );
        }
    }
}
