//! The key layout (RD3, RD5): `{prefix}:` followed by an injective encoding
//! of caller names. docs/redis-layout.md describes every key.
//!
//! Names are percent-encoded: bytes outside `A-Z a-z 0-9 - . _ ~` become
//! `%XX` (uppercase hex). The encoding is injective and its output never
//! holds `{`, `}`, `:` or `%`-free look-alikes of another name, so a session
//! id can neither collide with another nor break the hash tag. The same
//! encoding is written in Lua (`helpers.lua`, `enc`) for the scripts that
//! build keys of many sessions; both must stay byte-for-byte equal.

use std::fmt::Write;

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

/// The keys of one session, all sharing the hash tag `{encoded id}` so that
/// a future cluster mode can run each session's scripts on one node (RD5).
#[derive(Debug, Clone)]
pub struct SessionKeys {
    /// Every key a session script gets, in the order `helpers.lua` names them.
    pub all: [String; SESSION_KEY_COUNT],
    /// The channel that carries wake-ups of appended events (ST2).
    pub events_channel: String,
    /// The channel that carries applied presence patches (P4).
    pub presence_channel: String,
}

/// How many keys a session script receives.
pub const SESSION_KEY_COUNT: usize = 12;

/// Builds keys under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix` (checked by the caller to hold no `{` or `}`).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Store-wide sorted set (all scores 0): every listed session id (I1).
    pub fn sessions(&self) -> String {
        format!("{}:sessions", self.prefix)
    }

    /// Store-wide sorted set (all scores 0): sessions with pending events (PS1).
    pub fn pending_sessions(&self) -> String {
        format!("{}:pending-sessions", self.prefix)
    }

    /// The keys of one session (or presence namespace: a namespace's presence
    /// lives beside the session of the same name, so `clear` removes it, I4).
    pub fn session(&self, session: &str) -> SessionKeys {
        let base = format!("{}:{{{}}}", self.prefix, encode(session));
        SessionKeys {
            all: [
                format!("{base}:log"),
                format!("{base}:rec"),
                format!("{base}:sum"),
                format!("{base}:pending"),
                format!("{base}:ready"),
                format!("{base}:lanes"),
                format!("{base}:ids"),
                self.sessions(),
                self.pending_sessions(),
                format!("{base}:snapshots"),
                format!("{base}:presence"),
                format!("{base}:timed"),
            ],
            events_channel: format!("{base}:events"),
            presence_channel: format!("{base}:presence-patches"),
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
    fn session_keys_share_one_hash_tag() {
        let keys = Keys::new("a2").session("x}{:");
        for key in keys.all.iter().filter(|k| k.contains('{')) {
            assert!(key.starts_with("a2:{x%7D%7B%3A}:"), "{key}");
        }
    }
}
