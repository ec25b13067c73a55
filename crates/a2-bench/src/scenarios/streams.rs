//! Durable Streams over HTTP: `a2 serve` (memory and SQLite) against two
//! servers built only for the protocol, each in a process of its own on
//! loopback, with the same client and load for all:
//! - the Rust `durable-streams-server` crate (0.3.0), in-memory and with
//!   its durable file storage, installed with `cargo install` into a cache
//!   folder;
//! - the Node reference server `@durable-streams/server` (0.3.7) from npm,
//!   in memory and with its data folder.
//!
//! Loads: JSON appends from 32 keep-alive clients (each on a stream of its
//! own), with the server's CPU time per append; 1 000 SSE followers of 100
//! streams with a writer appending 200 messages/s (append → delivery
//! latency); the server's resident memory per idle follower. The three
//! servers of a group (in memory; durable) run side by side and take each
//! load in turn, in slices, so that the machine's slow stretches fall on
//! all of them alike.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use crate::BoxError;
use crate::ctx::Ctx;
use crate::load::{Connection, path_of};
use crate::report::Report;
use crate::stats::Latencies;
use crate::wiring::Backend;

const S: &str = "serve: durable streams";
const RUST_CRATE: &str = "durable-streams-server";
const RUST_VERSION: &str = "0.3.0";
const NODE_PACKAGE: &str = "@durable-streams/server@0.3.7";

/// One server under test.
#[derive(Clone, Copy, Debug)]
enum Subject {
    A2(Backend),
    Rust { durable: bool },
    Node { durable: bool },
}

impl Subject {
    fn name(self) -> String {
        match self {
            Subject::A2(b) => format!("{} over HTTP", b.subject()),
            Subject::Rust { durable } => {
                format!("{RUST_CRATE} {}", if durable { "file" } else { "memory" })
            }
            Subject::Node { durable } => {
                format!(
                    "@durable-streams/server {}",
                    if durable { "file" } else { "memory" }
                )
            }
        }
    }
}

const SUBJECTS: [Subject; 6] = [
    Subject::A2(Backend::Memory),
    Subject::Rust { durable: false },
    Subject::Node { durable: false },
    Subject::A2(Backend::Sqlite),
    Subject::Rust { durable: true },
    Subject::Node { durable: true },
];

/// A server process and where it listens.
struct Running {
    child: tokio::process::Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Running {
    fn stream(&self, name: &str) -> String {
        format!("{}/v1/stream/{name}", self.base)
    }

    /// CPU seconds (user + system) the server process has used so far.
    fn cpu_seconds(&self) -> Option<f64> {
        crate::info::process_cpu_seconds_of(&self.child.id()?.to_string())
    }

    fn rss_kib(&self) -> Option<f64> {
        let pid = self.child.id()?;
        crate::info::rss_bytes_of(&pid.to_string()).map(|b| b as f64 / 1024.0)
    }
}

/// A free loopback port (bound, then released for the server to take).
fn free_port() -> Result<u16, BoxError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The cache folder of installed anchors.
fn cache() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(".cache")
        .join("a2-bench")
}

/// The Rust server's binary, `cargo install`ed once (a few minutes of
/// compiling, which the quick mode does not spend: it measures the Rust
/// server only when an earlier run installed it).
fn rust_binary(quick: bool) -> Result<PathBuf, BoxError> {
    let root = cache().join(format!("{RUST_CRATE}-{RUST_VERSION}"));
    let binary = root.join("bin").join(RUST_CRATE);
    if binary.exists() {
        return Ok(binary);
    }
    if quick {
        return Err(format!(
            "not installed; the quick mode does not compile it (a full run installs it into {})",
            root.display()
        )
        .into());
    }
    eprintln!("[streams] cargo install {RUST_CRATE} {RUST_VERSION} (once)");
    let status = std::process::Command::new("cargo")
        .args([
            "install",
            "--quiet",
            "--locked",
            RUST_CRATE,
            "--version",
            RUST_VERSION,
            "--root",
        ])
        .arg(&root)
        .status()?;
    if !status.success() || !binary.exists() {
        return Err(format!("cargo install {RUST_CRATE} failed").into());
    }
    Ok(binary)
}

const NODE_SERVER: &str = r#"
const { DurableStreamTestServer } = require('@durable-streams/server');
const server = new DurableStreamTestServer({ port: 0, host: '127.0.0.1', dataDir: process.env.DATA_DIR || undefined });
server.start().then((url) => console.log('listening ' + url));
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
"#;

