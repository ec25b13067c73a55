//! A throwaway Redis Cluster for tests: six `redis-server` processes
//! (three masters with one replica each, `cluster-enabled yes`,
//! `appendonly yes`, `appendfsync always`) on free loopback ports in a
//! temporary directory, joined by `redis-cli --cluster create`.
//!
//! ```no_run
//! use a2_redis::testing::cluster::RedisCluster;
//! let cluster = RedisCluster::start();
//! let url = cluster.url(); // redis+cluster://127.0.0.1:…,…
//! # let _ = url;
//! ```
//!
//! The processes are killed when the [`RedisCluster`] drops, and by their
//! watchdogs when the test process is gone (the [`shared`] cluster, a
//! `static`, is never dropped).

use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// How long the cluster gets to form, and a slot move or failover to settle.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// One node of a [`RedisCluster`].
#[derive(Debug)]
pub struct ClusterNode {
    port: u16,
    bus_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl ClusterNode {
    /// The node's client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn spawn(&mut self) -> io::Result<()> {
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string()])
            .args(["--cluster-port", &self.bus_port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            // Long enough for a loaded two-core machine (CI runs other
            // suites beside this one) never to mark a busy node as failing
            // and fail it over by itself; the failover test asks for its
            // failover (`CLUSTER FAILOVER`), which does not wait for it.
            .args(["--cluster-node-timeout", "15000"])
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .args(["--save", ""])
            .args(["--daemonize", "no", "--loglevel", "warning"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = super::spawn_answering(
            &mut command,
            &self.dir,
            self.port,
            "the cluster tests start their own servers; install Redis ≥ 7 (for \
             example `apt-get install redis-server`)",
            &format!("port {} or {} taken?", self.port, self.bus_port),
        )?;
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A node's role and slots, from `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node id.
    pub id: String,
    /// The client port.
    pub port: u16,
    /// Whether it is a master.
    pub master: bool,
    /// The id of its master, for a replica.
    pub master_id: Option<String>,
    /// The slots it serves (masters), as inclusive ranges.
    pub slots: Vec<(u16, u16)>,
}

impl NodeInfo {
    /// Whether it serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
    }
}

/// Six `redis-server` processes forming a cluster of three masters with a
/// replica each.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<ClusterNode>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts the six servers and creates the cluster.
    ///
    /// # Panics
    /// When a server does not start or the cluster does not form (tests
    /// that need a cluster fail loudly rather than being skipped).
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|e| panic!("the test cluster did not start: {e}"))
    }

    /// Starts the cluster, returning an error instead of panicking.
    pub fn try_start() -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("a2-redis-cluster-")
            .tempdir()?;
        let mut nodes = Vec::new();
        for n in 0..6 {
            let node_dir = dir.path().join(format!("node-{n}"));
            std::fs::create_dir_all(&node_dir)?;
            nodes.push(start_node(node_dir)?);
        }
        let cluster = Self { nodes, _dir: dir };
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        create.args(["--cluster-replicas", "1", "--cluster-yes"]);
        checked(
            create.stdin(Stdio::null()).output()?,
            "redis-cli --cluster create",
        )?;
        cluster.wait_settled()?;
        Ok(cluster)
    }

    /// `redis+cluster://127.0.0.1:{port},…` naming every node.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// `redis://127.0.0.1:{port}/` of every node.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect()
    }

    /// Every node's client port.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(ClusterNode::port).collect()
    }

    /// Runs `redis-cli -p {port} args…` and returns its output.
    ///
    /// # Errors
    /// When redis-cli fails or answers an error.
    pub fn cli(&self, port: u16, args: &[&str]) -> io::Result<String> {
        let output = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()?;
        let text = checked(output, &format!("redis-cli {}", args.join(" ")))?;
        if text.starts_with("ERR") || text.starts_with("(error)") {
            return Err(io::Error::other(format!(
                "redis-cli {}: {text}",
                args.join(" ")
            )));
        }
        Ok(text)
    }

    /// The nodes as one of them sees them (`CLUSTER NODES`).
    ///
    /// # Errors
    /// When no node answers.
    pub fn nodes(&self) -> io::Result<Vec<NodeInfo>> {
        let mut last = None;
        for node in self.nodes.iter().filter(|n| n.child.is_some()) {
            match self.cli(node.port, &["CLUSTER", "NODES"]) {
                Ok(text) => return Ok(parse_nodes(&text)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no node runs")))
    }

    /// The masters that serve slots.
    ///
    /// # Errors
    /// As [`RedisCluster::nodes`].
    pub fn masters(&self) -> io::Result<Vec<NodeInfo>> {
        Ok(self
            .nodes()?
            .into_iter()
            .filter(|n| n.master && !n.slots.is_empty())
            .collect())
    }

    /// The master serving `slot`.
    ///
    /// # Errors
    /// As [`RedisCluster::nodes`], or when no master serves it.
    pub fn master_of(&self, slot: u16) -> io::Result<NodeInfo> {
        self.masters()?
            .into_iter()
            .find(|n| n.serves(slot))
            .ok_or_else(|| io::Error::other(format!("no master serves slot {slot}")))
    }

    /// Moves `slots` slots from the master on `from` to the master on `to`
    /// with `redis-cli --cluster reshard` (keys move with `MIGRATE` while
    /// clients keep working), then waits for every node to agree.
    ///
    /// # Errors
    /// When redis-cli fails or the cluster does not settle.
    pub fn reshard(&self, from: &NodeInfo, to: &NodeInfo, slots: u16) -> io::Result<()> {
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("reshard")
            .arg(format!("127.0.0.1:{}", to.port))
            .args(["--cluster-from", &from.id])
            .args(["--cluster-to", &to.id])
            .args(["--cluster-slots", &slots.to_string()])
            .args(["--cluster-pipeline", "16"])
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .output()?;
        checked(output, "redis-cli --cluster reshard")?;
        self.wait_settled()
    }

    /// `CLUSTER FAILOVER` on the replica on `replica`: it and its master
    /// swap roles once it has caught up (no acknowledged write is lost);
    /// waits until the replica reports itself master and the cluster is ok.
    ///
    /// # Errors
    /// When the failover does not happen in time.
    pub fn failover(&self, replica: u16) -> io::Result<()> {
        self.cli(replica, &["CLUSTER", "FAILOVER"])?;
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let role = self.cli(replica, &["ROLE"]).unwrap_or_default();
            if role.lines().next() == Some("master") {
                break;
            }
            if Instant::now() >= deadline {
                return Err(io::Error::other(format!(
                    "the replica on {replica} did not become master"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_settled()
    }

    /// Waits until every running node reports `cluster_state:ok`, every
    /// replica's link to its master is up, and all agree on the slots
    /// (`redis-cli --cluster check`).
    ///
    /// # Errors
    /// When that does not happen within a minute.
    pub fn wait_settled(&self) -> io::Result<()> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        let running: Vec<u16> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(ClusterNode::port)
            .collect();
        loop {
            // Every node says the cluster is ok and sees every other node,
            // each either a master with slots or a replica: right after
            // `--cluster create`, or a failover, some views still show a
            // replica-to-be as an empty master.
            let ok = running.iter().all(|&port| {
                let state = self
                    .cli(port, &["CLUSTER", "INFO"])
                    .is_ok_and(|info| info.contains("cluster_state:ok"));
                // A replica is ready once its link to its master is up.
                let linked = self.cli(port, &["INFO", "replication"]).is_ok_and(|info| {
                    !info.contains("role:slave") || info.contains("master_link_status:up")
                });
                state
                    && linked
                    && self.cli(port, &["CLUSTER", "NODES"]).is_ok_and(|text| {
                        let nodes = parse_nodes(&text);
                        nodes.len() == running.len()
                            && nodes.iter().all(|n| n.master != n.slots.is_empty())
                    })
            });
            let agreed = ok
                && running.first().is_some_and(|&port| {
                    Command::new("redis-cli")
                        .args(["--cluster", "check", &format!("127.0.0.1:{port}")])
                        .stdin(Stdio::null())
                        .output()
                        .is_ok_and(|out| {
                            let text = String::from_utf8_lossy(&out.stdout);
                            out.status.success()
                                && text.contains("[OK] All nodes agree about slots configuration.")
                                && text.contains("[OK] All 16384 slots covered.")
                                && !text.contains("[WARNING]")
                        })
                });
            if agreed {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the cluster did not settle (cluster_state:ok, slots agreed)",
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The working directory of the node on `port` (its AOF and nodes.conf).
    pub fn dir(&self, port: u16) -> Option<&Path> {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .map(|n| n.dir.as_path())
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }
}

/// Starts one node on free ports (client and bus), retrying when another
/// process takes a port between the probe and the bind.
fn start_node(dir: PathBuf) -> io::Result<ClusterNode> {
    let mut last = None;
    for _ in 0..super::PORT_ATTEMPTS {
        let (port, bus_port) = two_free_ports()?;
        let mut node = ClusterNode {
            port,
            bus_port,
            dir: dir.clone(),
            child: None,
        };
        match node.spawn() {
            Ok(()) => return Ok(node),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("redis-server did not start")))
}

fn two_free_ports() -> io::Result<(u16, u16)> {
    // Both listeners are open at once, so the ports differ.
    let a = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let b = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}

fn checked(output: Output, what: &str) -> io::Result<String> {
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if !output.status.success() || stdout.contains("[ERR]") {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stdout.lines().rev().take(5).collect();
        return Err(io::Error::other(format!(
            "{what} failed ({}): {} {}",
            output.status,
            stderr.trim(),
            tail.join(" | ")
        )));
    }
    Ok(stdout)
}

/// Parses `CLUSTER NODES`.
fn parse_nodes(text: &str) -> Vec<NodeInfo> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            // `127.0.0.1:7000@17000[,hostname]`
            let port = fields[1]
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let flags = fields[2];
            if flags.contains("fail") && !flags.contains("fail?") && flags.contains("noaddr") {
                return None;
            }
            let master = flags.split(',').any(|f| f == "master");
            let master_id = (fields[3] != "-").then(|| fields[3].to_owned());
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(NodeInfo {
                id: fields[0].to_owned(),
                port,
                master,
                master_id,
                slots,
            })
        })
        .collect()
}

static SHARED: LazyLock<RedisCluster> = LazyLock::new(RedisCluster::start);

/// The cluster shared by every test of this test binary, started on first
/// use; tests keep apart by key prefix ([`super::unique_prefix`]). Tests
/// that move slots or fail nodes over start a cluster of their own.
///
/// # Panics
/// As [`RedisCluster::start`].
pub fn shared() -> &'static RedisCluster {
    &SHARED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_parse() {
        let text = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host replica e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922 [5461->-abc]
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 16000
";
        let nodes = parse_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert!(!nodes[0].master);
        assert_eq!(nodes[0].port, 30004);
        assert_eq!(
            nodes[0].master_id.as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert_eq!(nodes[1].slots, [(5461, 10922)]);
        assert!(nodes[2].master && nodes[2].serves(16000) && nodes[2].serves(0));
        assert!(!nodes[2].serves(5461));
    }
}
