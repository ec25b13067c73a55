//! Cancels reaching running handlers (RT17, CN5): the time from a cancel
//! made through one store instance to the signal of the handler running
//! the event in a worker on another instance. Redis and memory run the
//! worker in this process on its own store instance (memory: the same
//! store, its only instance); SQLite runs it in a process of its own
//! (`a2-bench --cancel-child`), so the cancel crosses processes as it
//! does between `a2 cancel` and `a2 worker`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use a2::runtime::App;
use a2::{NewEvent, Store};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use crate::BoxError;
use crate::ctx::Ctx;
use crate::report::Report;
use crate::stats::Latencies;
use crate::wiring::Backend;

const S: &str = "cancel";
const CASE: &str = "cancel → the running handler's signal";
/// The stores: Redis first (its row is the target).
const SUBJECTS: [Backend; 3] = [Backend::Redis, Backend::Memory, Backend::Sqlite];

fn samples(ctx: &Ctx, backend: Backend) -> usize {
    match (ctx.quick, backend) {
        (true, _) => 10,
        (false, Backend::Sqlite) => 60,
        (false, _) => 200,
    }
}

pub async fn run(ctx: &mut Ctx, report: &mut Report) {
    // A quick run (the test suite's) measures one round.
    let rounds = if ctx.quick { 1 } else { ctx.sizes.heavy_rounds };
    for round in 0..rounds {
        eprintln!("[cancel] round {}/{rounds}", round + 1);
        for backend in SUBJECTS {
            let subject = backend.subject();
            if !ctx.wants(&subject) {
                continue;
            }
            let n = samples(ctx, backend);
            let measured = match backend {
                Backend::Sqlite => across_processes(ctx, round, n).await,
                _ => in_process(ctx, backend, round, n).await,
            };
            match measured {
                Ok(samples) => {
                    let Some(l) = Latencies::of(&samples) else {
                        continue;
                    };
                    eprintln!(
                        "  {subject:<18} p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms",
                        l.p50, l.p99, l.max
                    );
                    report.round(S, CASE, &subject, "p50 ms", l.p50);
                    report.round(S, CASE, &subject, "p99 ms", l.p99);
                }
                Err(e) => {
                    eprintln!("  {subject}: {e}");
                    report.missing(S, CASE, &subject, "p99 ms", &format!("failed: {e}"));
                }
            }
        }
    }
    report.note(
        "cancel: a worker (a2 runtime App, default options) runs handlers that wait for their \
         context's cancellation signal; the bench appends an event through another store \
         instance, waits until its handler runs, cancels it through that other instance and \
         takes the time until the handler's signal fires; Redis and memory run the worker in \
         this process (memory on the same store), SQLite in a child process on the same file \
         (its cancels cross processes through the `cancels` table and the poller); \
         p50/p99 over the samples of a round, medians of the rounds"
            .to_owned(),
    );
}

/// The worker on `worker`: each handler says it started, then waits for
/// its signal and says when it fired.
fn worker_app(
    worker: Arc<dyn Store>,
    started: mpsc::UnboundedSender<u64>,
    fired: mpsc::UnboundedSender<(u64, Instant)>,
) -> Result<App, BoxError> {
    Ok(App::builder(worker)
        .handler("work", move |ctx, _: Value| {
            let (started, fired) = (started.clone(), fired.clone());
            async move {
                let _ = started.send(ctx.index());
                ctx.cancelled().await;
                let _ = fired.send((ctx.index(), Instant::now()));
                Ok(Vec::<NewEvent>::new())
            }
        })
        .build()?)
}

async fn in_process(
    ctx: &mut Ctx,
    backend: Backend,
    round: usize,
    n: usize,
) -> Result<Vec<Duration>, BoxError> {
    let name = format!("cancel-{}-{round}", backend.name().replace(' ', "-"));
    let (canceller, worker) = ctx.open_pair(backend, &name).await?;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (fired_tx, mut fired) = mpsc::unbounded_channel();
    let app = worker_app(worker.clone(), started_tx, fired_tx)?;
    let loop_app = app.clone();
    let worker_loop = tokio::spawn(async move { loop_app.run_worker().await });
    // Cancels are heard once the app is ready (RT17); the worker loop's
    // wake-ups are live before its first listing, which finds what it
    // missed (RT2).
    app.ready().await;
    let mut samples = Vec::with_capacity(n);
    let result = async {
        for _ in 0..n {
            let out = canceller
                .append("chat", vec![NewEvent::new("work", json!({}))])
                .await?;
            let index = out.events[0].event.index;
            wait_for(&mut started, index, "the handler's start").await?;
            let t0 = Instant::now();
            let outcome = canceller.cancel("chat", index, None).await?;
            if !outcome.is_cancelled() {
                return Err(format!("event {index} was not cancelled: {outcome:?}").into());
            }
            let at = wait_for(&mut fired, index, "the signal").await?;
            samples.push(at.duration_since(t0));
        }
        Ok::<_, BoxError>(())
    }
    .await;
    app.shutdown(Duration::from_secs(5)).await;
    worker_loop.abort();
    canceller.close().await;
    worker.close().await;
    result.map(|()| samples)
}

