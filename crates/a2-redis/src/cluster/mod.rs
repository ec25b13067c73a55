//! Redis Cluster: the command transport over the `redis` crate's async
//! cluster client, and the sharded push subscriber (`subscriber`).
//!
//! The key layout already puts every script's keys in one slot (a session's
//! keys and its partition's sets share the partition's hash tag, see
//! `layout`), so a cluster needs no other scripts: only a transport that
//! sends each call to its slot's master (the client follows `MOVED` and
//! `ASK` while slots move and retries `TRYAGAIN`), loads scripts on every
//! node, and scripts that publish with `SPUBLISH` so that a session's
//! channels live on its slot (`lua::Publish::Sharded`).
//!
//! A URL names the seed nodes: `redis+cluster://host:port,host:port`
//! (optionally `redis+cluster://:password@host:port,…` or
//! `redis+cluster://user:password@…`); any one reachable seed is enough.

pub(crate) mod subscriber;

use std::time::Duration;

use a2_core::{Error, Result};
use async_trait::async_trait;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, Script, ServerErrorKind, Value};

use crate::transport::Transport;

/// The URL scheme of a cluster.
pub const SCHEME: &str = "redis+cluster://";

/// Whether `url` names a cluster (`redis+cluster://…`).
pub fn is_cluster_url(url: &str) -> bool {
    url.get(..SCHEME.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(SCHEME))
}

/// The seed node URLs of a `redis+cluster://` URL: one `redis://` URL per
/// listed `host:port`, each with the URL's credentials.
pub fn seeds(url: &str) -> Result<Vec<String>> {
    if !is_cluster_url(url) {
        return Err(Error::invalid(format!(
            "not a cluster URL (expected {SCHEME}host:port,host:port): {url:?}"
        )));
    }
    let rest = &url[SCHEME.len()..];
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((credentials, hosts)) => (format!("{credentials}@"), hosts),
        None => (String::new(), authority),
    };
    let seeds: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|host| format!("redis://{credentials}{host}/"))
        .collect();
    if seeds.is_empty() {
        return Err(Error::invalid(format!(
            "a cluster URL names at least one node: {url:?}"
        )));
    }
    Ok(seeds)
}

/// Builds a cluster client over `seeds` with the store's timeouts.
pub(crate) fn client_builder(
    seeds: &[String],
    command_timeout: Duration,
    connect_timeout: Duration,
) -> ClusterClientBuilder {
    // A reply that does not come within a quarter of the command timeout
    // fails that try, and the client tries again (reconnecting and
    // re-reading the slot map): while slots move, a node connection the
    // client replaces may take the requests it carried with it.
    ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(connect_timeout)
        .response_timeout(command_timeout / 4)
        // Redirections and `TRYAGAIN` while a slot moves are retried with a
        // short backoff; every call stays bounded by the command timeout.
        .retries(8)
        .min_retry_wait(5)
        .max_retry_wait(200)
}

/// [`Transport`] over a Redis Cluster: every command and script goes to
/// the master of its keys' slot.
///
/// When [`ClusterTransport::acknowledged_by`] is above 0, each script call
/// is followed by `WAIT n` on the same node connection, so a call returns
/// only once `n` replicas hold what it wrote: an acknowledged write then
/// survives the loss of its master. A `WAIT` that times out fails the call
/// with `StoreUnavailable` (the write may or may not survive: retry it, as
/// after any unavailable error).
pub struct ClusterTransport {
    connection: ClusterConnection,
    command_timeout: Duration,
    replicas: usize,
}

impl ClusterTransport {
    /// Connects to the cluster through any of `seeds`, failing after
    /// `connect_timeout`; `replicas` is [`ClusterTransport::acknowledged_by`].
    pub async fn connect(
        seeds: &[String],
        command_timeout: Duration,
        connect_timeout: Duration,
        replicas: usize,
    ) -> Result<Self> {
        let client = client_builder(seeds, command_timeout, connect_timeout)
            .build()
            .map_err(|e| Error::invalid(format!("bad cluster seeds: {e}")))?;
        let connection = tokio::time::timeout(connect_timeout, client.get_async_connection())
            .await
            .map_err(|_| Error::unavailable("timed out connecting to the Redis Cluster"))?
            .map_err(|e| Error::unavailable_from("could not connect to the Redis Cluster", e))?;
        Ok(Self {
            connection,
            command_timeout,
            replicas,
        })
    }

