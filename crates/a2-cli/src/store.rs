//! `--store URL`: one way to name the store everywhere.
//!
//! - `memory`: the in-memory store of this process (gone when it exits);
//! - `sqlite:PATH` (or `sqlite://PATH`): the SQLite database at `PATH`,
//!   created when missing, shareable by several processes;
//! - `redis://HOST:PORT` (or `rediss://…` over TLS): a Redis server, with
//!   the key prefix of `--key-prefix`;
//! - `https://:TOKEN@HOST` (or `http://…`): Redis over REST, such as Upstash
//!   (docs/rest.md), with the same prefix;
//! - `redis+cluster://HOST:PORT,HOST:PORT`: a Redis Cluster, through any of
//!   the listed nodes (docs/redis-layout.md, "Redis Cluster");
//! - `redis+sentinel://HOST:PORT,HOST:PORT/SERVICE`: the master that the
//!   listed Sentinels name (docs/redis-layout.md, "Redis Sentinel");
//! - `postgres://USER:PASSWORD@HOST/DATABASE` (or `postgresql://…`, with
//!   libpq's `sslmode`, `sslrootcert`, and `a2_schema` for the schema): a
//!   Postgres database (docs/postgres-layout.md).

use std::path::PathBuf;
use std::sync::Arc;

use a2::{MemoryStore, Store, StoreOptions};

/// Settings that only some stores take.
#[derive(Debug, Clone)]
pub struct Tuning {
    /// Redis: the refresh period of followed sessions' marks.
    pub follow_refresh: std::time::Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            follow_refresh: a2::redis::RedisOptions::default().follow_refresh,
        }
    }
}

/// A parsed `--store` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Memory,
    Sqlite(PathBuf),
    Redis(String),
    Postgres(String),
}

impl StoreUrl {
    pub fn parse(url: &str) -> Result<Self, String> {
        if url == "memory" || url == "memory:" {
            return Ok(StoreUrl::Memory);
        }
        if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(format!("{url:?} names no file: use sqlite:PATH"));
            }
            return Ok(StoreUrl::Sqlite(PathBuf::from(path)));
        }
        if a2::postgres::is_postgres_url(url) {
            return Ok(StoreUrl::Postgres(url.to_owned()));
        }
        let schemes = [
            "redis://",
            "rediss://",
            "redis+cluster://",
            "redis+sentinel://",
            "https://",
            "http://",
        ];
        if schemes.iter().any(|s| url.starts_with(s)) {
            return Ok(StoreUrl::Redis(url.to_owned()));
        }
        Err(format!(
            "unknown store {url:?}: use memory, sqlite:PATH, redis://HOST:PORT, rediss://… or https://… (Redis over REST), redis+cluster://HOST:PORT,HOST:PORT (Redis Cluster), redis+sentinel://HOST:PORT,…/SERVICE (Redis Sentinel), or postgres://USER:PASSWORD@HOST/DATABASE (Postgres)"
        ))
    }

    /// Whether other processes can see this store's data.
    pub fn is_shared(&self) -> bool {
        !matches!(self, StoreUrl::Memory)
    }

    /// Opens the store; `prefix` is the key prefix on Redis.
    pub async fn open(&self, prefix: &str) -> Result<Arc<dyn Store>, Box<dyn std::error::Error>> {
        self.open_with(prefix, StoreOptions::default()).await
    }

    /// As [`StoreUrl::open`], with these store options (limits).
    pub async fn open_with(
        &self,
        prefix: &str,
        options: StoreOptions,
    ) -> Result<Arc<dyn Store>, Box<dyn std::error::Error>> {
        self.open_tuned(prefix, options, Tuning::default()).await
    }

    /// As [`StoreUrl::open_with`], with settings of one kind of store.
    pub async fn open_tuned(
        &self,
        prefix: &str,
        options: StoreOptions,
        tuning: Tuning,
    ) -> Result<Arc<dyn Store>, Box<dyn std::error::Error>> {
        Ok(match self {
            StoreUrl::Memory => Arc::new(MemoryStore::new(options)),
            StoreUrl::Sqlite(path) => {
                let store = a2::sqlite::SqliteStore::open(
                    path,
                    a2::sqlite::SqliteOptions::default().store(options),
                )
                .map_err(|e| format!("cannot use the SQLite store at {}: {e}", path.display()))?;
                Arc::new(store)
            }
            StoreUrl::Redis(url) => {
                let options = a2::redis::RedisOptions::default()
                    .prefix(prefix)
                    .store(options)
                    .follow_refresh(tuning.follow_refresh);
                let store = a2::redis::RedisStore::connect(url, options)
                    .await
                    .map_err(|e| format!("cannot use the Redis store at {url}: {e}"))?;
                Arc::new(store)
            }
            StoreUrl::Postgres(url) => {
                let postgres = a2::postgres::PostgresOptions::default();
                let store = a2::postgres::PostgresStore::connect(url, postgres, options)
                    .await
                    // The error names the URL, its password hidden.
                    .map_err(|e| format!("cannot use the Postgres store: {e}"))?;
                Arc::new(store)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let sqlite = |path: &str| StoreUrl::Sqlite(path.into());
        let table = [
            ("memory", StoreUrl::Memory),
            ("sqlite:demo.db", sqlite("demo.db")),
            ("sqlite:///var/a2.db", sqlite("/var/a2.db")),
            // A Postgres URL is handed to the Postgres store as it is.
            (
                "postgres://a2:pw@db/app",
                StoreUrl::Postgres("postgres://a2:pw@db/app".into()),
            ),
            (
                "postgresql://db/app",
                StoreUrl::Postgres("postgresql://db/app".into()),
            ),
        ];
        for (url, parsed) in table {
            assert_eq!(StoreUrl::parse(url), Ok(parsed), "{url}");
        }
        // Every Redis URL is handed to the Redis store as it is.
        for url in [
            "redis://127.0.0.1:6379",
            "https://:token@example.upstash.io",
            "rediss://127.0.0.1:6380",
            "redis+cluster://10.0.0.1:7000,10.0.0.2:7000",
            "redis+sentinel://10.0.0.1:26379/main",
        ] {
            assert_eq!(
                StoreUrl::parse(url),
                Ok(StoreUrl::Redis(url.into())),
                "{url}"
            );
        }
        assert!(StoreUrl::parse("sqlite:").is_err());
        assert!(StoreUrl::parse("mysql://x").is_err());
        assert!(StoreUrl::parse("demo.db").is_err());
    }
}
