//! The a2 contract as tests: one `pub async fn` per behaviour, each naming the
//! SPEC rule ids it checks, run by every store through [`conformance!`].
//!
//! A store's test file opens the store for a case through a [`SetupFn`]:
//!
//! ```ignore
//! async fn setup(options: a2_core::StoreOptions) -> a2_conformance::Stores {
//!     let store = std::sync::Arc::new(a2_core::MemoryStore::new(options));
//!     a2_conformance::Stores::new(store.clone(), store)
//! }
//! mod memory {
//!     a2_conformance::conformance!(super::setup);
//! }
//! ```
#![deny(missing_docs)]

use std::sync::Arc;

use a2_core::{ManualClock, Store, StoreOptions};
use futures::future::BoxFuture;

/// Opens a fresh, empty store for one case with the given options, plus a
/// second handle on the same data as another process would open it.
pub type SetupFn = fn(StoreOptions) -> BoxFuture<'static, Stores>;

/// What a [`SetupFn`] returns.
#[derive(Clone)]
pub struct Stores {
    /// The store under test.
    pub store: Arc<dyn Store>,
    /// Another handle on the same data (another connection, as a second
    /// process would have). For the memory store, the same store.
    pub peer: Arc<dyn Store>,
    /// What this backend can and cannot do.
    pub caps: Capabilities,
}

impl Stores {
    /// A store and its peer, with default capabilities.
    pub fn new(store: Arc<dyn Store>, peer: Arc<dyn Store>) -> Self {
        Self {
            store,
            peer,
            caps: Capabilities::default(),
        }
    }
}

/// Differences between backends, passed in by the backend, never detected.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Capabilities {}

/// A store opened for a case with a manual clock.
pub struct Fixture {
    /// The store under test.
    pub store: Arc<dyn Store>,
    /// Another handle on the same data.
    pub peer: Arc<dyn Store>,
    /// The clock both handles use.
    pub clock: Arc<ManualClock>,
    /// The backend's capabilities.
    pub caps: Capabilities,
}

/// The clock's starting time in every case: 2023-11-14T22:13:20Z.
pub const START_MS: i64 = 1_700_000_000_000;

/// Opens a store with a [`ManualClock`] at [`START_MS`] and the other options
/// at their defaults.
pub async fn fixture(setup: SetupFn) -> Fixture {
    fixture_with(setup, StoreOptions::default()).await
}

/// Opens a store with a [`ManualClock`] at [`START_MS`] replacing the clock of
/// `options`.
pub async fn fixture_with(setup: SetupFn, options: StoreOptions) -> Fixture {
    let clock = Arc::new(ManualClock::new(START_MS));
    let stores = setup(options.with_clock(clock.clone())).await;
    Fixture {
        store: stores.store,
        peer: stores.peer,
        clock,
        caps: stores.caps,
    }
}
