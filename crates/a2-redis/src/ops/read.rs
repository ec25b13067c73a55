//! Pages of rows (R1, R2, I2) and of a live feed's events: `lua/read.lua`.

use a2_core::{Event, Result, StoredEvent};
use redis::Value;

use crate::lua::SessionScript;

use super::{Args, lua_count, next};
use crate::codec;

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("read");

/// Which page.
pub(crate) enum Page {
    /// Ascending, after `after`, up to `through` (else the frontier).
    Asc { after: u64, through: Option<u64> },
    /// Descending, before `before` (else from the frontier).
    Desc { before: Option<u64> },
    /// Ascending log entries after `after`, without their records.
    Events { after: u64 },
}

/// Where the session's log starts and ends, read with the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// The frontier.
    pub frontier: u64,
    /// The first retained index (TR1).
    pub first: u64,
    /// The frontier of the session's close, if it is closed (CL1).
    pub closed: Option<u64>,
    /// The session's deadline, if it expires (EX1).
    pub deadline: Option<a2_core::Millis>,
}

pub(crate) fn encode(page: &Page, count: usize) -> Args {
    let mut args = Args::default();
    match page {
        Page::Asc { after, through } => args.s("direction", "asc").n("bound", *after).s(
            "through",
            through.map(|t| t.to_string()).unwrap_or_default(),
        ),
        Page::Desc { before } => args
            .s("direction", "desc")
            .s("bound", before.map(|b| b.to_string()).unwrap_or_default())
            .s("through", ""),
        Page::Events { after } => args
            .s("direction", "events")
            .n("bound", *after)
            .s("through", ""),
    };
    args.n("count", lua_count(count));
    args
}

fn bounds(items: &mut std::vec::IntoIter<Value>) -> Result<Bounds> {
    let frontier = codec::uint(next(items)?)?;
    let first = codec::uint(next(items)?)?;
    let closed = optional(codec::string(next(items)?)?, "close frontier")?;
    let deadline = optional(codec::string(next(items)?)?, "deadline")?;
    Ok(Bounds {
        frontier,
        first,
        closed,
        deadline,
    })
}

/// A number the script sends as text, or `''` for none.
fn optional<T: std::str::FromStr>(text: String, what: &str) -> Result<Option<T>> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| codec::broken(format!("{what} {text:?}")))
}

/// The bounds and the rows of an `Asc` or `Desc` page.
pub(crate) fn decode(session: &str, reply: Value) -> Result<(Bounds, Vec<StoredEvent>)> {
    let mut items = codec::array(reply)?.into_iter();
    let bounds = bounds(&mut items)?;
    Ok((bounds, codec::rows(session, items)?))
}

/// The bounds and the events of an `Events` page.
pub(crate) fn decode_events(session: &str, reply: Value) -> Result<(Bounds, Vec<Event>)> {
    let mut items = codec::array(reply)?.into_iter();
    let bounds = bounds(&mut items)?;
    let events = items
        .map(|entry| codec::entry_reply(session, entry).map(|e| e.event))
        .collect::<Result<_>>()?;
    Ok((bounds, events))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_encoder() {
        for page in [
            Page::Asc {
                after: 0,
                through: Some(3),
            },
            Page::Desc { before: None },
            Page::Events { after: 2 },
        ] {
            let args = encode(&page, 10);
            crate::lua::header::check_session(&SCRIPT, &args.names);
        }
    }
}
