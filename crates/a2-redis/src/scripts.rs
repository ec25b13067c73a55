//! The Lua scripts, one file each in `lua/`, compiled in and loaded once.
//!
//! Every write is one of these scripts (RD1). [`redis::Script`] calls a
//! script by its SHA-1 (`EVALSHA`) and, when the server answers `NOSCRIPT`
//! (after a restart or `SCRIPT FLUSH`), loads it and calls it again, so the
//! scripts reload themselves after a server restart.
//!
//! Session scripts are `helpers.lua` followed by the script's own file: the
//! helpers (record reads, lane advance, batched appends, counters,
//! wake-ups) exist once in the sources and run inside each script's atomic
//! step.

use std::sync::LazyLock;

use redis::Script;

macro_rules! session_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../lua/helpers.lua"),
                "\n",
                include_str!(concat!("../lua/", $file))
            ))
        })
    };
}

/// `lua/append.lua`.
pub static APPEND: LazyLock<Script> = session_script!("append.lua");
/// `lua/claim.lua`.
pub static CLAIM: LazyLock<Script> = session_script!("claim.lua");
/// `lua/renew.lua`.
pub static RENEW: LazyLock<Script> = session_script!("renew.lua");
/// `lua/release.lua`.
pub static RELEASE: LazyLock<Script> = session_script!("release.lua");
/// `lua/complete.lua`.
pub static COMPLETE: LazyLock<Script> = session_script!("complete.lua");
/// `lua/fail.lua`.
pub static FAIL: LazyLock<Script> = session_script!("fail.lua");
/// `lua/read.lua`.
pub static READ: LazyLock<Script> = session_script!("read.lua");
/// `lua/read_state.lua`.
pub static READ_STATE: LazyLock<Script> = session_script!("read_state.lua");
/// `lua/put_snapshots.lua`.
pub static PUT_SNAPSHOTS: LazyLock<Script> = session_script!("put_snapshots.lua");
/// `lua/clear.lua`.
pub static CLEAR: LazyLock<Script> = session_script!("clear.lua");
/// `lua/presence_set.lua`.
pub static PRESENCE_SET: LazyLock<Script> = session_script!("presence_set.lua");
/// `lua/presence_read.lua`.
pub static PRESENCE_READ: LazyLock<Script> = session_script!("presence_read.lua");
/// `lua/list_sessions.lua` (store-wide; no session helpers).
pub static LIST_SESSIONS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/list_sessions.lua")));
