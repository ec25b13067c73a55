//! The prefix's recorded layout: `lua/config.lua`.

use a2_core::Result;
use redis::Value;

use super::{Args, next};
use crate::codec;

pub(crate) fn encode(layout: &str, partitions: u16) -> Args {
    let mut args = Args::default();
    args.s("layout", layout).n("partitions", partitions);
    args
}

/// `(layout, partitions)` as recorded.
pub(crate) fn decode(reply: Value) -> Result<(String, String)> {
    let mut items = codec::array(reply)?.into_iter();
    Ok((
        codec::string(next(&mut items)?)?,
        codec::string(next(&mut items)?)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_encoder() {
        let args = encode("2", 48);
        crate::lua::header::check(
            "config.lua",
            include_str!("../../lua/config.lua"),
            1,
            &args.names,
        );
    }
}
