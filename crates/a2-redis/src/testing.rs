//! Throwaway `redis-server` processes for tests (feature `testing`).
//!
//! Every test suite that needs Redis starts its own servers on free loopback
//! ports, in fresh temporary directories, so tests never touch a database
//! someone else uses (RD6).
//!
//! ```no_run
//! use a2_redis::testing::{RedisServer, unique_prefix};
//! let server = RedisServer::start();
//! let url = server.url();
//! let prefix = unique_prefix("my-test");
//! # let _ = (url, prefix);
//! ```
//!
//! A server is stopped when its [`RedisServer`] drops. Each server also has a
//! watchdog shell process that kills it as soon as the test process is gone,
//! so the process-wide [`shared`] server (a `static`, never dropped) and
//! servers of a test binary that aborts do not outlive the tests.

pub mod cluster;
#[cfg(feature = "rest")]
pub mod gateway;
pub mod node;
pub mod sentinel;

/// How many sessions' key names a batch script keeps built between calls;
/// tests go past it to see the names start over.
pub use crate::lua::NAMES_KEPT;

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a started server gets to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How many free ports are tried before giving up (another process may take
/// the port between our probe and the server's bind).
const PORT_ATTEMPTS: usize = 5;

/// A `redis-server` process owned by a test.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    aof: bool,
    dir: Option<tempfile::TempDir>,
    dir_path: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server without persistence on a free loopback port.
    ///
    /// # Panics
    /// When `redis-server` is not on `PATH` or does not start: tests that need
    /// Redis fail loudly rather than being skipped.
    pub fn start() -> Self {
        Self::try_start(false).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server with the append-only file on (`appendfsync always`),
    /// so that [`RedisServer::restart`] after [`RedisServer::kill`] finds
    /// every acknowledged write again.
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn start_with_aof() -> Self {
        Self::try_start(true).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server, returning an error instead of panicking.
    pub fn try_start(aof: bool) -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("a2-redis-test-")
            .tempdir()?;
        let dir_path = dir.path().to_path_buf();
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = a2_core::testing::free_port()?;
            let mut server = Self {
                port,
                aof,
                dir: None,
                dir_path: dir_path.clone(),
                child: None,
            };
            match server.spawn() {
                Ok(()) => {
                    server.dir = Some(dir);
                    return Ok(server);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    /// `redis://127.0.0.1:{port}/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id of the running server, if it runs (for tests that
    /// freeze it with SIGSTOP).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's working directory (where the AOF lives).
    pub fn dir(&self) -> &Path {
        &self.dir_path
    }

    /// Kills the server with SIGKILL and waits for it to exit: an abrupt
    /// failure, with no chance to save or say goodbye to clients.
    pub fn kill(&mut self) {
        a2_core::testing::kill(&mut self.child);
    }

    /// Starts the server again on the same port in the same directory (after
    /// [`RedisServer::kill`]; kills it first if it still runs).
    ///
    /// # Panics
    /// When the server does not come back, for example because another
    /// process took the port meanwhile.
    pub fn restart(&mut self) {
        self.kill();
        let what = format!("redis-server on port {}", self.port);
        a2_core::testing::respawn(&what, START_TIMEOUT, Duration::from_millis(50), || {
            self.spawn()
        });
    }

    fn spawn(&mut self) -> io::Result<()> {
        let mut command = Command::new("redis-server");
        command
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.dir_path)
            .arg("--save")
            .arg("")
            .arg("--daemonize")
            .arg("no")
            .arg("--loglevel")
            .arg("warning")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.aof {
            command.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            command.args(["--appendonly", "no"]);
        }
        let child = spawn_answering(
            &mut command,
            &self.dir_path,
            self.port,
            "the Redis tests start their own server; install Redis (for example \
             `apt-get install redis-server`)",
            &format!("port {} taken?", self.port),
        )?;
        self.child = Some(child);
        Ok(())
    }
}

/// Starts `command` (a `redis-server` listening on `port`), watched so it
/// dies with the test process, and waits until it answers `PING`. `missing`
/// says what to do when no `redis-server` is on PATH, `exited` what a
/// server that exits at once probably met.
pub(crate) fn spawn_answering(
    command: &mut Command,
    dir: &std::path::Path,
    port: u16,
    missing: &str,
    exited: &str,
) -> io::Result<Child> {
    let mut child = command.spawn().map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("`redis-server` was not found on PATH: {missing}"),
            )
        } else {
            e
        }
    })?;
    a2_core::testing::watch(child.id(), dir, "a2-redis-watchdog")?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if ping(port) {
            return Ok(child);
        }
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!(
                "redis-server exited with {status} ({exited})"
            )));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("redis-server on port {port} did not answer PING"),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether a server on `port` answers `PING`.
