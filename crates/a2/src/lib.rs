//! a2: durable sessions.
//!
//! Each session is an append-only event log; handlers process its events with
//! leases, retries, ordered lanes and dead-lettering; reducers fold the log
//! into state; clients follow the log live and share presence.
//!
//! # Layout
//! - at the root, what an application uses: [`App`] (from the runtime),
//!   the [`Store`] trait and the [`MemoryStore`], events, the request and outcome types of every store
//!   operation, errors, clocks and id sources (from `a2-core`);
//! - [`runtime`]: handlers, reducers, workers (`a2-runtime`);
//! - `redis` (feature `redis`): the Redis store (`a2-redis`); feature
//!   `redis-tls` adds `rediss://`, feature `redis-http` Redis over REST
//!   (`https://` URLs, the Upstash protocol; see `docs/rest.md`);
//! - `sqlite` (feature `sqlite`): the SQLite store (`a2-sqlite`);
//! - `postgres` (feature `postgres`): the Postgres store (`a2-postgres`),
//!   which can also append inside the application's own transaction;
//! - [`store_author`]: what someone writing a new store needs besides the
//!   trait: the shared input checks, the shared readers of live feeds and
//!   the presence recovery bookkeeping.
//!
//! # A first program
//! A handler answers each question; a reducer counts the answers. Swap the
//! [`MemoryStore`] for `sqlite::SqliteStore::open("app.db", Default::default())`
//! (feature `sqlite`) or `redis::RedisStore::connect(url, options)` (feature
//! `redis`) and the same program survives restarts and runs on many
//! processes. Besides `a2` it needs `tokio` (features `macros` and
//! `rt-multi-thread`), `serde` (feature `derive`) and `serde_json`.
//!
//! ```
//! use a2::runtime::event;
//! use a2::{App, MemoryStore, NewEvent, StoreOptions};
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize)]
//! struct Question {
//!     text: String,
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let app = App::builder(MemoryStore::new(StoreOptions::default()))
//!         // Runs once per event of this type, retried with backoff on error.
//!         .handler("question", |ctx, q: Question| async move {
//!             ctx.progress("thinking", json!({ "about": q.text })).await?;
//!             Ok(event("answer", json!({ "text": format!("you asked {:?}", q.text) }))?.settled())
//!         })
//!         // Folds the log into state; snapshots are cached in the store.
//!         .reducer("answers", 0u32, |n, e| *n += u32::from(e.event_type == "answer"))
//!         .build()?;
//!     let question = NewEvent::new("question", json!({ "text": "is it durable?" }));
//!     app.append("session-1", vec![question]).await?;
//!     app.idle().await;
//!     let answers: u32 = app.state("session-1", "answers").await?;
//!     assert_eq!(answers, 1);
//!     Ok(())
//! }
//! ```
#![deny(missing_docs)]

pub use a2_core::{
    AppendClaim, AppendOptions, AppendOutcome, CancelOutcome, CancelStream, Cancellation, Cause,
    Claim, ClaimOutcome, ClaimRequest, Clock, CloseOutcome, CompleteOutcome, CompleteRequest,
    Error, ErrorCode, Event, EventState, EventStream, EventsPage, Expiry, ExpiryOutcome, FailKind,
    FailOutcome, FailRequest, FeedStats, ForkOrigin, ForkOutcome, HistoryOptions, HistoryPage,
    IdSource, IntoStore, Lease, Limits, ListSessionsOptions, ManualClock, MemoryStore, Millis,
    NewEvent, PageRequest, PresenceEntry, PresenceMeta, PresencePatch, PresenceStream, RandomIds,
    ReadEventsOptions, ReadRange, ReleaseRequest, RenewOutcome, RenewRequest, Result,
    ReviveOutcome, SequentialIds, SessionList, SessionPage, SessionSummary, Snapshot, SnapshotInfo,
    SnapshotWrite, StateRead, Store, StoreOptions, StoredEvent, SystemClock, TimeOrderedIds,
    TrimOutcome, WakeupStream,
};

/// The application: handlers, reducers and workers over a store
/// (see [`runtime`]).
pub use a2_runtime::{App, AppBuilder};

/// For authors of stores: the input checks every store runs before it
/// touches state (so bad input fails identically everywhere), the
/// contract's decisions as pure functions (`rules`), the shared
/// readers that give a store's feeds one read per wake-up (ST7), the presence
/// bookkeeping behind subscription recovery (P4), and the backend error
/// kept as an error's source. An application does not need these.
pub mod store_author {
    pub use a2_core::BackendError;
    pub use a2_core::feed;
    pub use a2_core::presence::PresenceView;
    pub use a2_core::rules;
    pub use a2_core::validate;
}

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

/// The Postgres store.
#[cfg(feature = "postgres")]
pub mod postgres {
    pub use a2_postgres::*;
}

/// The README's examples, compiled (and the first run) as doctests; its
/// Postgres example needs the feature `postgres`.
#[cfg(all(doctest, feature = "postgres"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
