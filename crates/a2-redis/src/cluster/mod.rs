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

use crate::args::Args;
use crate::lua::Library;
use crate::transport::{FunctionCall, FunctionsSwitch, Transport, code_call};

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
    // A reply that does not come within half the command timeout fails
    // that try: reads are tried again (`ClusterTransport::call`), so a
    // request lost on a node connection the client replaced while slots
    // moved costs half the timeout, not all of it.
    ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(connect_timeout)
        .response_timeout(command_timeout / 2)
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
///
/// A node connection of the client that stops answering altogether (seen
/// right after slots moved, with every request to that node timing out
/// while the node itself answers) would stall every call to that node
/// until the process restarts. So a try that times out replaces the whole
/// cluster connection with a fresh one (a new slot map, new node
/// connections) for the calls that follow.
pub struct ClusterTransport {
    client: redis::cluster::ClusterClient,
    /// The connection and its generation. A std mutex: held to clone or
    /// swap it, never across an await.
    connection: std::sync::Mutex<(u64, ClusterConnection)>,
    connect_timeout: Duration,
    command_timeout: Duration,
    replicas: usize,
    functions: FunctionsSwitch,
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
            client,
            connection: std::sync::Mutex::new((0, connection)),
            connect_timeout,
            command_timeout,
            replicas,
            functions: FunctionsSwitch::default(),
        })
    }

    fn current(&self) -> (u64, ClusterConnection) {
        let guard = self.connection.lock().unwrap_or_else(|p| p.into_inner());
        (guard.0, guard.1.clone())
    }

    /// Replaces connection `generation` with a fresh one (unless another
    /// call did already); a failure to connect keeps the old one.
    async fn renew(&self, generation: u64) {
        let connecting = self.client.get_async_connection();
        let Ok(Ok(fresh)) = tokio::time::timeout(self.connect_timeout, connecting).await else {
            return;
        };
        let mut guard = self.connection.lock().unwrap_or_else(|p| p.into_inner());
        if guard.0 == generation {
            tracing::debug!(
                generation,
                "replaced the cluster connection after a timeout"
            );
            *guard = (generation + 1, fresh);
        }
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
        crate::transport::bounded(self.command_timeout, what, work).await
    }

    /// Sends a write (`cmd`, an `EVALSHA` or `FCALL` of `code` on `keys`),
    /// loading `code` on every master when the slot's node lacks it, then
    /// waits for the replicas (`acknowledged_by`). `None` when the cluster
    /// refuses functions.
    async fn write(
        &self,
        what: &str,
        cmd: Cmd,
        keys: &[&str],
        code: Code<'_>,
    ) -> Result<Option<Value>> {
        let (generation, mut connection) = self.current();
        let replicas = self.replicas;
        // Within the client's try (half the command timeout).
        let wait_ms = (self.command_timeout / 3).as_millis().max(1) as u64;
        let slot = keys.first().map(|k| slot_of(k));
        let reply = self
            .bounded(what, async {
                let reply = match cmd.query_async::<Value>(&mut connection).await {
                    // A node that never ran it (new, promoted, flushed):
                    // load it on every master (`SCRIPT LOAD` and `FUNCTION
                    // LOAD` go to all).
                    Err(e) if code.missing(&e) => {
                        match code.load(&mut connection).await {
                            Err(e) if crate::transport::functions_refused(&e) => {
                                return Ok((None, None));
                            }
                            other => other?,
                        }
                        cmd.query_async(&mut connection).await?
                    }
                    Err(e)
                        if matches!(code, Code::Library(_))
                            && crate::transport::functions_refused(&e) =>
                    {
                        return Ok((None, None));
                    }
                    other => other?,
                };
                let Some(slot) = slot.filter(|_| replicas > 0) else {
                    return Ok((Some(reply), None));
                };
                // WAIT on the slot's master, over the connection that
                // carried the write: it covers every write sent before.
                let mut wait = redis::cmd("WAIT");
                wait.arg(replicas).arg(wait_ms);
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(slot, SlotAddr::Master),
                ));
                let acked = connection.route_command(wait, route).await?;
                Ok((Some(reply), Some(acked)))
            })
            .await;
        let reply = match reply {
            Err(error) => {
                // A write is not tried again here (the caller decides),
                // but a stalled connection is not kept for the next call.
                if is_timeout(&error) {
                    self.renew(generation).await;
                }
                return Err(error);
            }
            Ok(reply) => reply,
        };
        match reply {
            (reply, None) => Ok(reply),
            (reply, Some(Value::Int(n))) if n as usize >= replicas => Ok(reply),
            (_, Some(acked)) => Err(Error::unavailable(format!(
                "written, but {acked:?} of {replicas} replicas acknowledged it in time"
            ))),
        }
    }
}

