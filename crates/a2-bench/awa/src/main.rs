//! The awa baseline of a2-bench's work cycle (crates.io `awa` 0.6, a
//! Postgres job queue on sqlx): the work cycle a2 is measured on, on the
//! run's Postgres server, through awa's own producer call and worker
//! runtime.
//!
//! `a2-bench-awa URL EVENTS CONCURRENCY TAG` prints `elapsed_ms=…` (the
//! timed part of [`cycle`]) on its own line; a2-bench builds and runs it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ::awa::worker::TransitionWorkerRole;
use ::awa::{
    Client, InsertOpts, JobArgs, JobContext, JobResult, QueueConfig, QueueStorage,
    QueueStorageConfig,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tokio::sync::Notify;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, events, concurrency, tag] = args.as_slice() else {
        return Err("usage: a2-bench-awa URL EVENTS CONCURRENCY TAG".into());
    };
    let elapsed = cycle(url, events.parse()?, concurrency.parse()?, tag).await?;
    println!("elapsed_ms={}", elapsed.as_secs_f64() * 1e3);
    Ok(())
}

/// The queue of the cycle (one database per call, so one name serves:
/// awa's dispatcher LISTENs on `awa:{queue}`, and a channel name must stay
/// under Postgres' 63 bytes).
const QUEUE: &str = "a2_bench_cycle";

/// The job kind of the cycle.
const KIND: &str = "a2_bench_cycle";

/// Connections of the producers' pool: the a2 Postgres store's default
/// pool (`PostgresOptions::pool_size`), as the raw Postgres baseline has.
const PRODUCER_POOL: u32 = 16;

/// Connections of the worker client's pool: what awa's own throughput runs
/// give it (`setup(20)` in awa/tests/benchmark_test.rs, `create_pool(20)`
/// in the worker-throughput scenario of hardbyte/postgresql-job-queue-
/// benchmarking's awa-bench).
const CLIENT_POOL: u32 = 20;

/// The dispatcher's fallback poll, as in both of those throughput runs
/// (the library default is 200 ms); new jobs wake it by NOTIFY first.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Snapshot and queue-stats publishing, pushed out of a round's way as the
/// authors' cross-system harness does ("measuring queue behavior, not the
/// cost of refreshing runtime/admin snapshots").
const QUIET_INTERVAL: Duration = Duration::from_secs(300);

/// How long a round may take before it counts as failed (a2's cycle has
/// the same bound).
const DEADLINE: Duration = Duration::from_secs(600);

/// The queue storage's ring rotations, as the authors' harness sets them
/// (`QUEUE_ROTATE_MS`, `LEASE_ROTATE_MS` defaults).
const QUEUE_ROTATE: Duration = Duration::from_millis(1_000);
const LEASE_ROTATE: Duration = Duration::from_millis(50);

/// How often awa's completed count is read once every handler ran: often
/// enough against a round of seconds, seldom enough not to load the
/// server the round is measured on.
const COUNT_POLL: Duration = Duration::from_millis(10);

/// The job's arguments: the event's payload in a2's cycle (`{"n": i}`).
#[derive(serde::Serialize, serde::Deserialize)]
struct CycleJob {
    n: u64,
}

impl JobArgs for CycleJob {
    fn kind() -> &'static str {
        KIND
    }
}

/// The handlers' tally: how many ran, and a wake-up for the one that
/// completes the round.
struct Tally {
    handled: AtomicU64,
    all_handled: Notify,
}

