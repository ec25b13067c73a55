//! The Postgres store of a2, under construction: its connections — store
//! URLs as libpq takes them (`postgres://…`, `postgresql://…`, with
//! `sslmode`, `sslrootcert` and `a2_schema`), TLS through rustls, a pool of
//! a documented size ([`Database`], [`PostgresOptions`]) — its tables, and
//! [`PostgresStore`]'s appends and reads, in the store's transactions or in
//! the application's own ([`PostgresStore::append_in`]). The rest of the
//! `Store` contract follows on the same tables (`docs/postgres-layout.md`).
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
