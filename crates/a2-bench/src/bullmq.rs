//! The BullMQ baseline: `npm install bullmq` into a temporary folder, then a
//! small node script (written there at run time) runs a no-op Worker over
//! the same Redis server, one round each time it is asked, so its rounds
//! take turns with the other subjects' in one process.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The BullMQ baseline's node process, ready for rounds (see [`Bullmq::start`]).
pub struct Bullmq {
    /// The installed BullMQ version.
    pub version: String,
    child: Child,
    /// Each line written asks for one round; dropping it ends the process.
    rounds: Option<ChildStdin>,
    replies: BufReader<ChildStdout>,
    /// Collects node's stderr (returned when it ends), forwarding progress.
    errors: Option<std::thread::JoinHandle<String>>,
    _dir: tempfile::TempDir,
}

const SCRIPT: &str = r#"
// Prints the BullMQ version, then runs one round per line read from stdin:
// adds JOBS no-op jobs (addBulk, 1 000 at a time) while a Worker with
// CONCURRENCY runs them, and prints the round's jobs/s when the last job has
// completed. Exits when stdin closes. One process for every round keeps
// node's compiled code warm, as in a long-lived worker.
const { Queue, Worker } = require('bullmq');
const readline = require('readline');
const version = require('./node_modules/bullmq/package.json').version;
const connection = { host: '127.0.0.1', port: Number(process.env.REDIS_PORT), maxRetriesPerRequest: null };
const jobs = Number(process.env.JOBS);
const concurrency = Number(process.env.CONCURRENCY);
let r = 0;
async function round() {
  const name = `a2bench-${process.pid}-${r}`;
  r += 1;
  const queue = new Queue(name, { connection });
  await queue.waitUntilReady();
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const worker = new Worker(name, async () => {}, { connection, concurrency });
  worker.on('completed', () => { done += 1; if (done === jobs) finish(); });
  worker.on('failed', (_job, err) => { console.error(`bullmq job failed: ${err}`); });
  worker.on('error', (err) => { console.error(`bullmq worker error: ${err}`); });
  await worker.waitUntilReady();
  const started = process.hrtime.bigint();
  for (let i = 0; i < jobs; i += 1000) {
    const chunk = [];
    for (let j = i; j < Math.min(jobs, i + 1000); j++) {
      chunk.push({ name: 'noop', data: { n: j }, opts: { removeOnComplete: true, removeOnFail: true } });
    }
    await queue.addBulk(chunk);
  }
  await finished;
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
  return jobs / seconds;
}
console.log(JSON.stringify({ version }));
const lines = readline.createInterface({ input: process.stdin });
let chain = Promise.resolve();
lines.on('line', () => {
  chain = chain.then(round).then(
    (rate) => console.log(JSON.stringify({ jobs_per_s: rate })),
    (err) => { console.error(`bullmq benchmark failed: ${err && err.stack || err}`); process.exit(1); });
});
lines.on('close', () => { chain.then(() => process.exit(0)); });
"#;

