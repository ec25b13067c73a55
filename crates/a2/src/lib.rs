//! a2: durable sessions.
//!
//! Each session is an append-only event log; handlers process its events with
//! leases, retries, ordered lanes and dead-lettering; reducers fold the log
//! into state; clients follow the log live and share presence.
//!
//! # Layout
//! - the contract and the in-memory store, re-exported from `a2-core`;
//! - [`runtime`]: handlers, reducers, workers (`a2-runtime`);
//! - `redis` (feature `redis`): the Redis store (`a2-redis`);
//! - `sqlite` (feature `sqlite`): the SQLite store (`a2-sqlite`).
#![deny(missing_docs)]

pub use a2_core::*;

/// Handlers, reducers, draining, workers and graceful shutdown.
pub mod runtime {
    pub use a2_runtime::*;
}

/// The Redis store.
#[cfg(feature = "redis")]
pub mod redis {
    pub use a2_redis::*;
}

/// The SQLite store.
#[cfg(feature = "sqlite")]
pub mod sqlite {
    pub use a2_sqlite::*;
}

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