/// The work cycle through awa: `events` jobs inserted one per call from
/// `concurrency` producer tasks (each `QueueStorage::enqueue_params_batch`
/// of one job, the queue storage's own insert, as the authors' harness
/// enqueues, there 128 at a time; its NOTIFY
/// wakes the dispatcher), while one awa worker `Client` runs a no-op
/// handler on one queue with `max_workers = concurrency`. Timed from the
/// first insert until every job's completion is durable: the handlers
/// count themselves (an `AtomicU64` and a `Notify`), then awa's exact
/// terminal count (`QueueStorage::queue_counts`) is polled every
/// `COUNT_POLL` until it reaches `events`, since awa acknowledges
/// completions in batches after the handler returns. Returns the wall
/// time.
///
/// Setup, outside the timing: a fresh database on the server of `url`
/// (`awa_` and `tag`; awa's tables live in a fixed `awa` schema with one
/// storage-state row per database, so a database is the unit of
/// isolation), `awa::migrations::run`, then `QueueStorage::install` of the
/// default queue storage (the 0.6 engine: schema `awa`, 16 queue, 8 lease
/// and 8 claim slots, receipts on) as the authors' harness does; the
/// client keeps 0.6's default rotation, 1 s for queue and lease rings (the
/// harness pins lease rotation at 50 ms, which 0.6 dropped as its default,
/// awa#169). The client is shut down and the database dropped at the end.
/// awa logs each job at `info`: a2-bench installs no tracing subscriber,
/// so that costs nothing here.
///
/// Settings, from awa's own throughput runs and docs/configuration.md:
/// - `max_workers = concurrency`, hard-reserved mode (no global pool);
/// - `poll_interval` 50 ms (`POLL_INTERVAL`);
/// - `deadline_duration = 0`, as the queue-storage throughput run of
///   awa/tests/benchmark_test.rs sets it: claims take the compact
///   receipt-batch path and skip the per-claim deadline; a crashed
///   worker's jobs are still rescued by heartbeat staleness, only a hung
///   handler is no longer cut off after the default 5 min;
/// - `claimers = 1`, `claim_batch_size = 512` and `enqueue_shards = 1`
///   (strict FIFO per queue and priority): the defaults, which the
///   authors' runs keep and their docs say to raise only on evidence;
/// - completion batching at its defaults (512 a batch, 1 ms flush);
/// - runtime snapshots and queue stats every 300 s (`QUIET_INTERVAL`).
///
/// The producers have a pool of their own (`PRODUCER_POOL`) so that
/// they do not queue in front of the client's claims and completions
/// (`CLIENT_POOL`).
async fn cycle(
    url: &str,
    events: u64,
    concurrency: usize,
    tag: &str,
) -> Result<Duration, BoxError> {
    let server: PgConnectOptions = url.parse()?;
    let database = database_name(tag);
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(server.clone())
        .await?;
    let drop_sql = format!("DROP DATABASE IF EXISTS \"{database}\" WITH (FORCE)");
    sqlx::raw_sql(&drop_sql).execute(&admin).await?;
    let create_sql = format!("CREATE DATABASE \"{database}\"");
    sqlx::raw_sql(&create_sql).execute(&admin).await?;
    let outcome = in_database(server.database(&database), events, concurrency).await;
    let dropped = sqlx::raw_sql(&drop_sql).execute(&admin).await;
    admin.close().await;
    let elapsed = outcome?;
    dropped?;
    Ok(elapsed)
}