fn ping(port: u16) -> bool {
    let attempt = || -> io::Result<bool> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
        stream.set_read_timeout(Some(Duration::from_millis(500)))?;
        stream.write_all(b"PING\r\n")?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply)?;
        Ok(&reply == b"+PONG\r\n")
    };
    attempt().unwrap_or(false)
}

static SHARED: LazyLock<RedisServer> = LazyLock::new(RedisServer::start);

/// The server shared by every test of this test binary, started on first
/// use. Tests sharing it keep apart by [`unique_prefix`]; it is killed by its
/// watchdog when the test process exits.
///
/// # Panics
/// As [`RedisServer::start`].
pub fn shared() -> &'static RedisServer {
    &SHARED
}

/// A key prefix no other test of this process uses: `t{pid}-{n}-{label}`
/// with `label` reduced to characters that are safe in a prefix.
pub fn unique_prefix(label: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let label: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(48)
        .collect();
    format!("t{}-{n}-{label}", std::process::id())
}

/// E1's damage, for tests: deletes the entry of `index` from the stream
/// `log` (a session's log key, [`crate::SessionKeys::log`]) on the server
/// or cluster at `url` (`redis://…` or `redis+cluster://host:port,…`), as an
/// eviction or an operator's `XDEL` would.
///
/// # Panics
/// When the server cannot be reached or holds no such entry.
pub async fn delete_log_entry(url: &str, log: &str, index: u64) {
    let mut xdel = redis::cmd("XDEL");
    xdel.arg(log).arg(format!("{index}-0"));
    let deleted: i64 = match url.strip_prefix("redis+cluster://") {
        Some(seeds) => {
            let seeds: Vec<String> = seeds.split(',').map(|s| format!("redis://{s}")).collect();
            let client = redis::cluster::ClusterClient::new(seeds).expect("cluster seeds");
            let mut conn = client
                .get_async_connection()
                .await
                .expect("connect to the cluster");
            xdel.query_async(&mut conn).await.expect("XDEL")
        }
        None => {
            let client = redis::Client::open(url).expect("a Redis URL");
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .expect("connect to the server");
            xdel.query_async(&mut conn).await.expect("XDEL")
        }
    };
    assert_eq!(deleted, 1, "no entry {index} in {log:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_kill_restart() {
        let mut server = RedisServer::start();
        assert!(ping(server.port()));
        server.kill();
        assert!(!ping(server.port()));
        server.restart();
        assert!(ping(server.port()));
    }

    #[test]
    fn drop_stops_the_server() {
        let server = RedisServer::start();
        let port = server.port();
        drop(server);
        assert!(!ping(port));
    }

    #[test]
    fn shared_server_is_started_once() {
        assert_eq!(shared().port(), shared().port());
        assert!(ping(shared().port()));
    }

    #[test]
    fn prefixes_are_unique_and_brace_free() {
        let a = unique_prefix("x{y}");
        let b = unique_prefix("x{y}");
        assert_ne!(a, b);
        assert!(!a.contains('{') && !a.contains('}'));
    }
}