/// The Node server's folder, `npm install`ed once.
fn node_folder() -> Result<PathBuf, BoxError> {
    let dir = cache().join(NODE_PACKAGE.replace(['@', '/'], "_"));
    if dir.join(".complete").exists() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("package.json"), r#"{"private": true}"#)?;
    eprintln!("[streams] npm install {NODE_PACKAGE} (once)");
    let status = std::process::Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            NODE_PACKAGE,
        ])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        return Err(format!("npm install {NODE_PACKAGE} failed").into());
    }
    std::fs::write(dir.join("server.cjs"), NODE_SERVER)?;
    std::fs::write(dir.join(".complete"), b"")?;
    Ok(dir)
}

async fn start(ctx: &Ctx, subject: Subject, round: usize) -> Result<Running, BoxError> {
    let dir = tempfile::tempdir()?;
    let mut command = match subject {
        Subject::A2(backend) => {
            let mut c = tokio::process::Command::new(std::env::current_exe()?);
            c.args(["--serve-child", backend.name(), "--serve-db"])
                .arg(ctx.sqlite_path(&format!("streams{round}")));
            c
        }
        Subject::Rust { durable } => {
            let mut c = tokio::process::Command::new(rust_binary(ctx.quick)?);
            let port = free_port()?;
            c.env("DS_SERVER__BIND_ADDRESS", format!("127.0.0.1:{port}"))
                .env("DS_STORAGE__MODE", if durable { "file" } else { "memory" })
                .env("DS_STORAGE__DATA_DIR", dir.path())
                .env("DS_LOG__RUST_LOG", "error");
            let base = format!("http://127.0.0.1:{port}");
            let child = c
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()?;
            let running = Running {
                child,
                base,
                _dir: dir,
            };
            ready(&format!("{}/healthz", running.base)).await?;
            return Ok(running);
        }
        Subject::Node { durable } => {
            let folder = node_folder()?;
            let mut c = tokio::process::Command::new("node");
            c.arg(folder.join("server.cjs")).current_dir(&folder);
            if durable {
                c.env("DATA_DIR", dir.path());
            }
            c
        }
    };
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    // The line that says where it listens; a server may log before it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let line = loop {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .map_err(|_| "the server did not start within 30 s")??
            .ok_or("the server exited before listening")?;
        if line.starts_with("listening ") {
            break line;
        }
    };
    // Later output is not read: it goes nowhere rather than filling a pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let addr = line.strip_prefix("listening ").unwrap_or_default();
    let base = if addr.starts_with("http") {
        addr.trim_end_matches('/').to_owned()
    } else {
        format!("http://{addr}")
    };
    Ok(Running {
        child,
        base,
        _dir: dir,
    })
}

/// Waits (10 s at most) until `url` answers 200.
async fn ready(url: &str) -> Result<(), BoxError> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = client.get(url).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{url} never answered").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn create(client: &reqwest::Client, url: &str) -> Result<(), BoxError> {
    let r = client
        .put(url)
        .header("content-type", "application/json")
        .send()
        .await?;
    if !r.status().is_success() {
        return Err(format!("PUT {url} answered {}", r.status()).into());
    }
    Ok(())
}

/// The servers of one group (memory or file) run side by side, and each
/// case is cut into slices that the servers take in turn: a slow stretch
/// of this machine (its neighbours' load moves a server's rate by half
/// between two windows) then falls on every server alike instead of on
/// whichever had its turn.
const APPEND_SLICES: usize = 3;
/// Slices of the followers case (2 000 appends at 200/s: 2.5 s each).
const FOLLOW_SLICES: usize = 4;

/// What the appends case measured of one server, summed over its slices.
struct Appends {
    /// Appends answered.
    done: usize,
    /// Time spent answering them.
    elapsed: Duration,
    /// The server's CPU time (user + system, all its threads) over the
    /// same time, in seconds; `None` when /proc did not tell it.
    cpu: Option<f64>,
}

impl Appends {
    fn new() -> Self {
        Self {
            done: 0,
            elapsed: Duration::ZERO,
            cpu: Some(0.0),
        }
    }

    fn rate(&self) -> f64 {
        self.done as f64 / self.elapsed.as_secs_f64()
    }

    /// The server's CPU time per append, in µs.
    fn cpu_us(&self) -> Option<f64> {
        (self.done > 0).then(|| self.cpu.map(|s| s * 1e6 / self.done as f64))?
    }
}

