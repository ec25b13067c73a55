//! The a2 contract as code: the data model, the [`Store`] trait every backend
//! implements, the error type, injected clocks and id sources, input
//! validation, and [`MemoryStore`], the embedded in-memory store.
//!
//! # Layout
//! - `error`: [`Error`] with its stable [`ErrorCode`]s.
//! - `clock`: [`Clock`], [`ManualClock`], [`IdSource`] and its implementations.
//! - `model`: events, processing records, requests and outcomes.
//! - `store`: the [`Store`] trait and [`StoreOptions`].
//! - `validate`: the input checks (A12) shared by every store.
//! - `presence`: [`presence::PresenceView`], the recovery bookkeeping of
//!   every store's presence subscriptions (P4).
//! - `rules`: the contract's decisions, each written once as a pure
//!   function that every store calls (see [`rules`]).
//! - `feed`: [`feed::Feeds`], the shared readers behind every store's live
//!   feeds.
//! - `memory`: [`MemoryStore`].
#![deny(missing_docs)]

mod clock;
mod error;
pub mod feed;
pub mod memory;
mod model;
pub mod presence;
pub mod rules;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod validate;

pub use clock::{
    Clock, IdSource, ManualClock, Millis, MonotonicClock, RandomIds, SequentialIds, SystemClock,
    TimeOrderedIds,
};
pub use error::{BackendError, Error, ErrorCode, Result};
pub use memory::MemoryStore;
pub use model::*;
pub use store::{
    CancelStream, EventStream, IntoStore, PresenceStream, Store, StoreOptions, WakeupStream,
};
pub use validate::Limits;
