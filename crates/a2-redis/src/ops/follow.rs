//! The count of store instances whose live feeds follow a session (ST2):
//! `lua/follow.lua`.

use a2_core::Result;
use redis::Value;

use super::Args;
use crate::codec;

/// Whether an instance starts or stops following (its first feed of the
/// session starts, its last one ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Follow {
    Start,
    Stop,
}

pub(crate) fn encode(follow: Follow) -> Args {
    let mut args = Args::default();
    let delta: i8 = match follow {
        Follow::Start => 1,
        Follow::Stop => -1,
    };
    args.n("delta", delta);
    args
}

/// The count after the change.
pub(crate) fn decode(reply: Value) -> Result<u64> {
    codec::uint(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_encoder() {
        for follow in [Follow::Start, Follow::Stop] {
            let args = encode(follow);
            crate::lua::header::check(
                "follow.lua",
                include_str!("../../lua/follow.lua"),
                1,
                &args.names,
            );
        }
    }
}
