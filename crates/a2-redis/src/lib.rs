//! The Redis store of a2: every write is one atomic Lua script (RD1), each
//! session's log is a Redis stream whose entry ids are the event indexes
//! (RD2), and live feeds are woken by pushed messages that carry the new
//! events (ST2).
//!
//! ```no_run
//! # async fn demo() -> a2_core::Result<()> {
//! use a2_core::{NewEvent, Store};
//! use a2_redis::{RedisOptions, RedisStore};
//! use serde_json::json;
//!
//! let store = RedisStore::connect("redis://127.0.0.1:6379/", RedisOptions::default()).await?;
//! let out = store.append("chat-1", vec![NewEvent::new("user.message", json!({"text": "hi"}))]).await?;
//! assert_eq!(out.events[0].event.index, 1);
//! # Ok(()) }
//! ```
//!
//! # Server requirements and faults
//! One Redis ≥ 6.2 (or Valkey) server, or a Redis Cluster of Redis ≥ 7
//! (`redis+cluster://host:port,host:port`, see [`cluster`]); live feeds use
//! a RESP3 connection for pushes. The key layout is described in
//! `docs/redis-layout.md`.
//!
//! Every call is bounded by [`RedisOptions::command_timeout`]: when the
//! server is unreachable, hung or gone, calls fail with `StoreUnavailable`
//! instead of hanging, and open feeds end with it (ST5). The store needs no
//! reopening when the server is back: the command connection reconnects on
//! the next call, scripts and the function library are reloaded when the
//! server lost them, and the push
//! connection reconnects, resubscribes and makes its feeds catch up. A new
//! feed from the last delivered index continues exactly. A call whose
//! connection was lost before its reply (the first call after a restart)
//! is sent once more when a replay is harmless (RD8, see `replay`).
//!
//! # Layout
//! - `layout`: the key layout, partitions and the injective name encoding
//!   (RD3, RD5).
//! - `lua`: the script prelude (`lua/prelude.lua`, its placeholders filled
//!   in) and how scripts are assembled.
//! - `ops`: one module per operation beside its script in `lua/`: typed
//!   argument encoders and reply enums.
//! - `transport`: the one seam every command goes through, and its RESP
//!   implementation.
//! - `codec`: decoding replies (log entries, packed records) into model types.
//! - `inner`: what the store and its feeds share, and the script runner.
//! - `batcher`: group commit: concurrent session scripts share one call.
//! - `replay`: which calls are sent once more after a lost connection (RD8).
//! - [`cluster`]: Redis Cluster: the cluster transport and the sharded
//!   push subscriber (`redis+cluster://` URLs).
//! - `options`: [`RedisOptions`] and their checks.
//! - `connect`: one constructor of [`RedisStore`] per deployment (a server,
//!   your own client, Sentinel, Cluster, REST).
//! - `store`: [`RedisStore`] over any transport; the `Store` methods by
//!   kind (`appending`, `reads`, `work`, `writes`), each encoding through
//!   `ops` and deciding in Rust with `a2_core::rules` (ids, retries, holes).
//! - `subscriber`: one shared push connection for every feed (ST3).
//! - `feed`: live event feeds and presence subscriptions (ST1, ST2, ST3, ST4,
//!   ST5, P4).
//! - `rest` (feature `rest`): the transport and subscribers over the REST
//!   protocol (`https://` URLs).
//! - `testing` (feature `testing`): throwaway `redis-server` processes
//!   (with `rest`, also a REST gateway in front of one).
#![deny(missing_docs)]

mod args;
mod batcher;
pub mod cluster;
mod codec;
mod connect;
mod feed;
mod inner;
mod keeper;
mod layout;
mod lua;
mod marks;
mod ops;
mod options;
mod replay;
pub mod sentinel;
mod store;
pub mod subscriber;
pub mod transport;
mod wakeups;

#[cfg(feature = "rest")]
pub mod rest;

#[cfg(feature = "testing")]
pub mod testing;

pub use layout::{DEFAULT_PARTITIONS, MAX_PARTITIONS, SessionKeys};
pub use options::RedisOptions;
pub use store::RedisStore;
