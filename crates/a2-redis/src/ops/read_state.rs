//! `read_state`'s atomic part (S1): `lua/read_state.lua`.

use a2_core::{Event, Result};
use redis::Value;

use crate::lua::SessionScript;

use super::{Args, lua_count, next};
use crate::codec;

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("read_state");

pub(crate) fn encode(reducer: &str, count: usize) -> Args {
    let mut args = Args::default();
    args.s("reducer", reducer).n("count", lua_count(count));
    args
}

/// `(frontier, first retained index, stored snapshot, first page of
/// events after it)`.
pub(crate) type StatePage = (u64, u64, Option<String>, Vec<Event>);

/// Decodes `read_state.lua`'s reply.
pub(crate) fn decode(session: &str, reply: Value) -> Result<StatePage> {
    let mut items = codec::array(reply)?.into_iter();
    let frontier = codec::uint(next(&mut items)?)?;
    let first = codec::uint(next(&mut items)?)?;
    let snapshot = codec::opt_string(next(&mut items)?)?;
    let events = items
        .map(|entry| codec::entry_reply(session, entry).map(|e| e.event))
        .collect::<Result<Vec<_>>>()?;
    Ok((frontier, first, snapshot, events))
}