/// The next message of `rx` about `index` (earlier indexes' late ones are
/// dropped), within 10 s.
async fn wait_for<T>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    index: u64,
    what: &str,
) -> Result<T::Out, BoxError>
where
    T: Indexed + Send,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(item)) if item.index() == index => return Ok(item.out()),
            Ok(Some(_)) => continue,
            Ok(None) => return Err(format!("the worker stopped before {what}").into()),
            Err(_) => {
                return Err(format!("{what} did not come within 10 s for event {index}").into());
            }
        }
    }
}

/// A worker's message about an event.
trait Indexed {
    type Out;
    fn index(&self) -> u64;
    fn out(self) -> Self::Out;
}

impl Indexed for u64 {
    type Out = ();
    fn index(&self) -> u64 {
        *self
    }
    fn out(self) {}
}

impl Indexed for (u64, Instant) {
    type Out = Instant;
    fn index(&self) -> u64 {
        self.0
    }
    fn out(self) -> Instant {
        self.1
    }
}

/// Microseconds since the epoch: a clock both processes read alike.
fn micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// SQLite: the worker is a child process on the same file; it reports
/// through stdout when each handler started and when its signal fired (in
/// microseconds since the epoch, the clock both processes share).
async fn across_processes(
    ctx: &mut Ctx,
    round: usize,
    n: usize,
) -> Result<Vec<Duration>, BoxError> {
    let db = ctx.sqlite_path(&format!("cancel-sqlite-{round}"));
    let canceller: Arc<dyn Store> = Arc::new(a2::sqlite::SqliteStore::open(
        &db,
        a2::sqlite::SqliteOptions::default(),
    )?);
    let exe = std::env::current_exe()?;
    let mut child = tokio::process::Command::new(exe)
        .arg("--cancel-child")
        .arg(&db)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut samples = Vec::with_capacity(n);
    let mut next = async |what: &str, index: u64| -> Result<i64, BoxError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let line = tokio::time::timeout_at(deadline, lines.next_line())
                .await
                .map_err(|_| format!("{what} did not come within 10 s for event {index}"))??
                .ok_or("the worker process exited")?;
            let mut parts = line.split_whitespace();
            let (kind, i, at) = (parts.next(), parts.next(), parts.next());
            if kind == Some(what) && i == Some(&index.to_string()) {
                return Ok(at.and_then(|a| a.parse().ok()).unwrap_or(0));
            }
        }
    };
    for _ in 0..n {
        let out = canceller
            .append("chat", vec![NewEvent::new("work", json!({}))])
            .await?;
        let index = out.events[0].event.index;
        next("started", index).await?;
        let t0 = micros();
        let outcome = canceller.cancel("chat", index, None).await?;
        if !outcome.is_cancelled() {
            return Err(format!("event {index} was not cancelled: {outcome:?}").into());
        }
        let fired = next("fired", index).await?;
        samples.push(Duration::from_micros((fired - t0).max(0) as u64));
    }
    drop(child);
    canceller.close().await;
    Ok(samples)
}

/// The child's side (`a2-bench --cancel-child DB`): a worker on the SQLite
/// file `db` whose handlers print `started INDEX` when they start and
/// `fired INDEX MICROS` when their cancellation signal fires, until stdin
/// closes. It polls for pending sessions every 5 ms (SQLite pushes no
/// wake-ups across processes, PS2).
pub async fn child(db: &std::path::Path) -> Result<(), BoxError> {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    let store: Arc<dyn Store> = Arc::new(a2::sqlite::SqliteStore::open(
        db,
        a2::sqlite::SqliteOptions::default(),
    )?);
    let app = App::builder(store.clone())
        .poll_interval(Duration::from_millis(5))
        .handler("work", |ctx, _: Value| async move {
            println!("started {}", ctx.index());
            let _ = std::io::stdout().flush();
            ctx.cancelled().await;
            println!("fired {} {}", ctx.index(), micros());
            let _ = std::io::stdout().flush();
            Ok(Vec::<NewEvent>::new())
        })
        .build()?;
    let worker = {
        let app = app.clone();
        tokio::spawn(async move { app.run_worker().await })
    };
    let mut stdin = tokio::io::stdin();
    let mut sink = Vec::new();
    let _ = stdin.read_to_end(&mut sink).await;
    app.shutdown(Duration::from_secs(1)).await;
    worker.abort();
    store.close().await;
    Ok(())
}
