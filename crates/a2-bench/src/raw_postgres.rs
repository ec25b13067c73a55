//! The raw-Postgres baseline, on the store's own driver and pool
//! (tokio-postgres, deadpool-postgres with the store's default size) and
//! the same server, so a gap to a2 is a2's own work.

use std::time::{Duration, Instant};

use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool};
use tokio_postgres::NoTls;

use crate::BoxError;

/// The row subject of the raw Postgres baseline.
pub const RAW_POSTGRES_SUBJECT: &str = "raw postgres";

/// The store's default pool size (`PostgresOptions::pool_size`).
const POOL: usize = 16;

/// The append ceiling: `calls` appends of `batch` rows each, spread over
/// `tasks` concurrent tasks, each on its own session, into a plain table
/// (primary key `(session, idx)`, no other index): each append is one
/// prepared `INSERT … SELECT FROM unnest(…)` of the whole batch, committed
/// on its own, as the store writes a batch's log rows in one statement.
/// Returns the wall time.
pub async fn append(
    url: &str,
    batch: usize,
    tasks: usize,
    calls: u64,
    tag: &str,
) -> Result<Duration, BoxError> {
    let config: tokio_postgres::Config = url.parse()?;
    let manager = Manager::from_config(config, NoTls, ManagerConfig::default());
    let pool = Pool::builder(manager).max_size(POOL).build()?;
    pool.get()
        .await?
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS raw_log (session text NOT NULL, idx bigint NOT NULL,
                id text NOT NULL, type text NOT NULL, payload text NOT NULL,
                created_at bigint NOT NULL, PRIMARY KEY (session, idx))",
        )
        .await?;
    let per_task = calls / tasks as u64;
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let pool = pool.clone();
        let session = format!("bench:append:{tag}:{t}");
        handles.push(tokio::spawn(async move {
            for c in 0..per_task {
                let first = (c * batch as u64) as i64 + 1;
                let idx: Vec<i64> = (first..first + batch as i64).collect();
                let ids: Vec<String> = idx.iter().map(|n| format!("{t}-{n}")).collect();
                let types = vec!["bench"; batch];
                let payloads: Vec<String> = idx
                    .iter()
                    .map(|n| serde_json::json!({ "n": n }).to_string())
                    .collect();
                let client = pool.get().await?;
                let insert = client
                    .prepare_cached(
                        "INSERT INTO raw_log (session, idx, id, type, payload, created_at)
                         SELECT $1, idx, id, type, payload, $2
                         FROM unnest($3::bigint[], $4::text[], $5::text[], $6::text[])
                            AS u(idx, id, type, payload)",
                    )
                    .await?;
                let now = i64::try_from(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)?
                        .as_millis(),
                )?;
                client
                    .execute(&insert, &[&session, &now, &idx, &ids, &types, &payloads])
                    .await?;
            }
            Ok::<_, BoxError>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(started.elapsed())
}
