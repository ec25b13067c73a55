//! Which calls the store sends once more when their connection was lost
//! before the reply (RD8): those whose replay is harmless because it
//! changes nothing or is answered like the original.
//!
//! - reads: `read`, `read_state`, `presence_read` (its pruning of expired
//!   entries is the same again), the feeds' `XRANGE`, `HGETALL` of the
//!   snapshots, and the partition scripts of `list_sessions` and
//!   `pending_sessions` (whose lazy clean-up is the same again);
//! - `append`: ids are drawn by the client before the script runs, so a
//!   replay of an applied batch is A5's retry and returns its rows;
//! - `complete`: returned ids are drawn by the client too, so a replay is
//!   CO3's repeat;
//! - `fail`: a replay of an applied failure is F4 (or F3 once it
//!   dead-lettered), never a second failure;
//! - `renew`: the expiry is computed by the client, a replay sets it again;
//! - `put_snapshots`: a snapshot never moves backward (S2), a replay
//!   writes nothing;
//! - `trim`: a replay of an applied trim finds the events gone and returns
//!   the first retained index again (TR1);
//! - `set_expiry`: a replay sets the same expiry again (EX2);
//! - `fork_read` reads; `fork_stage` skips the entries it wrote before and
//!   sets the rest again (FK6).
//!
//! Never replayed: `claim` (a replay would hand out a second attempt),
//! `release`, `revive`, `cancel` and `close` (a replay would answer as if
//! the first had not applied), `fork_publish` (a replay of a publish would answer
//! `AlreadyForked`), `clear` (a replay could delete what was appended
//! since) and `presence_set` (a replay would publish its patch twice).

use crate::lua::SessionScript;

/// Whether a session script may be sent once more after a lost connection.
pub(crate) fn session_script(script: &SessionScript) -> bool {
    matches!(
        script.name,
        "read"
            | "read_state"
            | "presence_read"
            | "append"
            | "complete"
            | "fail"
            | "renew"
            | "put_snapshots"
            | "trim"
            | "set_expiry"
            | "fork_read"
            | "fork_stage"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every session script is classified here on purpose: a new script
    /// is not replayed until someone decides it may be.
    #[test]
    fn only_named_scripts_are_replayed() {
        let replayed: Vec<&str> = crate::ops::ALL
            .iter()
            .filter(|s| session_script(s))
            .map(|s| s.name)
            .collect();
        assert_eq!(
            replayed,
            [
                "append",
                "complete",
                "fail",
                "renew",
                "read",
                "read_state",
                "put_snapshots",
                "presence_read",
                "trim",
                "set_expiry",
                "fork_read",
                "fork_stage"
            ]
        );
        let names: Vec<&str> = crate::ops::ALL.iter().map(|s| s.name).collect();
        for never in [
            "claim",
            "release",
            "revive",
            "clear",
            "presence_set",
            "close",
            "fork_publish",
            "cancel",
        ] {
            assert!(names.contains(&never), "{never} is a script");
            assert!(!replayed.contains(&never), "{never} is never replayed");
        }
    }
}
