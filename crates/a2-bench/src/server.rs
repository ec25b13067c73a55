//! A throwaway `redis-server` for one benchmark run: a free loopback port, a
//! temporary directory, no persistence. Killed when dropped.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::BoxError;

/// A running `redis-server` owned by this process.
pub struct RedisServer {
    child: Child,
    port: u16,
    version: String,
    // Held so the directory outlives the server; removed on drop.
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts `bin` on a free loopback port and waits until it answers.
    ///
    /// The port comes from binding port 0 and releasing it, so another process
    /// may grab it in between: a start that fails is retried on a new port.
    pub fn start(bin: &Path) -> Result<Self, BoxError> {
        let dir = tempfile::Builder::new()
            .prefix("a2-bench-redis")
            .tempdir()?;
        let version = server_version(bin)?;
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let log: PathBuf = dir.path().join(format!("redis-{port}.log"));
            let mut child = Command::new(bin)
                .arg("--port")
                .arg(port.to_string())
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--daemonize", "no", "--databases", "1"])
                // Anything slower than 1 ms lands in SLOWLOG, for the profile notes.
                .args([
                    "--slowlog-log-slower-than",
                    "1000",
                    "--slowlog-max-len",
                    "1024",
                ])
                .arg("--dir")
                .arg(dir.path())
                .arg("--logfile")
                .arg(&log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(status) = child.try_wait()? {
                    last_error = format!(
                        "redis-server exited with {status}: {}",
                        std::fs::read_to_string(&log).unwrap_or_default().trim()
                    );
                    break;
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Ok(Self {
                        child,
                        port,
                        version,
                        _dir: dir,
                    });
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_error = "redis-server did not accept connections within 10 s".into();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Err(last_error.into())
    }

    /// `redis://127.0.0.1:{port}/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The `v=` of `redis-server --version`.
    pub fn version(&self) -> &str {
        &self.version
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn server_version(bin: &Path) -> Result<String, BoxError> {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .unwrap_or("unknown")
        .to_string())
}
