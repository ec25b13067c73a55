//! The memory store's operations, one file each: each loads what its rule
//! in [`crate::rules`] needs from the state under the lock, calls it, and
//! writes what it decides.

mod append;
mod cancel;
mod claim;
mod complete;
mod fail;
mod fork;
mod lifecycle;
mod presence;
mod read;
mod release;
mod renew;
mod revive;
mod sessions;
mod state;
