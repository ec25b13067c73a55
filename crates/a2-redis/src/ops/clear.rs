//! `clear` (I4): `lua/clear.lua`.

use std::sync::LazyLock;

use redis::Script;

use super::Args;

pub(crate) static SCRIPT: LazyLock<Script> = crate::lua::session_script!("clear.lua");

pub(crate) fn encode() -> Args {
    Args::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_encoder() {
        let args = encode();
        crate::lua::header::check(
            "clear.lua",
            include_str!("../../lua/clear.lua"),
            5,
            &args.names,
        );
    }
}
