//! The mark that makes a session's writes publish wake-ups (ST2):
//! `lua/follow.lua`.

use std::time::Duration;

use a2_core::Result;
use redis::Value;

use super::Args;
use crate::codec;

/// What an instance does with its entry in a session's mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Follow {
    /// Its first feed of the session starts, or the refresh period came.
    Refresh,
    /// Its last feed of the session ended, or the store closes.
    Release,
}

/// The arguments of one call: `instance` is the store instance's id, `ttl`
/// how long a refreshed entry lasts.
pub(crate) fn encode(follow: Follow, instance: &str, ttl: Duration) -> Args {
    let mut args = Args::default();
    let mode = match follow {
        Follow::Refresh => "refresh",
        Follow::Release => "release",
    };
    args.s("mode", mode)
        .s("instance", instance)
        .n("ttl", ttl.as_millis().max(1));
    args
}

/// What a refresh learned of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refreshed {
    /// The mark was not in force for this instance: writes may have gone
    /// unannounced, so its feeds of the session read.
    pub(crate) lost: bool,
    /// The session's last index: a feed behind it reads.
    pub(crate) frontier: u64,
}

/// A refresh's reply.
pub(crate) fn decode_refresh(reply: Value) -> Result<Refreshed> {
    let mut items = codec::array(reply)?.into_iter();
    let lost = codec::uint(super::next(&mut items)?)? == 1;
    let frontier = codec::uint(super::next(&mut items)?)?;
    Ok(Refreshed { lost, frontier })
}

/// A release's reply: the instances still following.
pub(crate) fn decode_release(reply: Value) -> Result<u64> {
    codec::uint(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_encoder() {
        for follow in [Follow::Refresh, Follow::Release] {
            let args = encode(follow, "i", Duration::from_secs(6));
            crate::lua::header::check(
                "follow.lua",
                include_str!("../../lua/follow.lua"),
                1,
                &args.names,
            );
        }
    }
}
