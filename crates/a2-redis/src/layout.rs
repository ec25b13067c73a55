//! The key layout (RD3, RD5): every key is `{prefix}:{{tag}}:…`, where the
//! hash tag names the session's *partition*. docs/redis-layout.md
//! describes every key.
//!
//! # Partitions
//! Sessions hash into a fixed number of partitions (FNV-1a of the session
//! id, modulo the count). Each partition is one hash tag, so each session
//! script touches keys of one cluster slot only: the session's own keys
//! and its partition's two sets (sessions listed, sessions with pending
//! work). The partition count is fixed for the life of a key prefix: it is
//! recorded in `{prefix}:config` by the first store that opens the prefix,
//! and a store opened with another count fails before it writes anything.
//!
//! A partition's tag is `p{n}.{k}`, with `k` the smallest number that puts
//! the tag's cluster slot into the `n`-th equal share of the 16 384 slots,
//! so the partitions spread evenly over a cluster's masters whatever its
//! size. On a single server the tags cost nothing.
//!
//! # Names
//! Caller names are percent-encoded before they go into a key: bytes
//! outside `A-Z a-z 0-9 - . _ ~` become `%XX` (uppercase hex). The encoding
//! is injective and its output never holds `{`, `}` or `:`, so a session id
//! can neither collide with another nor break a key's structure. The same
//! encoding is written in Lua (`lua/partition.lua`, `enc`) for the scripts
//! that build keys of many sessions; both must stay byte-for-byte equal.

use std::fmt::Write;

/// Partitions of a new key prefix unless the options say otherwise: 48
/// spreads evenly over 2, 3, 4, 6, 8, 12, 16 or 24 cluster masters.
pub const DEFAULT_PARTITIONS: u16 = 48;

/// The most partitions a prefix may have.
pub const MAX_PARTITIONS: u16 = 1024;

/// The layout version recorded in `{prefix}:config`.
pub const LAYOUT_VERSION: &str = "2";

/// Percent-encodes a caller name (see the module docs).
pub fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            // Writing into a String cannot fail.
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// CRC16/XMODEM, the checksum Redis Cluster maps keys to slots with.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The cluster slot of a hash tag's content.
pub fn slot(tag: &str) -> u16 {
    crc16(tag.as_bytes()) % 16384
}

/// The partition of a session: FNV-1a (64 bit) of its id, modulo `count`.
pub fn partition_of(session: &str, count: u16) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in session.as_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % u64::from(count.max(1))) as usize
}

/// The hash tag of partition `n` of `count` (see the module docs).
fn partition_tag(n: u16, count: u16) -> String {
    let count = u32::from(count.max(1));
    let low = u32::from(n) * 16384 / count;
    let high = (u32::from(n) + 1) * 16384 / count;
    // About `count` tries on average; bounded by construction since CRC16
    // takes every value, but keep a plain fallback all the same.
    for k in 0..1_000_000u32 {
        let tag = format!("p{n}.{k}");
        if (low..high).contains(&u32::from(slot(&tag))) {
            return tag;
        }
    }
    format!("p{n}")
}

/// The names of the keys a session script gets, in `KEYS` order. The Lua
/// prelude (`lua/prelude.lua`, rendered by `src/lua.rs`) is filled in from this list.
pub const SESSION_KEY_NAMES: [&str; 10] = [
    "log",
    "meta",
    "ready",
    "timed",
    "lanes",
    "snapshots",
    "presence",
    "sessions",
    "pending",
    "expiring",
];

/// The names of [`SESSION_KEY_NAMES`] that are the partition's, not the
/// session's: `{prefix}:{{tag}}:{name}`. Every other key of a session is
/// `{prefix}:{{tag}}:{encoded id}:{name}`, so a batch script derives a
/// session's keys from its `meta` key alone (`lua::prelude`).
pub const PARTITION_KEY_NAMES: [&str; 3] = ["sessions", "pending", "expiring"];