/// The `node --version`, or `None` when node is not on the PATH.
pub fn node_version() -> Option<String> {
    let out = Command::new("node").arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Bullmq {
    /// Installs BullMQ into a temporary folder and starts the node script
    /// that runs rounds of `jobs` jobs with a no-op Worker of `concurrency`
    /// on the server at `port`, one per [`Bullmq::round`]. Blocking; `Err`
    /// says why it could not start.
    pub fn start(port: u16, jobs: u64, concurrency: usize) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("a2-bench-bullmq")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary folder: {e}"))?;
        std::fs::write(dir.path().join("package.json"), r#"{"private": true}"#)
            .map_err(|e| format!("cannot write package.json: {e}"))?;
        std::fs::write(dir.path().join("bench.cjs"), SCRIPT)
            .map_err(|e| format!("cannot write bench.cjs: {e}"))?;

        let mut install = Command::new("npm");
        install
            // BullMQ 6 leaves its Redis client (ioredis) to the application.
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--no-progress",
                "--loglevel=error",
                "bullmq",
                "ioredis",
            ])
            .current_dir(dir.path());
        let (ok, output) = run_quiet(install, Duration::from_secs(300))?;
        if !ok {
            // npm puts the cause (`code`, `errno`, the URL) first.
            let head: Vec<&str> = output
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(3)
                .collect();
            return Err(format!(
                "`npm install bullmq ioredis` failed: {}",
                head.join(" | ")
            ));
        }

        let mut bench = Command::new("node");
        bench
            .arg("bench.cjs")
            .current_dir(dir.path())
            .env("REDIS_PORT", port.to_string())
            .env("JOBS", jobs.to_string())
            .env("CONCURRENCY", concurrency.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = bench.spawn().map_err(|e| format!("cannot run node: {e}"))?;
        // Errors are kept for a message; nothing else is printed on stderr.
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        let errors = std::thread::spawn(move || {
            BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<_>>()
                .join("\n")
        });
        let rounds = child.stdin.take().ok_or("no stdin pipe")?;
        let replies = BufReader::new(child.stdout.take().ok_or("no stdout pipe")?);
        let mut this = Self {
            version: String::new(),
            child,
            rounds: Some(rounds),
            replies,
            errors: Some(errors),
            _dir: dir,
        };
        #[derive(serde::Deserialize)]
        struct Ready {
            version: String,
        }
        let ready: Ready = this.reply()?;
        this.version = ready.version;
        Ok(this)
    }

    /// Runs one round; returns its jobs per second. Blocking.
    pub fn round(&mut self) -> Result<f64, String> {
        let asked = self
            .rounds
            .as_mut()
            .ok_or("the BullMQ script has ended")
            .and_then(|stdin| {
                stdin
                    .write_all(b"round\n")
                    .and_then(|()| stdin.flush())
                    .map_err(|_| "the BullMQ script has ended")
            });
        if let Err(e) = asked {
            return Err(self.failure(e));
        }
        #[derive(serde::Deserialize)]
        struct Round {
            jobs_per_s: f64,
        }
        let round: Round = self.reply()?;
        Ok(round.jobs_per_s)
    }

    /// The next JSON line the script prints, or why there is none.
    fn reply<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, String> {
        let mut line = String::new();
        match self.replies.read_line(&mut line) {
            Ok(n) if n > 0 => serde_json::from_str(line.trim())
                .map_err(|e| format!("unreadable BullMQ reply {:?}: {e}", line.trim())),
            _ => Err(self.failure("the BullMQ script ended early")),
        }
    }

    /// `what`, with the last lines the script printed on stderr once it has
    /// ended (it is stopped first).
    fn failure(&mut self, what: &str) -> String {
        self.rounds = None;
        let _ = self.child.kill();
        let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
        let errors = self
            .errors
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let said = last_lines(&errors, 3);
        if said.is_empty() {
            format!("{what} ({status})")
        } else {
            format!("{what} ({status}): {said}")
        }
    }
}

impl Drop for Bullmq {
    fn drop(&mut self) {
        // Closing stdin ends the script after the round under way; a script
        // that does not end in time is killed.
        self.rounds = None;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a command with its output captured (so it stays off the terminal),
/// killing it after `limit`. Returns success and the combined output.
fn run_quiet(mut cmd: Command, limit: Duration) -> Result<(bool, String), String> {
    let mut log = tempfile::tempfile().map_err(|e| format!("cannot create a log file: {e}"))?;
    let out = log.try_clone().map_err(|e| e.to_string())?;
    let err = log.try_clone().map_err(|e| e.to_string())?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{:?} did not finish within {} s",
                    cmd.get_program(),
                    limit.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(e.to_string()),
        }
    };
    let mut text = String::new();
    let _ = log.seek(SeekFrom::Start(0));
    let _ = log.read_to_string(&mut text);
    Ok((status.success(), text))
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}
