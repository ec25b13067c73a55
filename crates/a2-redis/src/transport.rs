//! The one seam every command goes through.
//!
//! The store core (scripts, key layout, reply decoding) only sees
//! [`Transport`]; [`RespTransport`] implements it over the Redis protocol
//! with a [`ConnectionManager`]. A transport over a provider's REST API
//! implements the same two methods and reuses everything else unchanged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use a2_core::{Error, Result};
use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, RedisError, Script, ServerErrorKind, Value};

use crate::args::Args;
use crate::lua::Library;

/// Issues commands and scripts; every failure is `StoreUnavailable`.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Runs one command and returns its reply.
    async fn call(&self, cmd: Cmd) -> Result<Value>;

    /// Runs a script (by hash, loading it when the server lacks it) with
    /// these keys and arguments and returns its reply.
    async fn script(&self, script: &Script, keys: &[&str], args: &Args) -> Result<Value>;

    /// Runs `cmds` in order (not atomically) and returns one reply per
    /// command; fails when any of them fails. A transport that can send
    /// them in one round trip does (the REST transport's `/pipeline`); by
    /// default they go one by one.
    async fn pipeline(&self, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        let mut replies = Vec::with_capacity(cmds.len());
        for cmd in cmds {
            replies.push(self.call(cmd).await?);
        }
        Ok(replies)
    }

    /// Whether a command's arguments may be any bytes. The REST protocol
    /// carries JSON strings, so its transport says no, and what needs
    /// binary arguments (`RESTORE` of a dump) takes another way there.
    fn binary_args(&self) -> bool {
        true
    }

    /// [`Transport::call`] for a call whose replay is harmless (RD8): a
    /// transport whose connection can be lost before a reply arrives sends
    /// it once more on a fresh connection. By default, `call`.
    async fn call_replayable(&self, cmd: Cmd) -> Result<Value> {
        self.call(cmd).await
    }

    /// [`Transport::script`] for a script whose replay is harmless (RD8).
    /// By default, `script`.
    async fn script_replayable(
        &self,
        script: &Script,
        keys: &[&str],
        args: &Args,
    ) -> Result<Value> {
        self.script(script, keys, args).await
    }

    /// [`Transport::pipeline`] of commands whose replay is harmless (RD8).
    /// By default, `pipeline`.
    async fn pipeline_replayable(&self, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        self.pipeline(cmds).await
    }

    /// Loads `script` wherever a call may run it, after a pipelined call
    /// answered `NOSCRIPT`. By default it runs the script once with these
    /// keys and arguments (which loads it on the one server); a cluster
    /// transport loads it on every node, since each has its own cache.
    async fn reload(&self, script: &Script, keys: &[&str], args: &Args) -> Result<()> {
        self.script(script, keys, args).await.map(drop)
    }

    /// Runs `function` of `library` (`FCALL`, Redis ≥ 7), loading the
    /// library when the server lacks it (on first use, after a restart
    /// without persistence or `FUNCTION FLUSH`), and sent once more after a
    /// lost connection when `replayable` (RD8). `Ok(None)` when functions
    /// cannot run here: the caller then runs the same operation as a
    /// script. By default (a REST provider, a cluster) always `None`.
    async fn function(&self, call: FunctionCall<'_>, replayable: bool) -> Result<Option<Value>> {
        let _ = (call, replayable);
        Ok(None)
    }

    /// Whether commands go to a Redis Cluster: every call then touches
    /// keys of one slot, and scripts publish with `SPUBLISH`
    /// (`crate::lua::Publish`). False by default.
    fn is_cluster(&self) -> bool {
        false
    }

    /// Whether every call is a round trip of its own that costs more than
    /// the server's work to fold a follow-up read into a script's reply
    /// (REST: one HTTP request per call, no pipelining across calls).
    /// False by default.
    fn fewer_round_trips(&self) -> bool {
        false
    }

    /// How many stream entries one call may read at most: a REST provider
    /// may cap the size of a reply (`RestOptions::stream_page`). Unbounded
    /// by default.
    fn stream_page(&self) -> usize {
        usize::MAX
    }
}

/// [`Transport`] over RESP with a reconnecting [`ConnectionManager`].
///
/// Every call is bounded by the command timeout on top of the connection
/// manager's own response timeout, so a call to a vanished server fails
/// fast with `StoreUnavailable` even while the manager is reconnecting.
pub struct RespTransport {
    connection: ConnectionManager,
    command_timeout: Duration,
    functions: FunctionsSwitch,
}

