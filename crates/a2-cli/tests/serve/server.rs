//! `a2 serve` in a process of its own on a free loopback port, in a
//! temporary folder; killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const A2: &str = env!("CARGO_BIN_EXE_a2");

pub struct Server {
    pub base: String,
    child: Option<Child>,
    stderr: mpsc::Receiver<String>,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// `a2 serve --listen 127.0.0.1:0 ARGS` in a fresh temporary folder.
    pub fn start(args: &[&str]) -> Self {
        Self::start_with(args, &[])
    }

    /// As [`Server::start`], with environment variables.
    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let mut command = Command::new(A2);
        command
            .arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("A2_TOKENS")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("a2 serve starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        let addr = loop {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix("a2 serve: listening on http://") {
                        break rest.split_whitespace().next().unwrap().to_owned();
                    }
                    seen.push(line);
                }
                Err(_) => {
                    let _ = child.kill();
                    panic!("a2 serve did not start:\n{}", seen.join("\n"));
                }
            }
        };
        Self {
            base: format!("http://{addr}"),
            child: Some(child),
            stderr: rx,
            dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("a2.db")
    }

    /// Sends SIGTERM and waits (up to `timeout`) for the process to exit;
    /// returns whether it exited successfully and what it printed after
    /// starting.
    pub fn terminate(&mut self, timeout: Duration) -> (bool, String) {
        let mut child = self.child.take().expect("still running");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = std::time::Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("a2 serve did not stop within {timeout:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut text = Vec::new();
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_millis(200)) {
            text.push(line);
        }
        (status.success(), text.join("\n"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `a2 serve ARGS` that must refuse to start: returns its stderr.
pub fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(A2);
    command
        .arg("serve")
        .args(args)
        .env_remove("A2_TOKENS")
        .current_dir(dir.path());
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().expect("a2 runs");
    assert!(
        !output.status.success(),
        "a2 serve {args:?} should have refused to start"
    );
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "a refused start wrote nothing"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// POSTs `body` as JSON; the status and the JSON answer.
pub async fn post(
    client: &reqwest::Client,
    url: String,
    body: serde_json::Value,
) -> (reqwest::StatusCode, serde_json::Value) {
    let response = client.post(url).json(&body).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

/// GETs `url`; the status and the JSON answer.
pub async fn get(
    client: &reqwest::Client,
    url: String,
) -> (reqwest::StatusCode, serde_json::Value) {
    let response = client.get(url).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

/// The ids of a JSON array of events.
pub fn ids(events: &serde_json::Value) -> Vec<&str> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect()
}