/// One slice of the appends case: 32 keep-alive clients, each on a stream
/// of its own (created by `create_append_streams`) and a connection of its
/// own (`load`), append for `window` after a warm-up of 10 appends per
/// client (connections open, caches warm); adds the appends and the
/// server's CPU time to `tally`.
/// A fixed count measured too briefly: 12 800 appends took a fifth of a
/// second, and rounds of one server varied by a third.
async fn append_slice(
    server: &Running,
    window: Duration,
    tally: &mut Appends,
) -> Result<(), BoxError> {
    const WARM_UP: usize = 10;
    let barrier = Arc::new(tokio::sync::Barrier::new(APPEND_CLIENTS + 1));
    let tasks: Vec<_> = (0..APPEND_CLIENTS)
        .map(|t| {
            let base = server.base.clone();
            let url = server.stream(&format!("append-{t}"));
            let barrier = barrier.clone();
            tokio::spawn(async move {
                let mut connection = Connection::open(&base).await?;
                let path = path_of(&url);
                let mut post = async |i: usize| {
                    let body = json!([{ "n": i, "text": "a token of an agent's reply" }]);
                    let status = connection
                        .post(path, "application/json", body.to_string())
                        .await?;
                    if !status.is_success() {
                        return Err::<(), BoxError>(format!("POST answered {status}").into());
                    }
                    Ok(())
                };
                for i in 0..WARM_UP {
                    post(i).await?;
                }
                barrier.wait().await;
                let until = Instant::now() + window;
                let mut done = 0;
                while Instant::now() < until {
                    post(WARM_UP + done).await?;
                    done += 1;
                }
                Ok::<usize, BoxError>(done)
            })
        })
        .collect();
    let cpu_before = server.cpu_seconds();
    barrier.wait().await;
    let started = Instant::now();
    for task in tasks {
        tally.done += task.await??;
    }
    tally.elapsed += started.elapsed();
    tally.cpu = match (tally.cpu, cpu_before, server.cpu_seconds()) {
        (Some(sum), Some(b), Some(a)) => Some(sum + (a - b)),
        _ => None,
    };
    Ok(())
}

/// Clients of the appends case.
const APPEND_CLIENTS: usize = 32;

async fn create_append_streams(server: &Running) -> Result<(), BoxError> {
    let client = reqwest::Client::new();
    for t in 0..APPEND_CLIENTS {
        create(&client, &server.stream(&format!("append-{t}"))).await?;
    }
    Ok(())
}

/// The SSE followers of one server and the writer that feeds them.
struct Followers {
    streams: usize,
    /// Followers of each stream.
    per_stream: usize,
    tasks: Vec<tokio::task::JoinHandle<Result<(), BoxError>>>,
    /// Append → delivery latencies, as the followers see them.
    delivered: mpsc::UnboundedReceiver<Duration>,
    samples: Vec<Duration>,
    /// The writer's clock, which the followers read too.
    epoch: Instant,
    writer: Connection,
    /// Appends written so far (the next one goes to stream `written % streams`).
    written: usize,
    /// Growth of the server's resident memory per connected idle follower.
    kib: Option<f64>,
}

/// An item the writer appended: its send time.
#[derive(serde::Deserialize)]
struct Sent {
    t: Option<u64>,
}

/// The send times in one SSE message, when it is a data event: its `data:`
/// lines joined, as a JSON array of appended items.
fn send_times(message: &[u8]) -> Vec<u64> {
    let is_data = message
        .split(|&b| b == b'\n')
        .any(|line| line == b"event: data" || line == b"event:data");
    if !is_data {
        return Vec::new();
    }
    let mut data = Vec::new();
    for line in message.split(|&b| b == b'\n') {
        if let Some(rest) = line.strip_prefix(b"data:") {
            data.extend_from_slice(rest.trim_ascii_start());
        }
    }
    serde_json::from_slice::<Vec<Sent>>(&data)
        .map(|items| items.into_iter().filter_map(|i| i.t).collect())
        .unwrap_or_default()
}

