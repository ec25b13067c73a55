//! Pages of rows (R1, R2, I2): `lua/read.lua`.

use a2_core::{Result, StoredEvent};
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
}

pub(crate) fn encode(page: &Page, count: usize) -> Args {
    let mut args = Args::default();
    match page {
        Page::Asc { after, through } => args.s("direction", "asc").n("bound", after).s(
            "through",
            through.map(|t| t.to_string()).unwrap_or_default(),
        ),
        Page::Desc { before } => args
            .s("direction", "desc")
            .s("bound", before.map(|b| b.to_string()).unwrap_or_default())
            .s("through", ""),
    };
    args.n("count", lua_count(count));
    args
}

/// `(frontier, rows)`.
pub(crate) fn decode(session: &str, reply: Value) -> Result<(u64, Vec<StoredEvent>)> {
    let mut items = codec::array(reply)?.into_iter();
    let frontier = codec::uint(next(&mut items)?)?;
    Ok((frontier, codec::rows(session, items)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_encoder() {
        let source = include_str!("../../lua/read.lua");
        for page in [
            Page::Asc {
                after: 0,
                through: Some(3),
            },
            Page::Desc { before: None },
        ] {
            let args = encode(&page, 10);
            crate::lua::header::check("read.lua", source, 5, &args.names);
        }
    }
}
