//! [`RedisOptions`], and the checks of a store's options.

use std::time::Duration;

use a2_core::*;

use crate::layout::{DEFAULT_PARTITIONS, MAX_PARTITIONS};

/// Options of [`RedisStore::connect`](crate::RedisStore::connect).
///
/// ```
/// use std::time::Duration;
/// use a2_redis::RedisOptions;
/// let options = RedisOptions::default()
///     .prefix("myapp")
///     .command_timeout(Duration::from_secs(1));
/// assert_eq!(options.prefix, "myapp");
/// ```
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Every key starts with `{prefix}:` (RD3); default `a2`. Must not be
    /// empty nor hold `{` or `}` (which would break the hash tags).
    pub prefix: String,
    /// Clock, id source and limits.
    pub store: StoreOptions,
    /// Bound on every command; a call to an unreachable server fails with
    /// `StoreUnavailable` after this long (default 5 s).
    pub command_timeout: Duration,
    /// Bound on opening a connection (default 2 s).
    pub connect_timeout: Duration,
    /// How often the store refreshes, in one request for all of them, its
    /// entries in the marks of the sessions its live feeds follow (ST2;
    /// default 2 s). The sessions' writes publish wake-ups while a mark is
    /// in force; an entry lasts three periods, so the wake-ups of a
    /// process that died with feeds open stop within three periods, and a
    /// mark that was lost (a flush, a restore) is back within one, its
    /// feeds reading once. Over REST this is the whole cost of idle feeds:
    /// one request per period while any session is followed
    /// (`docs/rest.md`). `a2 serve --follow-refresh-ms` sets it.
    pub follow_refresh: Duration,
    /// Wake-ups carry the appended events while they serialize to at most
    /// this many bytes; larger batches publish only the new frontier
    /// (ST2; default 64 KiB).
    pub wake_carry_cap: usize,
    /// How many partitions sessions hash into (1 ..= 1024; default 48).
    /// Fixed for the life of a key prefix: the first store to open a
    /// prefix records it, and a store opened with another count fails with
    /// `InvalidArgument` before writing anything. See
    /// `docs/redis-layout.md` for how to pick it.
    pub partitions: u16,
    /// On a cluster (`redis+cluster://`): how many replicas must hold a
    /// write before the call returns (`WAIT` after each script on the
    /// connection that carried it; default 0, the master's reply is
    /// enough). With 1, an acknowledged write survives its master's
    /// failure; a write the replicas do not confirm within the command
    /// timeout fails with `StoreUnavailable` (retry it: every write is
    /// idempotent or fenced). See docs/design.md, "On a cluster".
    pub acknowledged_by: usize,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "a2".to_owned(),
            store: StoreOptions::default(),
            command_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            follow_refresh: Duration::from_secs(2),
            wake_carry_cap: 64 * 1024,
            partitions: DEFAULT_PARTITIONS,
            acknowledged_by: 0,
        }
    }
}

impl RedisOptions {
    /// Sets the key prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the clock, id source and limits.
    pub fn store(mut self, store: StoreOptions) -> Self {
        self.store = store;
        self
    }

    /// Sets the command timeout.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the refresh period of the marks of followed sessions.
    pub fn follow_refresh(mut self, period: Duration) -> Self {
        self.follow_refresh = period;
        self
    }

    /// Sets the wake-up carry cap.
    pub fn wake_carry_cap(mut self, bytes: usize) -> Self {
        self.wake_carry_cap = bytes;
        self
    }

    /// Sets the partition count of a new key prefix.
    pub fn partitions(mut self, partitions: u16) -> Self {
        self.partitions = partitions;
        self
    }

    /// Sets how many replicas must hold a write before it returns (on a
    /// cluster).
    pub fn acknowledged_by(mut self, replicas: usize) -> Self {
        self.acknowledged_by = replicas;
        self
    }
}

pub(crate) fn check_options(options: &RedisOptions) -> Result<()> {
    if options.prefix.is_empty() || options.prefix.contains(['{', '}']) {
        return Err(Error::invalid(
            "the key prefix must be non-empty and hold no `{` or `}`",
        ));
    }
    if options.follow_refresh < Duration::from_millis(10) {
        return Err(Error::invalid(format!(
            "the follow refresh period must be at least 10 ms, not {:?}",
            options.follow_refresh
        )));
    }
    if !(1..=MAX_PARTITIONS).contains(&options.partitions) {
        return Err(Error::invalid(format!(
            "the partition count must be 1 ..= {MAX_PARTITIONS}, not {}",
            options.partitions
        )));
    }
    Ok(())
}
