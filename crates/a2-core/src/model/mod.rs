//! The data model of SPEC §1–§7: events, processing records, and the request
//! and outcome types of every store operation.
//!
//! # Layout
//! - `event`: causes, new events, stored events (§1).
//! - `append`: an append's options and the request a store applies (§2).
//! - `read`: reads of the log (R1, R2).
//! - `work`: claims, renewals, completions, failures, revives, releases (§3).
//! - `state`: snapshots (§4).
//! - `presence`: presence entries and patches (§5).
//! - `inspection`: listings and pages (§7).
//! - `lifecycle`: expiries, closes and trims (§10).
//! - `fork`: forks' origins and outcomes (§10).

mod append;
mod event;
mod fork;
mod inspection;
mod lifecycle;
mod presence;
mod read;
mod state;
mod work;

pub use append::*;
pub use event::*;
pub use fork::*;
pub use inspection::*;
pub use lifecycle::*;
pub use presence::*;
pub use read::*;
pub use state::*;
pub use work::*;
