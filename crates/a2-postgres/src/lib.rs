//! The Postgres store of a2, under construction: its connections — store
//! URLs as libpq takes them (`postgres://…`, `postgresql://…`, with
//! `sslmode`, `sslrootcert` and `a2_schema`), TLS through rustls, a pool of
//! a documented size ([`Database`], [`PostgresOptions`]) — its tables, and
//! [`PostgresStore`]'s appends (in the store's transactions or in the
//! application's own, [`PostgresStore::append_in`]), reads, claims,
//! renewals, releases, completions, failures, revives, cancels, snapshots
//! and pending sessions. The rest of the `Store` contract (feeds and
//! wake-ups, presence, inspection, lifecycle, forks) follows on the same
//! tables (`docs/postgres-layout.md`); until then `PostgresStore` does not
//! implement `a2_core::Store`.
//!
//! The driver is tokio-postgres, pooled by deadpool-postgres: see
//! `docs/design.md` ("Postgres: the driver") for why.

mod append;
mod complete;
mod database;
mod lifecycle;
mod notify;
mod op;
mod options;
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

#[cfg(feature = "testing")]
pub mod testing;

pub use database::Database;
pub use options::PostgresOptions;
pub use store::PostgresStore;
pub use url::{SslMode, is_postgres_url};
