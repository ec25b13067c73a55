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

    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for k in 0..250 {
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
    rate(
        "append, 16 sessions concurrently",
        16 * 250,
        started.elapsed(),
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
        let ClaimOutcome::Claimed(rows) = outcome else {
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