/// Follows `path` on its own connection to `base` (the clients of the
/// Durable Streams servers: hyper's connection API, no pool, the stream
/// parsed in place), sending each data item's delivery latency to `tx`.
async fn follow(
    base: String,
    path: String,
    epoch: Instant,
    tx: mpsc::UnboundedSender<Duration>,
    connected: mpsc::UnboundedSender<()>,
) -> Result<(), BoxError> {
    let mut connection = Connection::open(&base).await?;
    let mut body = connection.get_stream(&path).await?;
    let _ = connected.send(());
    let mut buffer: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(chunk) = frame?.into_data() else {
            continue;
        };
        buffer.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(end) = buffer[start..].windows(2).position(|w| w == b"\n\n") {
            for sent in send_times(&buffer[start..start + end]) {
                let _ = tx.send(epoch.elapsed().saturating_sub(Duration::from_nanos(sent)));
            }
            start += end + 2;
        }
        buffer.drain(..start);
    }
    Ok(())
}

/// Connects 1 000 SSE followers (100 in quick mode) to 100 new streams of
/// `server` (10), waits until all are connected and measures the server's
/// memory per idle follower.
async fn connect_followers(server: &Running, quick: bool) -> Result<Followers, BoxError> {
    let (followers, streams) = if quick { (100, 10) } else { (1_000, 100) };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    for s in 0..streams {
        create(&client, &server.stream(&format!("follow-{s}"))).await?;
    }
    let epoch = Instant::now();
    let rss_before = server.rss_kib();
    let (tx, delivered) = mpsc::unbounded_channel::<Duration>();
    let (connected_tx, mut connected) = mpsc::unbounded_channel::<()>();
    let mut tasks = Vec::with_capacity(followers);
    for f in 0..followers {
        let url = format!(
            "{}?offset=now&live=sse",
            server.stream(&format!("follow-{}", f % streams))
        );
        tasks.push(tokio::spawn(follow(
            server.base.clone(),
            path_of(&url).to_owned(),
            epoch,
            tx.clone(),
            connected_tx.clone(),
        )));
    }
    for _ in 0..followers {
        tokio::time::timeout(Duration::from_secs(60), connected.recv())
            .await
            .map_err(|_| "the followers did not connect")?;
    }
    // The last connections settle in the server.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let kib = match (rss_before, server.rss_kib()) {
        (Some(b), Some(a)) => Some((a - b).max(0.0) / followers as f64),
        _ => None,
    };
    Ok(Followers {
        streams,
        per_stream: followers / streams,
        tasks,
        delivered,
        samples: Vec::new(),
        epoch,
        writer: Connection::open(&server.base).await?,
        written: 0,
        kib,
    })
}

impl Followers {
    /// Writes `writes` appends at 200/s round robin over the streams and
    /// waits (30 s at most) until every follower has received them.
    async fn slice(&mut self, server: &Running, writes: usize) -> Result<(), BoxError> {
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        for _ in 0..writes {
            tick.tick().await;
            let url = server.stream(&format!("follow-{}", self.written % self.streams));
            let t = self.epoch.elapsed().as_nanos() as u64;
            let status = self
                .writer
                .post(
                    path_of(&url),
                    "application/json",
                    json!({ "t": t }).to_string(),
                )
                .await?;
            if !status.is_success() {
                return Err(format!("POST answered {status}").into());
            }
            self.written += 1;
        }
        let want = self.written * self.per_stream;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.samples.len() < want {
            match tokio::time::timeout_at(deadline, self.delivered.recv()).await {
                Ok(Some(d)) => self.samples.push(d),
                _ => {
                    return Err(
                        format!("{} of {want} deliveries arrived", self.samples.len()).into(),
                    );
                }
            }
        }
        Ok(())
    }
}