/// The last part of a session's wake-up channel, `…:{encoded id}:events`.
pub const EVENTS_CHANNEL: &str = "events";

/// The last part of a partition's work channel, `{prefix}:{{tag}}:work`.
pub const WORK_CHANNEL: &str = "work";
/// The partition channel of cancels of leased attempts (CN5), after the
/// partition's base: `{index}:{attempt}:{session id}`.
pub const CANCEL_CHANNEL: &str = "cancels";

/// The keys and channels of one session (or presence namespace: a
/// namespace's presence lives beside the session of the same name, so
/// `clear` removes it, I4). All share the partition's hash tag.
#[derive(Debug, Clone)]
pub struct SessionKeys {
    /// Stream: the event log, entry id `{index}-0` (RD2).
    pub log: String,
    /// Hash: counters, the id index and the packed processing records.
    pub meta: String,
    /// Sorted set: claimed-before events claimable at once (score = index).
    pub ready: String,
    /// Sorted set: events claimable from a time (lease expiry, retry time).
    pub timed: String,
    /// Sorted set (scores 0): `{lane}:{index:020}` per unprocessed lane event.
    pub lanes: String,
    /// Hash: reducer → `{index}|{updated_at}|{state}`.
    pub snapshots: String,
    /// Hash: presence entries of the namespace named like the session.
    pub presence: String,
    /// Sorted set: store instances whose live feeds follow the session,
    /// scored by when their entry lapses (ST2, `lua/follow.lua`).
    pub followers: String,
    /// The partition's sorted set of listed sessions.
    pub sessions: String,
    /// The partition's sorted set of sessions with pending work.
    pub pending: String,
    /// The partition's sorted set of sessions that expire, by the time
    /// their keys expire on the server (EX5).
    pub expiring: String,
    /// Channel: wake-ups of appended events (ST2).
    pub events_channel: String,
    /// Channel: applied presence patches (P4).
    pub presence_channel: String,
    /// Channel: the partition's "a session gained work" wake-ups.
    pub work_channel: String,
}

impl SessionKeys {
    /// The keys in the order session scripts get them as `KEYS`.
    pub fn keys(&self) -> [&str; 10] {
        [
            &self.log,
            &self.meta,
            &self.ready,
            &self.timed,
            &self.lanes,
            &self.snapshots,
            &self.presence,
            &self.sessions,
            &self.pending,
            &self.expiring,
        ]
    }
}

/// One partition's keys.
#[derive(Debug, Clone)]
pub struct PartitionKeys {
    /// Sorted set (scores 0) of listed sessions (I1).
    pub sessions: String,
    /// Sorted set (scores 0) of sessions with pending work, left lazily (PS1).
    pub pending: String,
    /// Sorted set of sessions that expire, scored by when their keys expire
    /// on the server (EX5).
    pub expiring: String,
    /// The prefix of every session key of the partition: `{prefix}:{{tag}}:`.
    pub base: String,
    /// Channel: "a session gained work" wake-ups.
    pub work_channel: String,
    /// Channel: cancels of leased attempts (CN5).
    pub cancel_channel: String,
}

/// Builds keys under one prefix and partition count.
#[derive(Debug, Clone)]
pub struct Layout {
    prefix: String,
    partitions: Vec<PartitionKeys>,
}

