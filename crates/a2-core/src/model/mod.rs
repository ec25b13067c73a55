//! The data model of SPEC §1–§7: events, processing records, and the request
//! and outcome types of every store operation.
//!
//! # Layout
//! - `event`: causes, new events, stored events, appends (§1, §2).
//! - `read`: reads of the log (R1, R2).
//! - `work`: claims, renewals, completions, failures, revives, releases (§3).
//! - `state`: snapshots (§4).
//! - `presence`: presence entries and patches (§5).
//! - `inspection`: listings and pages (§7).
//! - `lifecycle`: closes and trims (§10).

mod event;
mod inspection;
mod lifecycle;
mod presence;
mod read;
mod state;
mod work;

pub use event::*;
pub use inspection::*;
pub use lifecycle::*;
pub use presence::*;
pub use read::*;
pub use state::*;
pub use work::*;
