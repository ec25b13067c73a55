//! The SQLite store of a2: durable sessions in one database file, with no
//! server to run.
//!
//! - **Durable:** an operation returns only after its transaction is
//!   committed, and with the default [`Synchronous::Full`] fsynced.
//! - **Group commit:** one writer thread owns the write connection and
//!   commits every operation queued meanwhile in one transaction, so
//!   concurrent writers share an fsync; an operation that fails has
//!   written nothing, and the others of its group stand.
//! - **Several processes:** any number of processes may open one file.
//!   Every write is one `BEGIN IMMEDIATE` transaction, so claims never hand
//!   out one attempt twice (C6); live feeds and presence hear writes of
//!   this process at once and of other processes within
//!   [`SqliteOptions::poll_interval`].
//!
//! ```no_run
//! use a2_sqlite::{SqliteOptions, SqliteStore};
//! let store = SqliteStore::open("app.db", SqliteOptions::default())?;
//! # Ok::<(), a2_core::Error>(())
//! ```
//!
//! The tables, indexes, the cost of each operation and `sqlite3` recipes
//! are in `docs/sqlite-layout.md`.
//!
//! # Layout
//! - `store`: [`SqliteStore`], [`SqliteOptions`], [`Synchronous`]; each
//!   [`a2_core::Store`] method validates, then queues a write or runs a read.
//! - `schema`: the tables, and opening a file (refusing foreign, newer or
//!   read-only ones without writing).
//! - `writer`: the writer thread and its group commit.
//! - `checkpoint`: the thread that checkpoints the write-ahead log, so the
//!   writer never stops to copy pages into the database file.
//! - `ops`: the writes, one file per operation, over the write connection;
//!   each calls the decisions of `a2_core::rules` and writes what they decide.
//! - `reads`: the reads, over a read connection.
//! - `readers`: the pool of read connections.
//! - `rows`: rows to a2 types and back; SQLite errors to a2 errors.
//! - `hub`: announcing commits to feeds and subscribers, within a process
//!   (push) and across processes (`PRAGMA data_version` poll).
//! - `feed`: live feeds and presence subscriptions.
#![deny(missing_docs)]

mod checkpoint;
mod effects;
mod feed;
mod hub;
mod ops;
mod readers;
mod reads;
mod rows;
mod schema;
mod store;
mod writer;

pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use store::{SqliteOptions, SqliteStore, Synchronous};
