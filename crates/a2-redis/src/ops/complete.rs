//! `complete_attempt` (CO1, CO2, CO3, CO4, CO5, CO6): `lua/complete.lua`.

use a2_core::{Cause, Result, StoredEvent};
use redis::Value;

use crate::lua::SessionScript;

use super::batch::Batch;
use super::{Args, next};
use crate::codec::{self, broken};

pub(crate) static SCRIPT: SessionScript = crate::lua::session_script!("complete");

/// `returned` is the JSON array of the returned ids (CO3 compares it byte
/// for byte). A completion that returns no events sends the index and the
/// attempt alone: it is the common one, and every argument costs the
/// server a parse, an object and a Lua string.
pub(crate) fn encode(cause: Cause, returned: &str, batch: &Batch, wake: &str) -> Args {
    let mut args = Args::with_capacity(
        5 + crate::lua::EVENT_STRIDE * batch.len(),
        2 * wake.len() + returned.len() + batch.bytes() + 48,
    );
    args.n("index", cause.index).n("attempt", cause.attempt);
    if batch.len() == 0 {
        return args;
    }
    args.s("returned", returned)
        .n("count", batch.len())
        .s("wake", wake);
    batch.encode(&mut args, Some(cause));
    args
}

/// What `complete.lua` answers.
#[derive(Debug)]
pub(crate) enum Reply {
    /// The index is outside 1…frontier (CO1).
    Invalid,
    /// Another attempt is current, or this one is over (CO4, CO5).
    Superseded,
    /// This attempt completed before with other returned ids (CO4).
    Mismatch,
    /// A returned id exists in the session (CO6).
    Exists { id: String },
    /// The same completion again: the rows it returned then (CO3).
    Done(Vec<StoredEvent>),
    /// Completed; the returned events start at `first` (CO2).
    Written { first: u64 },
    /// It returned events to a closed session (CL3); nothing written.
    Closed,
}

pub(crate) fn decode(session: &str, reply: Value) -> Result<Reply> {
    // In a batch the common reply comes joined: `ok,first`.
    let mut first = [0u64; 1];
    if let Some(count) = codec::joined_ok(&reply, &mut first) {
        return match count? {
            1 => Ok(Reply::Written { first: first[0] }),
            _ => Err(broken("complete: a joined reply of another length")),
        };
    }
    let (tag, mut items) = codec::tagged(reply)?;
    Ok(match tag.as_str() {
        "invalid" => Reply::Invalid,
        "superseded" => Reply::Superseded,
        "mismatch" => Reply::Mismatch,
        "exists" => Reply::Exists {
            id: codec::string(next(&mut items)?)?,
        },
        "done" => Reply::Done(codec::rows(session, items)?),
        "ok" => Reply::Written {
            first: codec::uint(next(&mut items)?)?,
        },
        "closed" => Reply::Closed,
        other => return Err(broken(format!("complete: {other}"))),
    })
}

#[cfg(test)]
mod tests {
    use a2_core::{NewEvent, SequentialIds};
    use serde_json::json;

    use super::*;

    #[test]
    fn header_matches_encoder() {
        let batch =
            Batch::new(vec![NewEvent::new("a", json!(1))], &SequentialIds::new("e")).unwrap();
        let cause = Cause::new(1, 1).with_batch_size(2);
        let args = encode(cause, "[\"e1\"]", &batch, "");
        crate::lua::header::check_session(&SCRIPT, &args.names);
        let none = Batch::new(vec![], &SequentialIds::new("e")).unwrap();
        let args = encode(cause, "[]", &none, "");
        assert_eq!(args.names, ["index", "attempt"]);
        crate::lua::header::check_session(&SCRIPT, &args.names);
    }
}
