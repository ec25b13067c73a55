//! The cases, one module per SPEC section. Each case is a
//! `pub async fn(SetupFn)` that opens its own store through
//! [`crate::fixture`] and panics when the store breaks the rules its name
//! and doc cite.

pub mod append;
pub mod append_claim;
pub mod cancel;
pub mod claim;
pub mod complete;
pub mod delay;
pub mod fail;
pub mod feeds;
pub mod followers;
pub mod fork;
pub mod frontier;
pub mod inspection;
pub mod lifecycle;
pub mod limits;
pub mod names;
pub mod pending;
pub mod presence;
pub mod races;
pub mod read;
pub mod release;
pub mod renew;
pub mod revive;
pub mod state;
pub mod values;
