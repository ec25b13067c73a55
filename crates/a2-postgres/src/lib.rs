//! The Postgres store of a2: [`PostgresStore`] implements the whole
//! `a2_core::Store` contract in a Postgres database — appends (in the
//! store's transactions or in the application's own,
//! [`PostgresStore::append_in`]), reads and inspection, claims, leases,
//! completions, failures, dead letters, revives, cancels, snapshots,
//! presence, lifecycle, forks — with live feeds, wake-ups, cancels and
//! presence patches heard through one listening connection per instance
//! (LISTEN/NOTIFY). Its connections take store URLs as libpq does
//! (`postgres://…`, `postgresql://…`, with `sslmode`, `sslrootcert` and
//! `a2_schema`), TLS through rustls, with a pool of a documented size
//! ([`Database`], [`PostgresOptions`]). `docs/postgres-layout.md` gives
//! its tables and what each operation runs.
//!
//! The driver is tokio-postgres, pooled by deadpool-postgres: see
//! `docs/design.md` ("Postgres: the driver") for why.

mod append;
mod complete;
mod contract;
mod database;
mod feed;
mod fork;
mod inspect;
mod lifecycle;
mod listen;
mod notify;
mod op;
mod options;
mod plan;
mod presence;
mod rows;
mod schema;
mod session;
mod settle;
mod sql;
mod state;
mod store;
mod tls;
mod url;
mod work;
mod writes;

#[cfg(feature = "testing")]
pub mod testing;

pub use database::Database;
pub use options::PostgresOptions;
pub use schema::VERSION as LAYOUT_VERSION;
pub use store::PostgresStore;
pub use url::{SslMode, is_postgres_url};
