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
//! # Layout
//! - `keys`: the key layout and the injective name encoding (RD3, RD5).
//! - `scripts`: the Lua scripts of `lua/`, loaded once, called by hash.
//! - `transport`: the one seam every command goes through, and its RESP
//!   implementation.
//! - `codec`: decoding script replies into model types.
//! - `store`: [`RedisStore`], the `Store` implementation.
//! - `subscriber`: one shared push connection for every feed (ST3).
//! - `feed`: live event feeds and presence subscriptions (ST1–ST5, P4).
//! - `testing` (feature `testing`): throwaway `redis-server` processes.
#![deny(missing_docs)]

mod codec;
mod feed;
mod keys;
mod scripts;
mod store;
mod subscriber;
mod transport;

#[cfg(feature = "testing")]
pub mod testing;

pub use store::{RedisOptions, RedisStore};
