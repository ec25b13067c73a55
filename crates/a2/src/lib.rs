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
//! - [`store_author`]: what someone writing a new store needs besides the
//!   trait: the shared input checks and the presence recovery bookkeeping.
#![deny(missing_docs)]

pub use a2_core::{
    AppendClaim, AppendOutcome, Cause, Claim, ClaimOutcome, ClaimRequest, Clock, CompleteOutcome,
    CompleteRequest, Error, ErrorCode, Event, EventStream, EventsPage, FailKind, FailOutcome,
    FailRequest, HistoryOptions, HistoryPage, IdSource, IntoStore, Lease, Limits,
    ListSessionsOptions, ManualClock, MemoryStore, Millis, NewEvent, PageRequest, PresenceEntry,
    PresenceMeta, PresencePatch, PresenceStream, RandomIds, ReadEventsOptions, ReadRange,
    ReleaseRequest, RenewOutcome, RenewRequest, Result, ReviveOutcome, SequentialIds, SessionList,
    SessionPage, SessionSummary, Snapshot, SnapshotInfo, SnapshotWrite, StateRead, Store,
    StoreOptions, StoredEvent, SystemClock, WakeupStream,
};

/// The application: handlers, reducers and workers over a store
/// (see [`runtime`]).
pub use a2_runtime::{App, AppBuilder};

/// For authors of stores: the input checks every store runs before it
/// touches state (so bad input fails identically everywhere), the presence
/// bookkeeping behind subscription recovery (P4), and the backend error
/// kept as an error's source. An application does not need these.
pub mod store_author {
    pub use a2_core::BackendError;
    pub use a2_core::presence::PresenceView;
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

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