impl Drop for Followers {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// One server of a group and what was measured of it.
struct Measured {
    name: String,
    server: Running,
    appends: Result<Appends, String>,
    followers: Result<Followers, String>,
}

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    let quick = ctx.quick;
    let (followers_n, streams_n) = if quick { (100, 10) } else { (1_000, 100) };
    let writes = if quick { 200 } else { 2_000 };
    let window = Duration::from_millis(if quick { 200 } else { 1_000 });
    let append_case = "JSON appends from 32 keep-alive clients";
    let follow_case = format!("{followers_n} SSE followers of {streams_n} streams, 200 appends/s");
    for round in 0..ctx.sizes.heavy_rounds {
        eprintln!("[streams] round {}/{}", round + 1, ctx.sizes.heavy_rounds);
        for group in [&SUBJECTS[..3], &SUBJECTS[3..]] {
            // Every other round takes the servers in the opposite order.
            let mut order: Vec<Subject> = group
                .iter()
                .copied()
                .filter(|s| ctx.wants(&s.name()))
                .collect();
            if round % 2 == 1 {
                order.reverse();
            }
            let mut measured = Vec::new();
            for subject in order {
                let name = subject.name();
                let server = match start(ctx, subject, round).await {
                    Ok(server) => server,
                    Err(e) => {
                        eprintln!("  {name:<36} cannot start: {e}");
                        report.missing(S, append_case, &name, "events/s", &e.to_string());
                        report.missing(S, &follow_case, &name, "delivery p99 ms", &e.to_string());
                        continue;
                    }
                };
                let appends = create_append_streams(&server)
                    .await
                    .map(|()| Appends::new())
                    .map_err(|e| e.to_string());
                measured.push(Measured {
                    name,
                    server,
                    appends,
                    followers: Err(String::new()),
                });
            }
            for _ in 0..APPEND_SLICES {
                for m in &mut measured {
                    if let Ok(tally) = &mut m.appends
                        && let Err(e) = append_slice(&m.server, window, tally).await
                    {
                        m.appends = Err(e.to_string());
                    }
                }
            }
            for m in &mut measured {
                let name = &m.name;
                match &m.appends {
                    Ok(tally) => {
                        let rate = tally.rate();
                        report.round(S, append_case, name, "events/s", rate);
                        if let Some(us) = tally.cpu_us() {
                            report.round(S, append_case, name, "server CPU us/append", us);
                        }
                        eprintln!(
                            "  {name:<36} {append_case}: {rate:.0} events/s, {:.1} us of server CPU each",
                            tally.cpu_us().unwrap_or(f64::NAN)
                        );
                    }
                    Err(e) => report.missing(S, append_case, name, "events/s", e),
                }
                // The followers of the servers measured before stay
                // connected and idle; the servers' SSE connections last a
                // minute, which the group's follow time stays under.
                m.followers = connect_followers(&m.server, quick)
                    .await
                    .map_err(|e| e.to_string());
            }
            for slice in 0..FOLLOW_SLICES {
                let writes = writes / FOLLOW_SLICES + usize::from(slice < writes % FOLLOW_SLICES);
                for m in &mut measured {
                    if let Ok(followers) = &mut m.followers
                        && let Err(e) = followers.slice(&m.server, writes).await
                    {
                        m.followers = Err(e.to_string());
                    }
                }
            }
            for m in measured {
                let name = &m.name;
                let followers = match m.followers {
                    Ok(followers) => followers,
                    Err(e) => {
                        report.missing(S, &follow_case, name, "delivery p99 ms", &e);
                        continue;
                    }
                };
                let Some(l) = Latencies::of(&followers.samples) else {
                    report.missing(S, &follow_case, name, "delivery p99 ms", "no deliveries");
                    continue;
                };
                report.round(S, &follow_case, name, "delivery p50 ms", l.p50);
                report.round(S, &follow_case, name, "delivery p99 ms", l.p99);
                if let Some(kib) = followers.kib {
                    report.round(S, &follow_case, name, "server KiB per idle follower", kib);
                }
                eprintln!(
                    "  {name:<36} {follow_case}: p50 {:.2} ms, p99 {:.2} ms, {:.1} KiB per follower",
                    l.p50,
                    l.p99,
                    followers.kib.unwrap_or(f64::NAN)
                );
            }
        }
    }
    report.note(
        "serve: durable streams: each server in a process of its own on loopback: a2 serve's router \
         (a2-bench --serve-child, memory or SQLite with synchronous = FULL), the Rust \
         durable-streams-server 0.3.0 (cargo install; DS_STORAGE__MODE memory or file), the Node \
         @durable-streams/server 0.3.7 (npm; in memory or with a data folder). The three servers \
         of a group (memory, file) run side by side and take each case in turn, in slices \
         (appends 3 × 1 s, followers 4 × 2.5 s), in the opposite order every other round. The \
         same clients and load for all: 32 keep-alive connections (hyper's connection API, no \
         pool) POSTing one-message JSON arrays to a stream each, with the server's CPU time (all \
         its threads, /proc) per append; 1 000 SSE followers (hyper, a connection each, offset=now) \
         of 100 JSON streams and a writer (hyper, one connection) POSTing 200 messages/s round robin, 2 000 in all (delivery = \
         follower's receipt − the writer's send time); memory = growth of the server's VmRSS per \
         connected idle follower",
    );
}
