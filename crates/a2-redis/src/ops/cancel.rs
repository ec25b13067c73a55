//! `cancel` (CN1, CN2, CN3, CN4, CN5): `lua/cancel.lua`.

use a2_core::CancelOutcome;

use crate::lua::SessionScript;

use super::{Args, EventOutcome};

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("cancel");

/// An empty reason travels as none.
pub(crate) fn encode(index: u64, reason: Option<&str>) -> Args {
    let mut args = Args::default();
    args.n("index", index).s("reason", reason.unwrap_or(""));
    args
}

/// What `cancel.lua` answers about an event (see [`super::event_reply`]).
pub(crate) const OUTCOMES: [EventOutcome<CancelOutcome>; 2] = [
    ("cancelled", CancelOutcome::Cancelled),
    ("not_pending", CancelOutcome::NotPending),
];

/// A cancel's announcement on its partition's channel (CN5):
/// `{index}:{attempt}:{session}`.
pub(crate) fn announcement(payload: &[u8]) -> Option<a2_core::Cancellation> {
    let text = std::str::from_utf8(payload).ok()?;
    let (index, rest) = text.split_once(':')?;
    let (attempt, session) = rest.split_once(':')?;
    Some(a2_core::Cancellation {
        session: session.to_owned(),
        index: index.parse().ok()?,
        attempt: attempt.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cn5_announcements_name_session_index_and_attempt() {
        let cancel = announcement(b"7:2:chat:1").unwrap();
        assert_eq!(
            (cancel.session.as_str(), cancel.index, cancel.attempt),
            ("chat:1", 7, 2)
        );
        assert!(announcement(b"x:2:s").is_none());
    }
}
