//! The Redis store of a2.
//!
//! # Layout
//! - `testing` (feature `testing`): throwaway `redis-server` processes for tests.
#![deny(missing_docs)]

#[cfg(feature = "testing")]
pub mod testing;
