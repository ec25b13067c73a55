//! Rough figures for the Redis store on a local throwaway server: append
//! rates, a claim/complete cycle, and live-feed delivery latency.
//!
//! Run with `cargo run --release -p a2-redis --example throughput`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::*;
use a2_redis::testing::RedisServer;
use a2_redis::{RedisOptions, RedisStore};
use futures::StreamExt;
use serde_json::json;

fn rate(what: &str, count: usize, elapsed: Duration) {
    println!(
        "{what:<44} {count:>6} in {:>8.1} ms  {:>9.0}/s",
        elapsed.as_secs_f64() * 1e3,
        count as f64 / elapsed.as_secs_f64()
    );
}

/// `used_cpu_user + used_cpu_sys` of the server, in seconds.
fn server_cpu(con: &mut redis::Connection) -> f64 {
    let info: redis::InfoDict = redis::cmd("INFO").arg("cpu").query(con).expect("INFO cpu");
    let user: f64 = info.get("used_cpu_user").unwrap_or(0.0);
    let sys: f64 = info.get("used_cpu_sys").unwrap_or(0.0);
    user + sys
}

/// How many `FCALL`s the server has run (`INFO commandstats`).
fn fcalls(con: &mut redis::Connection) -> u64 {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO commandstats");
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> Result<()> {
    let server = RedisServer::start();
    let store = Arc::new(RedisStore::connect(&server.url(), RedisOptions::default()).await?);

    let n = 2000;
    let started = Instant::now();
    for k in 0..n {
        store
            .append("seq", vec![NewEvent::new("e", json!({ "k": k }))])
            .await?;
    }
    rate("append, 1 event per call, sequential", n, started.elapsed());

    let batches = 100;
    let started = Instant::now();
    for b in 0..batches {
        let events = (0..100)
            .map(|k| NewEvent::new("e", json!({ "b": b, "k": k })))
            .collect();
        store.append("batched", events).await?;
    }
    rate(
        "append, 100 events per call (events)",
        batches * 100,
        started.elapsed(),
    );

    // Single-event appends from 32 tasks, a session each: the store's group
    // commit sends them in batches. The server's CPU time and its `FCALL`
    // count (INFO) give the cost of one batched append.
    let mut admin = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .map_err(|e| Error::unavailable(e.to_string()))?;
    let (cpu, calls) = (server_cpu(&mut admin), fcalls(&mut admin));
    let (tasks_n, per_task) = (32, 1500);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..tasks_n {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for k in 0..per_task {
                store
                    .append(&format!("par-{t}"), vec![NewEvent::new("e", json!(k))])
                    .await?;
            }
            Ok::<_, Error>(())
        }));
    }
    for task in tasks {
        task.await.expect("append task")?;
    }
    let appends = tasks_n * per_task;
    rate(
        "append, 32 sessions concurrently",
        appends,
        started.elapsed(),
    );
    println!(
        "  per append: {:.1} µs of redis-server CPU, {:.3} FCALLs (batches)",
        (server_cpu(&mut admin) - cpu) * 1e6 / appends as f64,
        (fcalls(&mut admin) - calls) as f64 / appends as f64
    );

    let jobs = 1000;
    store
        .append(
            "jobs",
            (0..jobs).map(|k| NewEvent::new("job", json!(k))).collect(),
        )
        .await?;
    let started = Instant::now();
    let mut done = 0;
    loop {
        let outcome = store
            .claim_available(ClaimRequest {
                session: "jobs".into(),
                holder: "w".into(),
                lease: Lease::Ttl(30_000),
                exclude_indexes: vec![],
                limit: 1,
            })
            .await?;
        let ClaimOutcome::Claimed { events: rows, .. } = outcome else {
            break;
        };
        for row in rows {
            store
                .complete_attempt(CompleteRequest {
                    session: "jobs".into(),
                    index: row.event.index,
                    attempt: row.attempt_count,
                    events: vec![],
                    batch_size: None,
                })
                .await?;
            done += 1;
        }
    }
    rate(
        "claim 1 + complete, sequential (cycles)",
        done,
        started.elapsed(),
    );

    let mut feed = store.stream("live", 0);
    store
        .append("live", vec![NewEvent::new("warm", json!(0))])
        .await?;
    feed.next().await.expect("open")?;
    let mut latencies = Vec::new();
    for k in 0..500 {
        let started = Instant::now();
        store
            .append("live", vec![NewEvent::new("e", json!(k))])
            .await?;
        feed.next().await.expect("open")?;
        latencies.push(started.elapsed());
    }
    latencies.sort();
    println!(
        "feed delivery, append start to feed item      p50 {:>6.0} µs  p99 {:>6.0} µs",
        latencies[latencies.len() / 2].as_secs_f64() * 1e6,
        latencies[latencies.len() * 99 / 100].as_secs_f64() * 1e6
    );
    Ok(())
}