impl Layout {
    /// Keys under `prefix` (checked by the caller to hold no `{` or `}`)
    /// with `count` partitions (1 ..= [`MAX_PARTITIONS`], checked by the caller).
    pub fn new(prefix: impl Into<String>, count: u16) -> Self {
        let prefix = prefix.into();
        let partitions = (0..count.max(1))
            .map(|n| {
                let base = format!("{prefix}:{{{}}}:", partition_tag(n, count));
                PartitionKeys {
                    sessions: format!("{base}sessions"),
                    pending: format!("{base}pending"),
                    expiring: format!("{base}expiring"),
                    work_channel: format!("{base}{WORK_CHANNEL}"),
                    cancel_channel: format!("{base}{CANCEL_CHANNEL}"),
                    base,
                }
            })
            .collect();
        Self { prefix, partitions }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The prefix's config hash (layout version, partition count).
    pub fn config(&self) -> String {
        format!("{}:config", self.prefix)
    }

    /// Every partition's keys.
    pub fn partitions(&self) -> &[PartitionKeys] {
        &self.partitions
    }

    /// The keys of one session.
    pub fn session(&self, session: &str) -> SessionKeys {
        let count = self.partitions.len() as u16;
        let part = &self.partitions[partition_of(session, count)];
        let base = format!("{}{}:", part.base, encode(session));
        SessionKeys {
            log: format!("{base}log"),
            meta: format!("{base}meta"),
            ready: format!("{base}ready"),
            timed: format!("{base}timed"),
            lanes: format!("{base}lanes"),
            snapshots: format!("{base}snapshots"),
            presence: format!("{base}presence"),
            followers: format!("{base}followers"),
            sessions: part.sessions.clone(),
            pending: part.pending.clone(),
            expiring: part.expiring.clone(),
            events_channel: format!("{base}{EVENTS_CHANNEL}"),
            presence_channel: format!("{base}presence-patches"),
            work_channel: part.work_channel.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_keeps_safe_bytes_and_escapes_the_rest() {
        assert_eq!(encode("chat-1.a_b~"), "chat-1.a_b~");
        assert_eq!(encode("a:b{c}"), "a%3Ab%7Bc%7D");
        assert_eq!(encode("%"), "%25");
        assert_eq!(encode("é"), "%C3%A9");
    }

    #[test]
    fn encoding_is_injective_on_tricky_names() {
        let names = ["a:b", "a%3Ab", "a", "a:", ":a", "{a}", "a b", "a%20b"];
        let encoded: std::collections::HashSet<_> = names.iter().map(|n| encode(n)).collect();
        assert_eq!(encoded.len(), names.len());
    }

    #[test]
    fn crc16_matches_the_cluster_specification() {
        // The check value of CRC16/XMODEM, and a slot Redis documents.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
    }

    #[test]
    fn partition_tags_spread_over_equal_shares_of_the_slots() {
        for count in [1u16, 3, 16, 48] {
            let layout = Layout::new("a2", count);
            for (n, part) in layout.partitions().iter().enumerate() {
                let tag = part.base.trim_start_matches("a2:{").trim_end_matches("}:");
                let share = usize::from(slot(tag)) * usize::from(count) / 16384;
                assert_eq!(share, n, "{tag} of {count}");
            }
        }
    }

    #[test]
    fn session_keys_share_their_partition_tag() {
        let layout = Layout::new("a2", 48);
        let keys = layout.session("x}{:");
        let tag = keys.sessions.trim_end_matches("sessions");
        for key in keys.keys() {
            assert!(key.starts_with(tag), "{key} under {tag}");
        }
        assert!(keys.log.ends_with(":x%7D%7B%3A:log"), "{}", keys.log);
        assert!(keys.events_channel.starts_with(tag));
    }

    /// Batch scripts rebuild a session's names from its `meta` key
    /// (`enter_session` in `lua::prelude`): this is what they assume.
    #[test]
    fn session_names_derive_from_the_meta_key() {
        let layout = Layout::new("pre:fix", 48);
        let keys = layout.session("a:b}{c%");
        let base = keys.meta.strip_suffix("meta").expect("meta ends the key");
        let tag_end = base.find("}:").expect("a tag") + 2;
        let part = &base[..tag_end];
        for (name, key) in SESSION_KEY_NAMES.iter().zip(keys.keys()) {
            if PARTITION_KEY_NAMES.contains(name) {
                assert_eq!(key, format!("{part}{name}"));
            } else {
                assert_eq!(key, format!("{base}{name}"));
            }
        }
        assert_eq!(keys.events_channel, format!("{base}{EVENTS_CHANNEL}"));
        assert_eq!(keys.work_channel, format!("{part}{WORK_CHANNEL}"));
    }
}
