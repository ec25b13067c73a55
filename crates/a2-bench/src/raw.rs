//! The raw-Redis baselines, on the same client (`redis` crate, one
//! multiplexed `ConnectionManager` shared by every task) and the same
//! concurrency as the a2 scenarios they are compared with.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::streams::StreamReadReply;

use crate::BoxError;

/// How many keys a2's append script touches for lane-less events: the log
/// stream, the summary hash, the pending and ready sets, the session's id
/// index, the session list and the pending-session list (lua/append.lua in
/// a2-redis).
/// The EVALSHA ceiling touches as many.
pub const CEILING_KEYS: usize = 7;

/// The append ceiling: one script call per batch that touches `keys` keys —
/// XADD of each event to a stream (`KEYS[1]`), each event id into an id index
/// (`KEYS[2]`), and one counter per remaining key — the least an atomic append
/// that keeps a stream log, an id index and per-session bookkeeping can do.
pub const CEILING_LUA: &str = r#"
-- KEYS[1]: the stream; KEYS[2]: the id index (hash); KEYS[3..]: counters (hashes)
-- ARGV[1]: event type; ARGV[2]: payload; ARGV[3..]: event ids (one per event)
-- Returns: the number of events written.
local n = #ARGV - 2
for i = 1, n do
  redis.call('XADD', KEYS[1], '*', 'id', ARGV[i + 2], 'type', ARGV[1], 'payload', ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[i + 2], KEYS[1])
end
for k = 3, #KEYS do
  redis.call('HINCRBY', KEYS[k], 'n', n)
end
return n
"#;

/// Runs `calls` EVALSHA calls of [`CEILING_LUA`] with `batch` events each,
/// spread over `tasks` concurrent tasks, each on its own keys. Returns the
/// wall time.
pub async fn evalsha_append(
    con: &ConnectionManager,
    keys: usize,
    batch: usize,
    tasks: usize,
    calls: u64,
    tag: &str,
) -> Result<Duration, BoxError> {
    let script = Arc::new(redis::Script::new(CEILING_LUA));
    // Load once outside the timing, as a store does at start.
    let _: String = script.prepare_invoke().load_async(&mut con.clone()).await?;
    let per_task = calls / tasks as u64;
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let mut con = con.clone();
        let script = script.clone();
        let key_names: Vec<String> = (0..keys.max(2))
            .map(|k| format!("bench:ceiling:{{{tag}:{t}}}:{k}"))
            .collect();
        let payload = serde_json::json!({"n": t}).to_string();
        let id_prefix = format!("{tag}-{t}-");
        handles.push(tokio::spawn(async move {
            let mut id = 0u64;
            for _ in 0..per_task {
                let mut inv = script.prepare_invoke();
                for k in &key_names {
                    inv.key(k);
                }
                inv.arg("bench").arg(&payload);
                for _ in 0..batch {
                    id += 1;
                    inv.arg(format!("{id_prefix}{id}"));
                }
                let _: u64 = inv.invoke_async(&mut con).await?;
            }
            Ok::<_, redis::RedisError>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(started.elapsed())
}

/// The Redis Streams work cycle: `events` XADDs over `sessions` streams from
/// `concurrency` producer tasks while `concurrency` consumer tasks each
/// XREADGROUP COUNT 100 from one stream at a time and XACK every entry on its
/// own (as a worker completes each job). Returns the time until the last ack.
pub async fn consumer_group_cycle(
    con: &ConnectionManager,
    events: u64,
    sessions: u64,
    concurrency: usize,
    tag: &str,
) -> Result<Duration, BoxError> {
    let keys: Arc<Vec<String>> = Arc::new(
        (0..sessions)
            .map(|s| format!("bench:cg:{tag}:{s}"))
            .collect(),
    );
    let mut setup = con.clone();
    for key in keys.iter() {
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(key)
            .arg("g")
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut setup)
            .await?;
    }
    let next = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let cursor = Arc::new(AtomicU64::new(0));
    let payload = serde_json::json!({"n": 1}).to_string();
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..concurrency {
        let (mut con, keys, next, payload) =
            (con.clone(), keys.clone(), next.clone(), payload.clone());
        handles.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= events {
                    return Ok::<_, redis::RedisError>(());
                }
                let key = &keys[(i % keys.len() as u64) as usize];
                let _: String = redis::cmd("XADD")
                    .arg(key)
                    .arg("*")
                    .arg("type")
                    .arg("bench")
                    .arg("payload")
                    .arg(&payload)
                    .query_async(&mut con)
                    .await?;
            }
        }));
    }
    for c in 0..concurrency {
        let (con, keys, acked, cursor) = (con.clone(), keys.clone(), acked.clone(), cursor.clone());
        let consumer = format!("c{c}");
        handles.push(tokio::spawn(async move {
            let mut reader = con.clone();
            let mut misses = 0usize;
            while acked.load(Ordering::Relaxed) < events {
                let key =
                    &keys[(cursor.fetch_add(1, Ordering::Relaxed) % keys.len() as u64) as usize];
                let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
                    .arg("GROUP")
                    .arg("g")
                    .arg(&consumer)
                    .arg("COUNT")
                    .arg(100)
                    .arg("STREAMS")
                    .arg(key)
                    .arg(">")
                    .query_async(&mut reader)
                    .await?;
                let ids: Vec<String> = reply
                    .into_iter()
                    .flat_map(|r| r.keys)
                    .flat_map(|k| k.ids)
                    .map(|e| e.id)
                    .collect();
                if ids.is_empty() {
                    misses += 1;
                    // A whole sweep found nothing: the producers are behind.
                    if misses >= keys.len() {
                        misses = 0;
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    continue;
                }
                misses = 0;
                let acks = ids.iter().map(|id| {
                    let mut con = con.clone();
                    let cmd = redis::cmd("XACK").arg(key).arg("g").arg(id).to_owned();
                    async move { cmd.query_async::<u64>(&mut con).await }
                });
                let n: u64 = futures::future::try_join_all(acks).await?.into_iter().sum();
                acked.fetch_add(n, Ordering::Relaxed);
            }
            Ok(())
        }));
    }
    for h in handles {
        h.await??;
    }
    let elapsed = started.elapsed();
    let mut cleanup = con.clone();
    for key in keys.iter() {
        let _: () = redis::cmd("DEL").arg(key).query_async(&mut cleanup).await?;
    }
    Ok(elapsed)
}

