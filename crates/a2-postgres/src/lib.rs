//! The Postgres store of a2, under construction: today its connections —
//! store URLs as libpq takes them (`postgres://…`, `postgresql://…`, with
//! `sslmode` and `sslrootcert`), TLS through rustls, and a pool of a
//! documented size ([`Database`], [`PostgresOptions`]). The store itself
//! follows on top of them (`docs/postgres-layout.md`).
//!
//! The driver is tokio-postgres, pooled by deadpool-postgres: see
//! `docs/design.md` ("Postgres: the driver") for why.

mod database;
mod options;
mod tls;
mod url;

#[cfg(feature = "testing")]
pub mod testing;

pub use database::Database;
pub use options::PostgresOptions;
pub use url::{SslMode, is_postgres_url};
