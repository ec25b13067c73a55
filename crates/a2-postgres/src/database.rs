//! [`Database`]: a pool of connections to one Postgres database, secured
//! as its URL says, with the driver's errors told as a2's.

use a2_core::{Error, Result};
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, Runtime};
use tokio_postgres::error::SqlState;

use crate::options::PostgresOptions;
use crate::url::{self, SslMode};

/// A pool of connections to one Postgres database: what a Postgres store
/// works through.
///
/// ```no_run
/// # async fn demo() -> a2_core::Result<()> {
/// use a2_postgres::{Database, PostgresOptions};
///
/// let db = Database::connect(
///     "postgres://a2:secret@db.internal/app?sslmode=verify-full",
///     PostgresOptions::default(),
/// )
/// .await?;
/// println!("{}", db.server_version().await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Database {
    pool: Pool,
    /// The URL, its password hidden: what errors name.
    shown: String,
    ssl: SslMode,
    /// The schema of a2's tables: its plain name and as quoted SQL.
    schema: String,
    quoted: String,
    /// What the pool's connections are opened with, for the listening
    /// connection, which is not the pool's.
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("url", &self.shown)
            .field("ssl", &self.ssl)
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl Database {
    /// Connects to the database `url` names (`postgres://` or
    /// `postgresql://`, libpq's form, with `sslmode` and `sslrootcert`),
    /// opening one connection now so that a wrong URL, password or
    /// certificate fails here rather than at the first operation.
    ///
    /// A URL or options that cannot work (a bad URL, a refused login, a
    /// database that does not exist, a pool of no connections) are
    /// `InvalidArgument`; a server that does not answer is
    /// `StoreUnavailable`.
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self> {
        if options.pool_size == 0 {
            return Err(Error::invalid(
                "a Postgres pool needs at least 1 connection",
            ));
        }
        let target = url::parse(url)?;
        let schema = target.schema.clone().unwrap_or(options.schema);
        let quoted = crate::schema::quote(&schema)?;
        let tls = crate::tls::connector(target.ssl, target.root_cert.as_deref())?;
        let mut config = target.config;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        let manager = Manager::from_config(config.clone(), tls.clone(), ManagerConfig::default());
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.acquire_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| Error::invalid(format!("the Postgres pool: {e}")))?;
        let db = Self {
            pool,
            shown: url::redact(url),
            ssl: target.ssl,
            schema,
            quoted,
            config,
            tls,
        };
        drop(db.client().await?);
        Ok(db)
    }

    /// A connection of the pool, back in the pool when dropped.
    pub async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(|e| self.pool_error(e))
    }

    /// A connection of its own, outside the pool, whose notifications
    /// (LISTEN) go to `heard`: the connection runs in a task, whose handle
    /// ends with the connection (an error when it was lost).
    pub(crate) async fn dedicated(
        &self,
        mut heard: impl FnMut(tokio_postgres::Notification) + Send + 'static,
    ) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<Result<()>>)> {
        use futures::StreamExt;
        let (client, mut connection) = self
            .config
            .connect(self.tls.clone())
            .await
            .map_err(|e| self.error("connecting to listen", e))?;
        let db = self.clone();
        let task = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(tokio_postgres::AsyncMessage::Notification(notice)) => heard(notice),
                    Ok(_) => {}
                    Err(e) => return Err(db.error("listening", e)),
                }
            }
            Err(Error::unavailable(format!(
                "Postgres at {}: the listening connection closed",
                db.shown
            )))
        });
        Ok((client, task))
    }

    /// Closes the pool: connections are closed as they come back, and
    /// taking one fails.
    pub(crate) fn close(&self) {
        self.pool.close();
    }

    /// The server's `server_version` (`15.18 (Debian 15.18-0+deb12u1)`).
    pub async fn server_version(&self) -> Result<String> {
        let client = self.client().await?;
        let row = client
            .query_one("SHOW server_version", &[])
            .await
            .map_err(|e| self.error("reading the server version", e))?;
        Ok(row.get(0))
    }

    /// The schema of a2's tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The schema as quoted SQL, for statements.
    pub(crate) fn quoted(&self) -> &str {
        &self.quoted
    }

    /// How the connections are secured.
    pub fn ssl_mode(&self) -> SslMode {
        self.ssl
    }

    fn pool_error(&self, error: PoolError) -> Error {
        match error {
            PoolError::Backend(e) => self.error("connecting", e),
            PoolError::Timeout(kind) => Error::unavailable(format!(
                "Postgres at {}: no connection within the pool's timeout ({kind:?}; the pool \
                 holds at most {} connections)",
                self.shown,
                self.pool.status().max_size
            )),
            other => Error::unavailable(format!("Postgres at {}: {other}", self.shown)),
        }
    }

    /// A driver error while `doing`, as a2's: what a retry cannot mend
    /// (a refused login, a missing database) is `InvalidArgument`; the
    /// rest `StoreUnavailable`.
    pub(crate) fn error(&self, doing: &str, error: tokio_postgres::Error) -> Error {
        let fatal = error.code().is_some_and(|code| {
            [
                SqlState::INVALID_PASSWORD,
                SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                SqlState::INVALID_CATALOG_NAME,
                SqlState::INSUFFICIENT_PRIVILEGE,
            ]
            .contains(code)
        });
        // The driver's message alone hides the cause ("error performing
        // TLS handshake"): the chain of sources says which.
        let mut message = format!("Postgres at {}: {doing}: {error}", self.shown);
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            message.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        if fatal {
            // The server's message (a source) names the user or database.
            return Error::invalid(message);
        }
        Error::unavailable_from(message, error)
    }
}