/// XADD → blocked XREAD: `events` entries appended one at a time every
/// `interval` on `con` while a reader blocks in XREAD on its own connection.
/// Returns each entry's append-to-delivery latency, and how long each XADD
/// call took.
pub async fn xread_latency(
    client: &redis::Client,
    con: &ConnectionManager,
    events: u64,
    interval: Duration,
    tag: &str,
) -> Result<(Vec<Duration>, Vec<Duration>), BoxError> {
    let key = format!("bench:xread:{tag}");
    // A blocking read must not be cut short by a response timeout.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut reader = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let read_key = key.clone();
    let receiver = tokio::spawn(async move {
        let mut received: Vec<(u64, Instant)> = Vec::with_capacity(events as usize);
        // From the start of the (new) stream, so nothing appended before the
        // first XREAD reaches the server is missed.
        let mut last = "0-0".to_string();
        while (received.len() as u64) < events {
            let reply: Option<StreamReadReply> = redis::cmd("XREAD")
                .arg("BLOCK")
                .arg(5_000)
                .arg("COUNT")
                .arg(1_000)
                .arg("STREAMS")
                .arg(&read_key)
                .arg(&last)
                .query_async(&mut reader)
                .await?;
            let now = Instant::now();
            for entry in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
                let seq: u64 = entry
                    .get::<String>("seq")
                    .and_then(|s| s.parse().ok())
                    .ok_or("entry without seq")?;
                received.push((seq, now));
                last = entry.id;
            }
        }
        Ok::<_, BoxError>(received)
    });
    let mut writer = con.clone();
    let mut sent: Vec<Instant> = Vec::with_capacity(events as usize);
    let mut writes = Vec::with_capacity(events as usize);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for seq in 0..events {
        ticker.tick().await;
        let at = Instant::now();
        sent.push(at);
        let _: String = redis::cmd("XADD")
            .arg(&key)
            .arg("*")
            .arg("seq")
            .arg(seq)
            .arg("payload")
            .arg("{}")
            .query_async(&mut writer)
            .await?;
        writes.push(at.elapsed());
    }
    let received = tokio::time::timeout(Duration::from_secs(30), receiver).await???;
    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut writer).await?;
    let latencies = received
        .into_iter()
        .map(|(seq, at)| at.saturating_duration_since(sent[seq as usize]))
        .collect();
    Ok((latencies, writes))
}
