//! A throwaway Redis Sentinel deployment for tests: a master and a replica
//! (`redis-server`) watched by three Sentinels (`redis-sentinel`, from
//! Debian's `redis-sentinel` package) under the service name
//! [`SERVICE`], on free loopback ports in a temporary directory.
//!
//! ```no_run
//! use a2_redis::testing::sentinel::RedisSentinels;
//! let deployment = RedisSentinels::start();
//! let url = deployment.url(); // redis+sentinel://127.0.0.1:…,…/a2main
//! deployment.failover(); // the replica becomes the master
//! # let _ = url;
//! ```
//!
//! Every process is killed when the [`RedisSentinels`] drops, and by its
//! watchdog when the test process is gone.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use a2_core::testing::free_port;

use super::spawn_answering;

/// The name the Sentinels monitor the master under.
pub const SERVICE: &str = "a2main";

/// How long the deployment gets to form, and a failover to settle.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A master, its replica and three Sentinels.
#[derive(Debug)]
pub struct RedisSentinels {
    _dir: tempfile::TempDir,
    servers: Vec<(u16, Child)>,
    sentinels: Vec<(u16, Child)>,
}

impl RedisSentinels {
    /// Starts the deployment and waits until every Sentinel knows the
    /// master, its replica and the other Sentinels.
    ///
    /// # Panics
    /// When `redis-server` or `redis-sentinel` is missing or the deployment
    /// does not settle: tests that need it fail loudly.
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_start() -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("a2-redis-sentinel-")
            .tempdir()?;
        let mut servers = Vec::new();
        let master = free_port()?;
        servers.push((master, server(dir.path(), master, None)?));
        let replica = free_port()?;
        servers.push((replica, server(dir.path(), replica, Some(master))?));
        wait_until("the replica to sync", || {
            cli(replica, &["INFO", "replication"])
                .is_ok_and(|i| i.contains("master_link_status:up"))
        })?;
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            let port = free_port()?;
            sentinels.push((port, sentinel(dir.path(), port, master)?));
        }
        let deployment = Self {
            _dir: dir,
            servers,
            sentinels,
        };
        for &(port, _) in &deployment.sentinels {
            wait_until("the Sentinels to know each other and the replica", || {
                cli(port, &["SENTINEL", "MASTER", SERVICE]).is_ok_and(|info| {
                    field(&info, "num-slaves") == Some("1")
                        && field(&info, "num-other-sentinels") == Some("2")
                })
            })?;
        }
        Ok(deployment)
    }

    /// `redis+sentinel://127.0.0.1:{port},…/a2main`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+sentinel://{}/{SERVICE}", hosts.join(","))
    }

    /// The port of the server the first Sentinel names master.
    pub fn master_port(&self) -> u16 {
        master_of(self.sentinels[0].0).expect("a Sentinel names the master")
    }

    /// Asks a Sentinel to fail the master over to its replica
    /// (`SENTINEL FAILOVER`), and waits until every Sentinel names the new
    /// master, it answers as one, and the old master follows it as a
    /// replica.
    ///
    /// # Panics
    /// When the failover does not settle within a minute.
    pub fn failover(&self) {
        let old = self.master_port();
        let sentinel = self.sentinels[0].0;
        cli(sentinel, &["SENTINEL", "FAILOVER", SERVICE]).expect("SENTINEL FAILOVER");
        let new = self
            .servers
            .iter()
            .map(|(port, _)| *port)
            .find(|port| *port != old)
            .expect("two servers");
        let settled = wait_until("the failover to settle", || {
            self.sentinels
                .iter()
                .all(|(port, _)| master_of(*port) == Some(new))
                && cli(new, &["ROLE"]).is_ok_and(|r| r.starts_with("master"))
                && cli(old, &["INFO", "replication"])
                    .is_ok_and(|i| i.contains("role:slave") && i.contains("master_link_status:up"))
        });
        settled.unwrap_or_else(|e| panic!("{e}"));
    }
}

impl Drop for RedisSentinels {
    fn drop(&mut self) {
        for (_, child) in self.sentinels.iter_mut().chain(self.servers.iter_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn server(dir: &Path, port: u16, replica_of: Option<u16>) -> io::Result<Child> {
    let data = dir.join(format!("server-{port}"));
    std::fs::create_dir_all(&data)?;
    let mut command = Command::new("redis-server");
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(&data)
        .args(["--save", "", "--appendonly", "no"])
        // A master without a replica refuses writes, so the one a failover
        // leaves behind takes none that its successor would never see
        // (Sentinel promotes the replica before it demotes the master).
        .args([
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            "2",
        ])
        .args(["--daemonize", "no", "--loglevel", "warning"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(master) = replica_of {
        command.args(["--replicaof", "127.0.0.1", &master.to_string()]);
    }
    spawn_answering(
        &mut command,
        &data,
        port,
        "the Sentinel tests start their own servers; install Redis (for example \
         `apt-get install redis-server`)",
        &format!("port {port} taken?"),
    )
}

fn sentinel(dir: &Path, port: u16, master: u16) -> io::Result<Child> {
    let data: PathBuf = dir.join(format!("sentinel-{port}"));
    std::fs::create_dir_all(&data)?;
    // A Sentinel rewrites its configuration file as it learns: it must be
    // its own and writable.
    let config = data.join("sentinel.conf");
    std::fs::write(
        &config,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\n\
             sentinel monitor {SERVICE} 127.0.0.1 {master} 2\n\
             sentinel down-after-milliseconds {SERVICE} 2000\n\
             sentinel failover-timeout {SERVICE} 10000\n\
             sentinel parallel-syncs {SERVICE} 1\n",
            dir = data.display()
        ),
    )?;
    let mut command = Command::new("redis-sentinel");
    command
        .arg(&config)
        .args(["--daemonize", "no", "--loglevel", "warning"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    spawn_answering(
        &mut command,
        &data,
        port,
        "the Sentinel tests start their own Sentinels; install Redis Sentinel (for \
         example `apt-get install redis-sentinel`)",
        &format!("port {port} taken?"),
    )
}

/// `redis-cli -p PORT ARGS…`: its output, or an error when it fails.
fn cli(port: u16, args: &[&str]) -> io::Result<String> {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() || text.starts_with("ERR") {
        return Err(io::Error::other(format!("redis-cli {args:?}: {text}")));
    }
    Ok(text)
}

/// The port of the master `sentinel` names.
fn master_of(sentinel: u16) -> Option<u16> {
    let reply = cli(sentinel, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]).ok()?;
    reply.lines().nth(1)?.trim().parse().ok()
}

/// The value after `name` in `redis-cli`'s one-item-a-line listing of a
/// flat map.
fn field<'a>(listing: &'a str, name: &str) -> Option<&'a str> {
    let mut lines = listing.lines();
    while let Some(line) = lines.next() {
        if line.trim() == name {
            return lines.next().map(str::trim);
        }
    }
    None
}

fn wait_until(what: &str, mut check: impl FnMut() -> bool) -> io::Result<()> {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    while !check() {
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("timed out waiting for {what}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