    /// How many replicas must hold a script's writes before the call
    /// returns (0: the master's reply is enough).
    pub fn acknowledged_by(&self) -> usize {
        self.replicas
    }

    async fn bounded<T>(
        &self,
        what: &str,
        work: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.command_timeout, work).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(Error::unavailable_from(format!("{what} failed"), e)),
            Err(_) => Err(Error::unavailable(format!(
                "{what} timed out after {:?}",
                self.command_timeout
            ))),
        }
    }
}

#[async_trait]
impl Transport for ClusterTransport {
    async fn call(&self, cmd: Cmd) -> Result<Value> {
        let mut connection = self.connection.clone();
        self.bounded("Redis command", async move {
            cmd.query_async(&mut connection).await
        })
        .await
    }

    async fn script(&self, script: &Script, keys: &[&str], args: &[Vec<u8>]) -> Result<Value> {
        let mut cmd = Cmd::with_capacity(3 + keys.len() + args.len(), 256);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
        for key in keys {
            cmd.arg(*key);
        }
        for arg in args {
            cmd.arg(arg.as_slice());
        }
        let mut connection = self.connection.clone();
        let replicas = self.replicas;
        // Within the client's try (a quarter of the command timeout).
        let wait_ms = (self.command_timeout / 5).as_millis().max(1) as u64;
        let slot = keys.first().map(|k| slot_of(k));
        let reply = self
            .bounded("Redis script", async move {
                let reply = match cmd.query_async::<Value>(&mut connection).await {
                    // A node that never ran it (new, promoted, flushed):
                    // load it on every node (`SCRIPT LOAD` goes to all).
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        script.load_async(&mut connection).await?;
                        cmd.query_async(&mut connection).await?
                    }
                    other => other?,
                };
                let Some(slot) = slot.filter(|_| replicas > 0) else {
                    return Ok((reply, None));
                };
                // WAIT on the slot's master, over the connection that
                // carried the script: it covers every write sent before.
                let mut wait = redis::cmd("WAIT");
                wait.arg(replicas).arg(wait_ms);
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(slot, SlotAddr::Master),
                ));
                let acked = connection.route_command(wait, route).await?;
                Ok((reply, Some(acked)))
            })
            .await?;
        match reply {
            (reply, None) => Ok(reply),
            (reply, Some(Value::Int(n))) if n as usize >= replicas => Ok(reply),
            (_, Some(acked)) => Err(Error::unavailable(format!(
                "written, but {acked:?} of {replicas} replicas acknowledged it in time"
            ))),
        }
    }

    /// The calls go out concurrently; the cluster connection sends each to
    /// its node and pipelines those bound for the same node.
    async fn pipeline(&self, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        futures::future::try_join_all(cmds.into_iter().map(|cmd| self.call(cmd))).await
    }

    async fn reload(&self, script: &Script, _keys: &[&str], _args: &[Vec<u8>]) -> Result<()> {
        let mut connection = self.connection.clone();
        self.bounded("SCRIPT LOAD", async move {
            script.load_async(&mut connection).await
        })
        .await
        .map(drop)
    }

    fn is_cluster(&self) -> bool {
        true
    }
}

/// The cluster slot of a key (its hash tag's, when it has one).
pub fn slot_of(key: &str) -> u16 {
    let tag = key
        .find('{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.find('}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crate::layout::slot(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_their_seeds() {
        assert!(is_cluster_url("redis+cluster://a:1"));
        assert!(is_cluster_url("REDIS+CLUSTER://a:1"));
        assert!(!is_cluster_url("redis://a:1"));
        assert_eq!(
            seeds("redis+cluster://127.0.0.1:7000,127.0.0.1:7001/").unwrap(),
            ["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"]
        );
        assert_eq!(
            seeds("redis+cluster://:pw@h:1,h:2").unwrap(),
            ["redis://:pw@h:1/", "redis://:pw@h:2/"]
        );
        assert!(seeds("redis+cluster://").is_err());
        assert!(seeds("redis://h:1").is_err());
    }

    #[test]
    fn slots_follow_hash_tags() {
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("a2:{foo}:x"), 12182);
        assert_eq!(slot_of("a2:{}:x"), crate::layout::slot("a2:{}:x"));
    }
}
