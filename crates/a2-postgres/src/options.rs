//! [`PostgresOptions`]: what a Postgres store's connections are.

use std::time::Duration;

/// How a Postgres store connects: its pool and its timeouts.
///
/// ```
/// use std::time::Duration;
/// use a2_postgres::PostgresOptions;
///
/// let mut options = PostgresOptions::default().pool_size(32);
/// options.connect_timeout = Duration::from_secs(2);
/// assert_eq!(options.pool_size, 32);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// The most connections the store holds at once (default 16): every
    /// operation takes one for the time of its statements, so this is how
    /// many run side by side. Postgres' own limit (`max_connections`, 100
    /// by default) is shared by every process.
    pub pool_size: usize,
    /// How long opening a connection may take, TLS included (default 5 s):
    /// `StoreUnavailable` after it.
    pub connect_timeout: Duration,
    /// How long an operation waits for a free connection of the pool
    /// (default 10 s): `StoreUnavailable` after it, naming the pool size.
    pub acquire_timeout: Duration,
    /// The schema that holds a2's tables (default `a2`), created when
    /// missing; `a2_schema=` in the URL names another. Several a2
    /// deployments can share a database, each in its own schema.
    pub schema: String,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            acquire_timeout: Duration::from_secs(10),
            schema: "a2".to_owned(),
        }
    }
}

impl PostgresOptions {
    /// The most connections held at once (at least 1).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// The schema of a2's tables.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }
}