impl RespTransport {
    /// Connects, failing after `connect_timeout`.
    pub async fn connect(
        client: redis::Client,
        command_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(command_timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let connecting = ConnectionManager::new_with_config(client, config);
        let connection = tokio::time::timeout(connect_timeout, connecting)
            .await
            .map_err(|_| Error::unavailable("timed out connecting to Redis"))?
            .map_err(|e| Error::unavailable_from("could not connect to Redis", e))?;
        Ok(Self {
            connection,
            command_timeout,
            functions: FunctionsSwitch::default(),
        })
    }

    async fn bounded<T>(
        &self,
        what: &str,
        work: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        bounded(self.command_timeout, what, work).await
    }

    /// [`RespTransport::bounded`], sent once more when the connection was
    /// lost before the reply (RD8): a broken pipe, a reset, the end of the
    /// stream — what the first call on the pooled connection meets after
    /// the server restarted. The connection manager reconnects on such an
    /// error, so the second try goes out on a fresh connection. Only for
    /// calls whose replay is harmless: the first may have run before the
    /// connection went. A timeout is not retried (the server may still be
    /// running the call, and a hung server must fail fast, ST5).
    async fn bounded_replayable<T, F, Fut>(&self, what: &str, work: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        match tokio::time::timeout(self.command_timeout, work()).await {
            Ok(Err(e)) if e.is_connection_dropped() => {
                tracing::debug!(error = %e, "{what}: the connection was lost; sending it once more");
                self.bounded(what, work()).await
            }
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(Error::unavailable_from(format!("{what} failed"), e)),
            Err(_) => Err(Error::unavailable(format!(
                "{what} timed out after {:?}",
                self.command_timeout
            ))),
        }
    }
}

/// Whether a server runs our functions: on until it refuses them once
/// (Redis < 7, an ACL); from then on operations run as scripts.
#[derive(Debug, Default)]
pub(crate) struct FunctionsSwitch(AtomicBool);

impl FunctionsSwitch {
    /// Whether the server refused functions.
    pub(crate) fn off(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Notes the reply of a function call: `None` (refused) turns
    /// functions off for good.
    pub(crate) fn note(&self, reply: &Option<Value>) {
        if reply.is_none() && !self.0.swap(true, Ordering::Relaxed) {
            tracing::info!("the server does not run functions for us; operations run as scripts");
        }
    }
}

/// One `FCALL`: `function` of `library` with these keys and arguments.
#[derive(Clone, Copy)]
pub struct FunctionCall<'a> {
    /// The library that holds the function (loaded when the server lacks it).
    pub library: &'a Library,
    /// The function's name.
    pub function: &'a str,
    /// Its keys.
    pub keys: &'a [&'a str],
    /// Its arguments.
    pub args: &'a Args,
}

impl<'a> FunctionCall<'a> {
    /// A call of `function` of `library` with these keys and arguments.
    pub fn new(
        library: &'a Library,
        function: &'a str,
        keys: &'a [&'a str],
        args: &'a Args,
    ) -> Self {
        Self {
            library,
            function,
            keys,
            args,
        }
    }

    /// The `FCALL` command, or `None` once `switch` says the server does
    /// not run functions.
    pub(crate) fn command(&self, switch: &FunctionsSwitch) -> Option<Cmd> {
        (!switch.off()).then(|| code_call("FCALL", self.function, self.keys, self.args))
    }
}

/// `{verb} {name} {numkeys} {keys...} {args...}` (an `EVALSHA` or an
/// `FCALL`), built in one buffer (redis::ScriptInvocation would copy every
/// key and argument twice).
pub(crate) fn code_call(verb: &str, name: &str, keys: &[&str], args: &Args) -> Cmd {
    let bytes = keys.iter().map(|k| k.len() + 16).sum::<usize>()
        + args.bytes()
        + args.len() * 16
        + name.len()
        + 64;
    let mut cmd = Cmd::with_capacity(3 + keys.len() + args.len(), bytes);
    cmd.arg(verb).arg(name).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    for arg in args.iter() {
        cmd.arg(arg);
    }
    cmd
}

/// `EVALSHA` of `script` with these keys and arguments.
fn evalsha(script: &Script, keys: &[&str], args: &Args) -> Cmd {
    code_call("EVALSHA", script.get_hash(), keys, args)
}

