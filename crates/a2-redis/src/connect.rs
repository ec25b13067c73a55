//! How a [`RedisStore`] connects: one constructor per deployment (a
//! server, a client of your own, Sentinel, Cluster, a REST endpoint), each
//! building the transport and subscriber it needs and handing them to the
//! store (`RedisStore::from_parts`), which works the same over any of them.

use std::sync::Arc;

use a2_core::{Error, Result};

use crate::options::{RedisOptions, check_options};
use crate::store::RedisStore;
use crate::subscriber::{RespSubscriber, SubscriberConfig};
use crate::transport::RespTransport;

impl RedisStore {
    /// Connects to the server at `url` (`redis://host:port/db`; `rediss://`
    /// with feature `tls`; `https://:TOKEN@host` with feature `rest`, see
    /// `RedisStore::connect_rest`), or to the Redis Cluster of
    /// `redis+cluster://host:port,host:port` (see
    /// [`RedisStore::connect_cluster`]).
    ///
    /// Fails with `InvalidArgument` for a bad URL, prefix or partition
    /// count (also when the prefix already holds data laid out with another
    /// partition count: nothing is written then), and with
    /// `StoreUnavailable` when the server cannot be reached within the
    /// connect timeout. Needs a Tokio runtime.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self> {
        check_options(&options)?;
        if crate::cluster::is_cluster_url(url) {
            let seeds = crate::cluster::seeds(url)?;
            return Self::connect_cluster(&seeds, options).await;
        }
        #[cfg(feature = "rest")]
        if crate::rest::is_rest_url(url) {
            return Self::connect_rest(url, options, crate::rest::RestOptions::default()).await;
        }
        if crate::sentinel::is_sentinel_url(url) {
            return Self::connect_sentinel(url, options).await;
        }
        let client =
            redis::Client::open(url).map_err(|e| Error::invalid(format!("bad Redis URL: {e}")))?;
        Self::from_client(client, options).await
    }

    /// A store over a client you configured yourself (custom TLS, auth,
    /// TCP settings, a `redis::Client` built from a [`redis::ConnectionInfo`]
    /// of your own): its commands go over a reconnecting connection made
    /// from `client`, and its live feeds and presence over one RESP3
    /// connection to the same server. Fails as [`RedisStore::connect`].
    ///
    /// ```no_run
    /// # async fn demo() -> a2_core::Result<()> {
    /// use a2_redis::{RedisOptions, RedisStore};
    /// use redis::IntoConnectionInfo;
    /// let info = redis::ConnectionAddr::Tcp("10.0.0.5".into(), 6379)
    ///     .into_connection_info()
    ///     .expect("an address")
    ///     .set_redis_settings(redis::RedisConnectionInfo::default().set_password("secret"));
    /// let client = redis::Client::open(info).expect("a valid address");
    /// let store = RedisStore::from_client(client, RedisOptions::default()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_client(client: redis::Client, options: RedisOptions) -> Result<Self> {
        check_options(&options)?;
        let info = client.get_connection_info().clone();
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let push_client = redis::Client::open(info.set_redis_settings(resp3))
            .map_err(|e| Error::invalid(format!("bad Redis client: {e}")))?;
        let transport =
            RespTransport::connect(client, options.command_timeout, options.connect_timeout)
                .await?;
        let subscriber = RespSubscriber::start(SubscriberConfig {
            client: push_client,
            resolve: None,
            connect_timeout: options.connect_timeout,
            command_timeout: options.command_timeout,
        });
        Self::from_parts(Arc::new(transport), Arc::new(subscriber), options).await
    }

    /// Connects through Redis Sentinel:
    /// `redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT…]/SERVICE[/DB]`
    /// names the Sentinels, the service they monitor and the master's
    /// password and database. The store works on the master they name and
    /// follows it after a failover (see `docs/redis-layout.md`, "Redis
    /// Sentinel"). Fails as [`RedisStore::connect`], and with
    /// `StoreUnavailable` when no Sentinel names a master.
    ///
    /// ```no_run
    /// # async fn demo() -> a2_core::Result<()> {
    /// use a2_redis::{RedisOptions, RedisStore};
    /// let url = "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster";
    /// let store = RedisStore::connect_sentinel(url, RedisOptions::default()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_sentinel(url: &str, options: RedisOptions) -> Result<Self> {
        check_options(&options)?;
        let parsed = crate::sentinel::SentinelUrl::parse(url)?;
        let master = Arc::new(crate::sentinel::Master::new(
            &parsed,
            options.connect_timeout,
        )?);
        let transport = crate::sentinel::SentinelTransport::connect(
            master.clone(),
            options.command_timeout,
            options.connect_timeout,
        )
        .await?;
        // The configured client is never used: `resolve` names the server.
        let placeholder = master.client(true).await?;
        let subscriber = RespSubscriber::start(SubscriberConfig {
            client: placeholder,
            resolve: Some(master.resolver()),
            connect_timeout: options.connect_timeout,
            command_timeout: options.command_timeout,
        });
        Self::from_parts(Arc::new(transport), Arc::new(subscriber), options).await
    }

    /// Connects to a Redis Cluster (Redis ≥ 7) through any of `seeds`
    /// (`redis://host:port` URLs of some of its nodes; one reachable node
    /// is enough to find the others).
    ///
    /// Every script touches the keys of one partition, so of one slot; the
    /// partitions spread evenly over the masters (docs/redis-layout.md,
    /// "Redis Cluster"). Live feeds, presence and wake-ups use sharded
    /// channels on one push connection per store (a connection per node
    /// under it). Fails as [`RedisStore::connect`].
    ///
    /// ```no_run
    /// # async fn demo() -> a2_core::Result<()> {
    /// use a2_redis::{RedisOptions, RedisStore};
    /// let seeds = ["redis://10.0.0.1:7000".to_owned(), "redis://10.0.0.2:7000".to_owned()];
    /// let store = RedisStore::connect_cluster(&seeds, RedisOptions::default()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_cluster(seeds: &[String], options: RedisOptions) -> Result<Self> {
        check_options(&options)?;
        if seeds.is_empty() {
            return Err(Error::invalid("a cluster needs at least one seed node"));
        }
        let transport = crate::cluster::ClusterTransport::connect(
            seeds,
            options.command_timeout,
            options.connect_timeout,
            options.acknowledged_by,
        )
        .await?;
        let subscriber = crate::cluster::subscriber::ClusterSubscriber::start(
            crate::cluster::subscriber::ClusterSubscriberConfig {
                seeds: seeds.to_vec(),
                connect_timeout: options.connect_timeout,
                command_timeout: options.command_timeout,
            },
        );
        Self::from_parts(Arc::new(transport), Arc::new(subscriber), options).await
    }

    #[cfg(feature = "rest")]
    /// Connects to a Redis REST endpoint (`https://:TOKEN@host`): the same
    /// store as [`RedisStore::connect`] over HTTP (see [`crate::rest`]).
    ///
    /// Fails with `InvalidArgument` for a bad URL, prefix or missing token,
    /// and with `StoreUnavailable` when the endpoint cannot be reached,
    /// does not answer `PING` with `PONG`, or lacks subscriptions while
    /// [`LiveMode::Subscribe`](crate::rest::LiveMode::Subscribe) asks for them. Needs a Tokio runtime.
    pub async fn connect_rest(
        url: &str,
        options: RedisOptions,
        rest: crate::rest::RestOptions,
    ) -> Result<Self> {
        check_options(&options)?;
        let (transport, subscriber) = crate::rest::connect(url, &options, &rest).await?;
        Self::from_parts(transport, subscriber, options).await
    }
}
