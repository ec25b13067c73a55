//! The contract's decisions, each written once: pure functions over a
//! borrowed view of what a store keeps, deciding what an operation does.
//!
//! A store loads what a rule needs, calls it, and writes what it decides;
//! its own file for the operation holds only its I/O. The memory and SQLite
//! stores decide everything here; the Redis store decides here whatever it
//! decides in Rust (id assignment, the hole check of reads), while its Lua
//! scripts are a second implementation held to the same behaviour by the
//! conformance, property and differential tests.
//!
//! Every function is deterministic and touches no store, clock or runtime:
//! each file ends with a table of inputs and outcomes.
//!
//! # Layout
//! - `append`: id assignment (A3, A11), retries and partial duplicates
//!   (A5, A6), causes (A7).
//! - `claim`: whether a ready event may be claimed, and when (C2, C3, C5).
//! - `complete`: completions (CO3, CO4, CO5) and returned ids (CO6).
//! - `delay`: delayed events' due times (DL1, DL3).
//! - `fail`: failures (F2, F3, F4, F5, F6).
//! - `lease`: whether a lease is held (RN2, RL1).
//! - `renew`: renewals (RN1, RN2, RN3).
//! - `release`: releases (RL1).
//! - `revive`: revives (RV2, RV3).
//! - `read`: indexes out of range (CO1, F1, RV1) and holes in a log (E1).
//! - `state`: snapshots beyond the frontier (S2).
//! - `presence`: last writer wins (P1).
//! - `lifecycle`: closes (CL1, CL2) and trims (TR1, TR2, TR3).
//! - `fork`: forks (FK2, FK3, FK4).
//! - `cancel`: cancels (CN1, CN3).

pub mod append;
pub mod cancel;
pub mod claim;
pub mod complete;
pub mod delay;
pub mod fail;
pub mod fork;
pub mod lease;
pub mod lifecycle;
pub mod presence;
pub mod read;
pub mod release;
pub mod renew;
pub mod revive;
pub mod state;

use crate::clock::Millis;
use crate::model::StoredEvent;

/// What the decisions read of one event's processing record (§1), borrowed
/// from wherever a store keeps it. The fields mean what [`StoredEvent`]'s
/// fields of the same names mean.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record<'a> {
    /// How many times the event was claimed; the current attempt's number.
    pub attempt_count: u32,
    /// When it was processed, if it was.
    pub processed_at: Option<Millis>,
    /// The attempt whose completion processed it.
    pub processed_by_attempt: Option<u32>,
    /// The ids that completion returned, in order.
    pub returned_event_ids: &'a [String],
    /// The holder of its lease, if leased.
    pub claim_holder: Option<&'a str>,
    /// When its lease runs out.
    pub claim_expires_at: Option<Millis>,
    /// When it may be claimed again after a failure (F4), or at all when
    /// it was appended delayed (DL1).
    pub retry_at: Option<Millis>,
    /// How many of its attempts failed since it was appended or revived.
    pub failure_count: u32,
    /// The attempt that failed last.
    pub last_failed_attempt: Option<u32>,
    /// When it was dead-lettered, if it is.
    pub failed_at: Option<Millis>,
    /// When it was cancelled, if it was (CN1).
    pub cancelled_at: Option<Millis>,
}

impl Record<'_> {
    /// Neither processed nor dead-lettered (§1).
    pub fn is_pending(&self) -> bool {
        self.processed_at.is_none() && self.failed_at.is_none()
    }
}

impl<'a> From<&'a StoredEvent> for Record<'a> {
    fn from(row: &'a StoredEvent) -> Self {
        Record {
            attempt_count: row.attempt_count,
            processed_at: row.processed_at,
            processed_by_attempt: row.processed_by_attempt,
            returned_event_ids: &row.returned_event_ids,
            claim_holder: row.claim_holder.as_deref(),
            claim_expires_at: row.claim_expires_at,
            retry_at: row.retry_at,
            failure_count: row.failure_count,
            last_failed_attempt: row.last_failed_attempt,
            failed_at: row.failed_at,
            cancelled_at: row.cancelled_at,
        }
    }
}

#[cfg(any(test, feature = "rule-tables"))]
pub mod tables;