/// The cycle in the fresh database `options` names: setup, the timed part,
/// and the client's shutdown whatever the timed part returned.
async fn in_database(
    options: PgConnectOptions,
    events: u64,
    concurrency: usize,
) -> Result<Duration, BoxError> {
    let producers = PgPoolOptions::new()
        .max_connections(PRODUCER_POOL)
        .connect_with(options.clone())
        .await?;
    ::awa::migrations::run(&producers).await?;
    let store = Arc::new(QueueStorage::new(QueueStorageConfig::default())?);
    store.install(&producers).await?;

    let client_pool = PgPoolOptions::new()
        .max_connections(CLIENT_POOL)
        .connect_with(options)
        .await?;
    let tally = Arc::new(Tally {
        handled: AtomicU64::new(0),
        all_handled: Notify::new(),
    });
    let handler_tally = tally.clone();
    let client = Client::builder(client_pool.clone())
        .queue(
            QUEUE,
            QueueConfig {
                max_workers: u32::try_from(concurrency)?,
                poll_interval: POLL_INTERVAL,
                deadline_duration: Duration::ZERO,
                ..QueueConfig::default()
            },
        )
        .register::<CycleJob, _, _>(move |_job: CycleJob, _ctx: &JobContext| {
            let tally = handler_tally.clone();
            async move {
                if tally.handled.fetch_add(1, Ordering::Relaxed) + 1 == events {
                    tally.all_handled.notify_one();
                }
                Ok(JobResult::Completed)
            }
        })
        // The queue storage engine the producers write to, with the
        // rotation the authors' harness runs it with.
        .queue_storage(QueueStorageConfig::default(), QUEUE_ROTATE, LEASE_ROTATE)
        .transition_role(TransitionWorkerRole::QueueStorageTarget)
        .runtime_snapshot_interval(QUIET_INTERVAL)
        .queue_stats_interval(QUIET_INTERVAL)
        .build()?;
    if let Err(e) = client.start().await {
        client.shutdown(Duration::from_secs(5)).await;
        return Err(e.into());
    }

    let outcome = timed(&producers, &store, &tally, events, concurrency).await;

    client.shutdown(Duration::from_secs(5)).await;
    // Bounded: a detached completion task of awa's may still hold a
    // connection; the database is dropped WITH (FORCE) after this anyway.
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        client_pool.close().await;
        producers.close().await;
    })
    .await;
    outcome
}

/// The timed part: the producers, then the wait for every completion.
async fn timed(
    pool: &PgPool,
    store: &Arc<QueueStorage>,
    tally: &Tally,
    events: u64,
    concurrency: usize,
) -> Result<Duration, BoxError> {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut producers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let (pool, next, store) = (pool.clone(), next.clone(), store.clone());
        producers.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= events {
                    return Ok::<_, ::awa::AwaError>(());
                }
                let opts = InsertOpts {
                    queue: QUEUE.to_string(),
                    ..InsertOpts::default()
                };
                let job = ::awa::insert::params_with(&CycleJob { n }, opts)?;
                store.enqueue_params_batch(&pool, &[job]).await?;
            }
        }));
    }
    for p in producers {
        p.await??;
    }
    let inserted = started.elapsed();
    if events > 0 {
        let left = DEADLINE.saturating_sub(started.elapsed());
        if tokio::time::timeout(left, tally.all_handled.notified())
            .await
            .is_err()
        {
            return Err(format!(
                "awa: only {} of {events} jobs handled within {} s",
                tally.handled.load(Ordering::Relaxed),
                DEADLINE.as_secs()
            )
            .into());
        }
    }
    let handled = started.elapsed();
    let expected = i64::try_from(events)?;
    loop {
        let counts = store.queue_counts(pool, QUEUE).await?;
        if counts.terminal >= expected {
            let elapsed = started.elapsed();
            if counts.terminal != expected || counts.pruned_failed != 0 {
                return Err(format!(
                    "awa: unexpected counts after {events} jobs: terminal {}, pruned failed {}",
                    counts.terminal, counts.pruned_failed
                )
                .into());
            }
            eprintln!(
                "awa: inserted in {inserted:.2?}, handled in {handled:.2?}, durable in {elapsed:.2?}"
            );
            return Ok(elapsed);
        }
        if started.elapsed() > DEADLINE {
            return Err(format!(
                "awa: only {} of {events} completions durable within {} s",
                counts.terminal,
                DEADLINE.as_secs()
            )
            .into());
        }
        tokio::time::sleep(COUNT_POLL).await;
    }
}

/// The database of the call tagged `tag`: `awa_` and the tag in lower-case
/// letters, digits and underscores, cut to Postgres' 63 bytes from the
/// front so that the round number at the tag's end stays.
fn database_name(tag: &str) -> String {
    let name: String = format!("awa_{tag}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if name.len() > 63 {
        name[name.len() - 63..].to_string()
    } else {
        name
    }
}
