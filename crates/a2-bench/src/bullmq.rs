//! The BullMQ baseline: `npm install bullmq` into a temporary folder, then a
//! small node script (written there at run time) runs a no-op Worker over
//! the same Redis server.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the node script reports.
#[derive(Debug, serde::Deserialize)]
pub struct BullmqRun {
    /// The installed BullMQ version.
    pub version: String,
    /// Jobs per second of each round.
    pub rounds: Vec<f64>,
}

const SCRIPT: &str = r#"
// Adds JOBS no-op jobs (addBulk, 1 000 at a time) while a Worker with
// CONCURRENCY runs them; a round ends when the last job has completed.
const { Queue, Worker } = require('bullmq');
const version = require('./node_modules/bullmq/package.json').version;
const connection = { host: '127.0.0.1', port: Number(process.env.REDIS_PORT), maxRetriesPerRequest: null };
const jobs = Number(process.env.JOBS);
const concurrency = Number(process.env.CONCURRENCY);
const rounds = Number(process.env.ROUNDS);
async function main() {
const results = [];
for (let r = 0; r < rounds; r++) {
  const name = `a2bench-${process.pid}-${r}`;
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
  results.push(jobs / seconds);
  console.error(`  bullmq round ${r + 1}/${rounds}: ${Math.round(jobs / seconds)} jobs/s`);
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
}
console.log(JSON.stringify({ version, rounds: results }));
process.exit(0);
}
main().catch((err) => { console.error(`bullmq benchmark failed: ${err && err.stack || err}`); process.exit(1); });
"#;

/// The `node --version`, or `None` when node is not on the PATH.
pub fn node_version() -> Option<String> {
    let out = Command::new("node").arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Installs BullMQ into a temporary folder and runs `rounds` rounds of `jobs`
/// jobs with a no-op Worker of `concurrency`. Blocking; `Err` says why it
/// could not run.
pub fn run(port: u16, jobs: u64, concurrency: usize, rounds: usize) -> Result<BullmqRun, String> {
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
        .env("ROUNDS", rounds.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = bench.spawn().map_err(|e| format!("cannot run node: {e}"))?;
    // Progress lines go on to our stderr; the rest is kept for an error message.
    let stderr = child.stderr.take().ok_or("no stderr pipe")?;
    let forward = std::thread::spawn(move || {
        let mut kept = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.starts_with("  bullmq round") {
                eprintln!("{line}");
            } else {
                kept.push(line);
            }
        }
        kept.join("\n")
    });
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    let errors = forward.join().unwrap_or_default();
    if !status.success() {
        return Err(format!(
            "the BullMQ script failed ({status}): {}",
            last_lines(&errors, 3)
        ));
    }
    let line = stdout.lines().last().unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("unreadable BullMQ result {line:?}: {e}"))
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
