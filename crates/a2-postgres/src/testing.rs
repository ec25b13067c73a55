//! Throwaway Postgres clusters for tests (feature `testing`), from
//! Debian's `postgresql` package.
//!
//! Each [`PostgresServer`] is a fresh cluster (`initdb`) in a temporary
//! directory, served by its own `postgres` process on a free loopback port,
//! so tests never touch a database someone else uses. When the test process
//! runs as root, the cluster and its server belong to the `postgres` user
//! the package creates (Postgres refuses to run as root).
//!
//! ```no_run
//! use a2_postgres::testing::PostgresServer;
//! let server = PostgresServer::start();
//! let url = server.url();
//! # let _ = url;
//! ```
//!
//! A server is stopped when its [`PostgresServer`] drops, and a watchdog
//! shell process kills it as soon as the test process is gone, so the
//! process-wide [`shared`] server and the servers of a test binary that
//! aborts do not outlive the tests.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// How long a started server gets to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// What to say when Postgres is not installed.
const MISSING: &str = "the Postgres tests start their own server from Debian's `postgresql` \
                       package (`apt-get install postgresql`); `scripts/test.sh` installs it";

/// TLS for a server: the certificate and key files (PEM) it serves.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The server's certificate chain.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// A `postgres` server process and its cluster, owned by a test.
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    bin: PathBuf,
    /// The user the cluster belongs to, when this process is root.
    owner: Option<(u32, u32)>,
    data: PathBuf,
    tls: Option<ServerTls>,
    child: Option<Child>,
    // Last: removed after the server stopped.
    dir: tempfile::TempDir,
}

impl PostgresServer {
    /// Starts a fresh cluster on a free loopback port, with durability
    /// traded for speed (`fsync=off`: a test's server dies with its data).
    ///
    /// # Panics
    /// When Postgres is not installed or does not start: tests that need it
    /// fail loudly rather than being skipped.
    pub fn start() -> Self {
        Self::try_start(None).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`PostgresServer::start`] with TLS on (`ssl=on`), serving `tls`'s
    /// certificate; plain connections are still accepted.
    ///
    /// # Panics
    /// As [`PostgresServer::start`].
    pub fn start_with_tls(tls: ServerTls) -> Self {
        Self::try_start(Some(tls)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server, returning an error instead of panicking.
    pub fn try_start(tls: Option<ServerTls>) -> io::Result<Self> {
        let bin = bin_dir()?;
        let owner = owner()?;
        let dir = tempfile::Builder::new()
            .prefix("a2-postgres-test-")
            .tempdir()?;
        let data = dir.path().join("data");
        give(dir.path(), owner)?;
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8"])
            .args(["--locale=C", "--no-sync"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        as_owner(&mut initdb, owner);
        let out = initdb.output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let tls = match tls {
            // The key must be the server user's, readable by it alone.
            Some(tls) => Some(ServerTls {
                cert: owned_copy(&tls.cert, dir.path(), "server.crt", owner)?,
                key: owned_copy(&tls.key, dir.path(), "server.key", owner)?,
            }),
            None => None,
        };
        let mut server = Self {
            port: 0,
            bin,
            owner,
            data,
            tls,
            child: None,
            dir,
        };
        let mut last = None;
        for _ in 0..5 {
            server.port = a2_core::testing::free_port()?;
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("postgres did not start")))
    }

    /// `postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable`.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// The URL of database `name` on this server, without TLS.
    pub fn url_for(&self, name: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{name}?sslmode=disable",
            self.port
        )
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id of the running server (the postmaster), if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server with SIGKILL and waits for it: a crash, with no
    /// checkpoint. Its backends notice and exit at once.
    pub fn kill(&mut self) {
        a2_core::testing::kill(&mut self.child);
    }

    /// Starts the server again on its data and port, after [`kill`]: it
    /// recovers from its write-ahead log as after a crash.
    ///
    /// [`kill`]: PostgresServer::kill
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.spawn()
    }

    fn spawn(&mut self) -> io::Result<()> {
        // A killed postmaster leaves its pid file: the new one checks that
        // the old process is gone, so it may stay.
        let mut command = Command::new(self.bin.join("postgres"));
        command
            .arg("-D")
            .arg(&self.data)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .args(["-c", "max_connections=200"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(tls) = &self.tls {
            command
                .args(["-c", "ssl=on"])
                .arg("-c")
                .arg(format!("ssl_cert_file={}", tls.cert.display()))
                .arg("-c")
                .arg(format!("ssl_key_file={}", tls.key.display()));
        }
        as_owner(&mut command, self.owner);
        let mut child = command.spawn()?;
        a2_core::testing::watch(child.id(), self.dir.path(), "a2-postgres-watchdog")?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if ready(&self.data) {
                self.child = Some(child);
                return Ok(());
            }
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "postgres exited with {status} (port {} taken?)",
                    self.port
                )));
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("postgres on port {} did not become ready", self.port),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The newest installed Postgres's programs (`/usr/lib/postgresql/{v}/bin`).
fn bin_dir() -> io::Result<PathBuf> {
    let missing = || {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("Postgres not found: {MISSING}"),
        )
    };
    let versions = std::fs::read_dir("/usr/lib/postgresql").map_err(|_| missing())?;
    let mut found: Vec<(u32, PathBuf)> = versions
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(missing)
}

/// The `postgres` user's uid and gid when this process is root (Postgres
/// refuses to run as root), `None` otherwise.
fn owner() -> io::Result<Option<(u32, u32)>> {
    let out = Command::new("id").arg("-u").output()?;
    if String::from_utf8_lossy(&out.stdout).trim() != "0" {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&"postgres") && fields.len() > 3)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
        .map(Some)
        .ok_or_else(|| {
            io::Error::other(format!(
                "running as root, and there is no `postgres` user to run the server as: {MISSING}"
            ))
        })
}

/// Runs `command` as `owner`, when set.
fn as_owner(command: &mut Command, owner: Option<(u32, u32)>) {
    if let Some((uid, gid)) = owner {
        command.uid(uid).gid(gid);
    }
}

/// Hands `path` to `owner`, when set.
fn give(path: &Path, owner: Option<(u32, u32)>) -> io::Result<()> {
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// A copy of `from` in `dir` named `name`, the owner's and readable by it
/// alone.
fn owned_copy(
    from: &Path,
    dir: &Path,
    name: &str,
    owner: Option<(u32, u32)>,
) -> io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let to = dir.join(name);
    std::fs::copy(from, &to)?;
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600))?;
    give(&to, owner)?;
    Ok(to)
}

/// Whether the server of cluster `data` accepts connections: its
/// `postmaster.pid` says `ready`.
fn ready(data: &Path) -> bool {
    std::fs::read_to_string(data.join("postmaster.pid"))
        .is_ok_and(|pid| pid.lines().any(|line| line.trim() == "ready"))
}

static SHARED: LazyLock<PostgresServer> = LazyLock::new(PostgresServer::start);

/// The server shared by every test of this test binary, started on first
/// use; killed by its watchdog when the test process exits.
///
/// # Panics
/// As [`PostgresServer::start`].
pub fn shared() -> &'static PostgresServer {
    &SHARED
}
