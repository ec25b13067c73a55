//! The JSON shapes of the HTTP API, each with its OpenAPI schema.
//!
//! They mirror the store's types (`a2_core`) field for field, with tagged
//! outcomes (`{"outcome": "claimed", …}`) where the store has enums, and
//! they are what is serialized, so the published document describes
//! exactly what goes over the wire.

//!
//! # Layout
//! - `events`: events and appends.
//! - `sessions`: listings, pages, state and presence.
//! - `work`: the work API (§3).

mod events;
mod sessions;
mod work;

pub use events::*;
pub use sessions::*;
pub use work::*;
