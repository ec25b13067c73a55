//! Node.js programs for tests: npm packages installed once per machine into
//! a cache folder, and the third-party `@humanwhocodes/upstash-redis-server`
//! (an Upstash-protocol emulator with no subscriptions and no base64) in
//! front of a `redis-server`.
//!
//! Tests that need Node call [`node_available`]: without `node` on `PATH`
//! they fail when the `CI` variable is set, and otherwise print why they
//! are skipped.

use std::io;
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The official client, for checking a gateway's faithfulness.
pub const UPSTASH_CLIENT: &str = "@upstash/redis@1.39.0";
/// The third-party emulator.
pub const EMULATOR: &str = "@humanwhocodes/upstash-redis-server@1.0.0";

/// Whether `node` and `npm` run. Without them: panics when `CI` is set (a
/// test must never pass by skipping there), else prints that `test` is
/// skipped and returns false.
pub fn node_available(test: &str) -> bool {
    let runs = |program: &str| {
        Command::new(program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if runs("node") && runs("npm") {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "{test} needs `node` and `npm` on PATH (install Node.js, e.g. `apt-get install nodejs npm`)"
        );
    }
    eprintln!("SKIPPED {test}: `node` or `npm` is not on PATH (this fails when CI is set)");
    false
}

/// Installs `packages` with npm into a cache folder (once; later calls reuse
/// it) and returns the folder holding `node_modules`.
///
/// # Panics
/// When npm fails (the message holds npm's first lines).
pub fn npm_install(packages: &[&str]) -> PathBuf {
    let name: String = packages
        .join("+")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let root = std::env::temp_dir().join("a2-npm-cache");
    let dir = root.join(name);
    if dir.join("node_modules").join(".a2-complete").exists() {
        return dir;
    }
    std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("cannot create {root:?}: {e}"));
    // Install into a folder of our own, then move it in place: test
    // binaries running at once never see a half-installed folder.
    let staging = tempfile::Builder::new()
        .prefix("install-")
        .tempdir_in(&root)
        .unwrap_or_else(|e| panic!("cannot create a folder in {root:?}: {e}"));
    std::fs::write(staging.path().join("package.json"), r#"{"private": true}"#)
        .unwrap_or_else(|e| panic!("cannot write package.json: {e}"));
    let output = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--no-progress",
            "--loglevel=error",
        ])
        .args(packages)
        .current_dir(staging.path())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run npm: {e}"));
    if !output.status.success() {
        let text = String::from_utf8_lossy(&output.stderr);
        let head: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .take(5)
            .collect();
        panic!(
            "`npm install {}` failed: {}",
            packages.join(" "),
            head.join(" | ")
        );
    }
    std::fs::write(
        staging.path().join("node_modules").join(".a2-complete"),
        b"",
    )
    .unwrap_or_else(|e| panic!("cannot mark the install complete: {e}"));
    let staged = staging.keep();
    if std::fs::rename(&staged, &dir).is_err() {
        // Another process won the race; its folder is as good.
        let _ = std::fs::remove_dir_all(&staged);
    }
    dir
}

/// `@humanwhocodes/upstash-redis-server` running under node; killed when
/// dropped.
#[derive(Debug)]
pub struct EmulatorServer {
    port: u16,
    token: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl EmulatorServer {
    /// Installs the emulator (cached) and starts it on a free port in front
    /// of `redis_url`.
    ///
    /// # Panics
    /// When it does not install or start.
    pub fn start(redis_url: &str) -> Self {
        let modules = npm_install(&[EMULATOR]);
        let script =
            modules.join("node_modules/@humanwhocodes/upstash-redis-server/dist/server.js");
        let token = "a2-emulator-token".to_owned();
        let mut last = None;
        for _ in 0..5 {
            match Self::spawn(&script, redis_url, &token) {
                Ok(server) => return server,
                Err(e) => last = Some(e),
            }
        }
        panic!("the Upstash emulator did not start: {last:?}");
    }

    fn spawn(script: &Path, redis_url: &str, token: &str) -> io::Result<Self> {
        let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let dir = tempfile::Builder::new().prefix("a2-emulator-").tempdir()?;
        let mut child = Command::new("node")
            .arg(script)
            .env("URS_TOKEN", token)
            .env("PORT", port.to_string())
            .env("REDIS_URL", redis_url)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        a2_core::testing::watch(child.id(), dir.path(), "a2-redis-watchdog")?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
                return Ok(Self {
                    port,
                    token: token.to_owned(),
                    child,
                    _dir: dir,
                });
            }
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "the emulator exited with {status}"
                )));
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the emulator did not listen",
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `http://:{token}@127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("http://:{}@127.0.0.1:{}", self.token, self.port)
    }
}

impl Drop for EmulatorServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
