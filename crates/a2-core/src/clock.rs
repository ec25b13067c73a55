//! Injected time and ids: every store takes a [`Clock`] and an [`IdSource`].

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Milliseconds since the Unix epoch, the only unit of time in a2.
pub type Millis = i64;

/// The longest lease or presence ttl, in milliseconds: 100 years (X2). A
/// longer ttl (up to `u64::MAX`) is valid and counts as this, so an expiry
/// never overflows, and `now + ttl` stays exact in a double (Lua numbers).
pub const MAX_TTL_MS: u64 = 100 * 365 * 24 * 60 * 60 * 1000;

/// The ttl a call acts on (X2): `ttl_ms` capped at [`MAX_TTL_MS`].
pub fn effective_ttl(ttl_ms: u64) -> u64 {
    ttl_ms.min(MAX_TTL_MS)
}

/// The expiry of a ttl starting at `now` (X2, P2, C2): `now` plus the
/// [`effective_ttl`], saturating at the largest time.
///
/// ```
/// use a2_core::validate::{MAX_TTL_MS, expiry};
/// assert_eq!(expiry(1_000, 50), 1_050);
/// assert_eq!(expiry(1_000, u64::MAX), 1_000 + MAX_TTL_MS as i64);
/// ```
pub fn expiry(now: Millis, ttl_ms: u64) -> Millis {
    // MAX_TTL_MS is far below i64::MAX.
    now.saturating_add(i64::try_from(effective_ttl(ttl_ms)).unwrap_or(i64::MAX))
}

/// The store's notion of now. Tests inject a [`ManualClock`] and move it
/// instead of sleeping, also against a real Redis server.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> Millis;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A clock that only moves when told to.
///
/// ```
/// use a2_core::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// clock.advance(500);
/// assert_eq!(clock.now_ms(), 1_500);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `start_ms`.
    pub fn new(start_ms: Millis) -> Self {
        Self {
            now: AtomicI64::new(start_ms),
        }
    }

    /// Moves the clock forward (or backward, with a negative delta).
    pub fn advance(&self, delta_ms: i64) {
        self.now.fetch_add(delta_ms, Ordering::SeqCst);
    }

    /// Sets the clock to `now_ms`.
    pub fn set(&self, now_ms: Millis) {
        self.now.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }
}

/// The clock a store instance reads: the injected clock, never backward.
/// When the clock moves back (a wall clock stepped back, a test's manual
/// clock set earlier), it reads as the latest time it read until the clock
/// passes that again, so nothing a store decided by time is undone by the
/// step: a lease that expired stays expired, a session found expired stays
/// gone (EX3), `created_at` never runs backward within an instance. Every
/// store reads its clock through one ([`crate::StoreOptions::instance`]).
///
/// ```
/// use std::sync::Arc;
/// use a2_core::{Clock, ManualClock, MonotonicClock};
/// let manual = Arc::new(ManualClock::new(1_000));
/// let clock = MonotonicClock::new(manual.clone());
/// assert_eq!(clock.now_ms(), 1_000);
/// manual.set(400);
/// assert_eq!(clock.now_ms(), 1_000, "held at the latest time read");
/// manual.set(1_200);
/// assert_eq!(clock.now_ms(), 1_200);
/// ```
#[derive(Debug)]
pub struct MonotonicClock {
    clock: std::sync::Arc<dyn Clock>,
    latest: AtomicI64,
}

impl MonotonicClock {
    /// `clock`, read never backward.
    pub fn new(clock: std::sync::Arc<dyn Clock>) -> Self {
        Self {
            clock,
            latest: AtomicI64::new(Millis::MIN),
        }
    }
}

impl Clock for MonotonicClock {
    fn now_ms(&self) -> Millis {
        let now = self.clock.now_ms();
        let before = self.latest.fetch_max(now, Ordering::SeqCst);
        before.max(now)
    }
}

/// Where ids of events appended without one come from (A11). Ids must be
/// URL-safe and should never repeat (the store keeps them unique within a
/// session, A4; random ids are unique everywhere).
pub trait IdSource: Send + Sync + fmt::Debug + 'static {
    /// A fresh id.
    fn next_id(&self) -> String;
}

/// Random ids: 32 lowercase hex digits of a version-4 UUID.
///
/// ```
/// use a2_core::{IdSource, RandomIds};
/// let id = RandomIds.next_id();
/// assert_eq!(id.len(), 32);
/// assert!(id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
/// assert_ne!(id, RandomIds.next_id());
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomIds;

impl IdSource for RandomIds {
    fn next_id(&self) -> String {
        // Encoding into a stack buffer skips `Display` and the formatter
        // machinery `to_string` goes through, once per generated id.
        let mut buf = [0; uuid::fmt::Simple::LENGTH];
        uuid::Uuid::new_v4()
            .simple()
            .encode_lower(&mut buf)
            .to_owned()
    }
}

/// Random ids that sort by the time they were drawn: 32 lowercase hex
/// digits of a version-7 UUID (48 bits of wall-clock milliseconds, then a
/// counter and random bits; later ids of one process sort after earlier
/// ones). The default id source of the stores: an index of ids then grows
/// at its end, as the log does, instead of at random places, which keeps
/// the pages an append touches few and hot however many events are stored
/// (with [`RandomIds`], writing 10 M events to a SQLite file took 4.5 times
/// as long, and the work cycle on it ran a quarter slower). The time in an
/// id is about the event's `created_at` (the wall clock, not the store's
/// injected one); use [`RandomIds`] where ids must not tell it.
///
/// ```
/// use a2_core::{IdSource, TimeOrderedIds};
/// let first = TimeOrderedIds.next_id();
/// let second = TimeOrderedIds.next_id();
/// assert_eq!(first.len(), 32);
/// assert!(first.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
/// assert!(first < second);
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct TimeOrderedIds;

impl IdSource for TimeOrderedIds {
    fn next_id(&self) -> String {
        let mut buf = [0; uuid::fmt::Simple::LENGTH];
        uuid::Uuid::now_v7()
            .simple()
            .encode_lower(&mut buf)
            .to_owned()
    }
}

/// Predictable ids `{prefix}{n}` with `n` counting from 1: for tests that
/// compare two stores row by row.
///
/// ```
/// use a2_core::{IdSource, SequentialIds};
/// let ids = SequentialIds::new("e");
/// assert_eq!(ids.next_id(), "e1");
/// assert_eq!(ids.next_id(), "e2");
/// ```
#[derive(Debug)]
pub struct SequentialIds {
    prefix: String,
    next: AtomicU64,
}

impl SequentialIds {
    /// Ids `{prefix}1`, `{prefix}2`, …
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            next: AtomicU64::new(1),
        }
    }
}

impl IdSource for SequentialIds {
    fn next_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        format!("{}{}", self.prefix, n)
    }
}