/// Sends `cmd` (an `EVALSHA` of `script`); loads the script and sends it
/// again when the server lacks it (after a restart or `SCRIPT FLUSH`).
async fn eval(
    mut connection: ConnectionManager,
    script: &Script,
    cmd: &Cmd,
) -> redis::RedisResult<Value> {
    match cmd.query_async(&mut connection).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.prepare_invoke().load_async(&mut connection).await?;
            cmd.query_async(&mut connection).await
        }
        other => other,
    }
}

/// Whether `e` says the server does not run functions for us: an unknown
/// command (Redis < 7) or a permission refused by an ACL.
pub(crate) fn functions_refused(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || e.detail()
            .is_some_and(|d| d.to_ascii_lowercase().contains("unknown command"))
}

/// Whether `e` is the answer to an `FCALL` of a function the server lacks.
pub(crate) fn function_missing(e: &RedisError) -> bool {
    e.detail().is_some_and(|d| d.contains("Function not found"))
}

/// Sends `cmd` (an `FCALL` of a function of `library`); loads the library
/// and sends it again when the server lacks the function. `None` when the
/// server turns functions down.
async fn call_function(
    mut connection: ConnectionManager,
    library: &Library,
    cmd: &Cmd,
) -> redis::RedisResult<Option<Value>> {
    match cmd.query_async(&mut connection).await {
        Ok(value) => Ok(Some(value)),
        Err(e) if function_missing(&e) => {
            let loaded = redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg(&library.code)
                .query_async::<Value>(&mut connection)
                .await;
            match loaded {
                Ok(_) => {}
                // Another instance loaded it meanwhile.
                Err(e) if e.detail().is_some_and(|d| d.contains("already exists")) => {}
                Err(e) if functions_refused(&e) => return Ok(None),
                Err(e) => return Err(e),
            }
            cmd.query_async(&mut connection).await.map(Some)
        }
        Err(e) if functions_refused(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

#[async_trait]
impl Transport for RespTransport {
    async fn function(&self, call: FunctionCall<'_>, replayable: bool) -> Result<Option<Value>> {
        let Some(cmd) = call.command(&self.functions) else {
            return Ok(None);
        };
        let library = call.library;
        let reply = if replayable {
            self.bounded_replayable("Redis function", || {
                call_function(self.connection.clone(), library, &cmd)
            })
            .await?
        } else {
            self.bounded(
                "Redis function",
                call_function(self.connection.clone(), library, &cmd),
            )
            .await?
        };
        self.functions.note(&reply);
        Ok(reply)
    }

    async fn pipeline(&self, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        let mut pipe = redis::pipe();
        for cmd in cmds {
            pipe.add_command(cmd);
        }
        let mut connection = self.connection.clone();
        self.bounded("Redis pipeline", async move {
            pipe.query_async::<Vec<Value>>(&mut connection).await
        })
        .await
    }

    async fn call(&self, cmd: Cmd) -> Result<Value> {
        let mut connection = self.connection.clone();
        self.bounded("Redis command", async move {
            cmd.query_async(&mut connection).await
        })
        .await
    }

    async fn script(&self, script: &Script, keys: &[&str], args: &Args) -> Result<Value> {
        let cmd = evalsha(script, keys, args);
        self.bounded("Redis script", eval(self.connection.clone(), script, &cmd))
            .await
    }

    async fn call_replayable(&self, cmd: Cmd) -> Result<Value> {
        self.bounded_replayable("Redis command", || {
            let mut connection = self.connection.clone();
            let cmd = cmd.clone();
            async move { cmd.query_async(&mut connection).await }
        })
        .await
    }

    async fn script_replayable(
        &self,
        script: &Script,
        keys: &[&str],
        args: &Args,
    ) -> Result<Value> {
        let cmd = evalsha(script, keys, args);
        self.bounded_replayable("Redis script", || {
            eval(self.connection.clone(), script, &cmd)
        })
        .await
    }

    async fn pipeline_replayable(&self, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        let mut pipe = redis::pipe();
        for cmd in cmds {
            pipe.add_command(cmd);
        }
        self.bounded_replayable("Redis pipeline", || {
            let mut connection = self.connection.clone();
            let pipe = pipe.clone();
            async move { pipe.query_async::<Vec<Value>>(&mut connection).await }
        })
        .await
    }
}

/// `work` within `timeout`; a Redis error or the timeout is `Unavailable`
/// naming `what`.
pub(crate) async fn bounded<T>(
    timeout: std::time::Duration,
    what: &str,
    work: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Error::unavailable_from(format!("{what} failed"), e)),
        Err(_) => Err(Error::unavailable(format!(
            "{what} timed out after {timeout:?}"
        ))),
    }
}