/// What a write runs: a script (by hash) or a function of a library.
#[derive(Clone, Copy)]
enum Code<'a> {
    Script(&'a Script),
    Library(&'a Library),
}

impl Code<'_> {
    /// Whether `e` says the node lacks this code.
    fn missing(self, e: &redis::RedisError) -> bool {
        match self {
            Code::Script(_) => e.kind() == ErrorKind::Server(ServerErrorKind::NoScript),
            Code::Library(_) => crate::transport::function_missing(e),
        }
    }

    /// Loads it on every master. A library replaces itself (the same
    /// text), so masters that have it do not fail the load.
    async fn load(self, connection: &mut ClusterConnection) -> redis::RedisResult<()> {
        match self {
            Code::Script(script) => script.load_async(connection).await.map(drop),
            Code::Library(library) => redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg("REPLACE")
                .arg(&library.code)
                .query_async::<Value>(connection)
                .await
                .map(drop),
        }
    }
}

#[async_trait]
impl Transport for ClusterTransport {
    /// The store sends only reads as plain commands (every write is a
    /// script), so a try that times out or loses its connection is sent
    /// again until the command timeout: right after slots move, a request
    /// now and then goes unanswered on a node connection the client is
    /// replacing.
    async fn call(&self, cmd: Cmd) -> Result<Value> {
        self.bounded("Redis command", async move {
            loop {
                let (generation, mut connection) = self.current();
                match cmd.query_async(&mut connection).await {
                    Err(e) if e.is_timeout() => {
                        tracing::debug!(error = %e, "a cluster read timed out; trying again");
                        self.renew(generation).await;
                    }
                    Err(e) if e.is_connection_dropped() || e.is_io_error() => {
                        tracing::debug!(error = %e, "a cluster read failed; trying again");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    other => return other,
                }
            }
        })
        .await
    }

    async fn script(&self, script: &Script, keys: &[&str], args: &Args) -> Result<Value> {
        let cmd = code_call("EVALSHA", script.get_hash(), keys, args);
        self.write("Redis script", cmd, keys, Code::Script(script))
            .await?
            .ok_or_else(|| Error::unavailable("the cluster refused a script"))
    }

    async fn function(&self, call: FunctionCall<'_>, _replayable: bool) -> Result<Option<Value>> {
        let Some(cmd) = call.command(&self.functions) else {
            return Ok(None);
        };
        let reply = self
            .write(
                "Redis function",
                cmd,
                call.keys,
                Code::Library(call.library),
            )
            .await?;
        self.functions.note(&reply);
        Ok(reply)
    }

    /// The calls go out concurrently; the cluster connection sends each to
    /// its node and pipelines those bound for the same node.
    async fn pipeline(&self, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        futures::future::try_join_all(cmds.into_iter().map(|cmd| self.call(cmd))).await
    }

    async fn reload(&self, script: &Script, _keys: &[&str], _args: &Args) -> Result<()> {
        let (_, mut connection) = self.current();
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

/// Whether a call failed by a timeout, ours or the client's.
fn is_timeout(error: &Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if e.downcast_ref::<redis::RedisError>()
            .is_some_and(redis::RedisError::is_timeout)
            || e.to_string().contains("timed out")
        {
            return true;
        }
        current = e.source();
    }
    false
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
