//! `a2 close`, `a2 trim`, `a2 expire`, `a2 fork`, `a2 cancel` and `a2 revive`: a
//! session's lifecycle from the command line (docs/spec.md §10, §11 and
//! §12).

use crate::out::say;

/// `a2 expire`: one line saying when the session expires now.
pub async fn expire(
    store: &dyn a2::Store,
    session: &str,
    expiry: a2::Expiry,
) -> Result<(), Box<dyn std::error::Error>> {
    let outcome = store.set_expiry(session, expiry).await?;
    match outcome.deadline {
        Some(deadline) => {
            let left = deadline - store.clock().now_ms();
            let sliding = if expiry.ttl_ms.is_some() {
                ", later if it is written to meanwhile"
            } else {
                ""
            };
            say!("{session} expires in {left} ms (at {deadline} ms since the epoch){sliding}");
        }
        None => say!("{session} is kept until it is deleted"),
    }
    Ok(())
}

/// `a2 close`: one line saying where the session's log now ends.
pub async fn close(store: &dyn a2::Store, session: &str) -> Result<(), Box<dyn std::error::Error>> {
    match store.close_session(session).await? {
        a2::CloseOutcome::Closed { frontier, .. } => {
            say!("closed {session} at #{frontier}: its log is final, pending events still run");
        }
        a2::CloseOutcome::AlreadyClosed { frontier, .. } => {
            say!("{session} was closed already, at #{frontier}");
        }
    }
    Ok(())
}

/// `a2 trim`: removes the settled events through `through`, as many calls
/// as it takes (each removes at most 10 000), saying how far it got. A
/// trim that would leave a reducer's snapshot behind is refused, nothing
/// written, unless `allow_stale_snapshots` (RT19).
pub async fn trim(
    store: &dyn a2::Store,
    session: &str,
    through: u64,
    allow_stale_snapshots: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let snapshots = store.list_snapshots(session).await?;
    let behind = a2::store_author::rules::lifecycle::snapshots_behind(&snapshots, through);
    if !behind.is_empty() {
        if !allow_stale_snapshots {
            let message = a2::store_author::rules::lifecycle::snapshots_behind_message(
                session,
                through,
                &behind,
                "pass --allow-stale-snapshots",
            );
            return Err(a2::Error::invalid(message).into());
        }
        let names: Vec<&str> = behind.iter().map(|s| s.reducer.as_str()).collect();
        say!(
            "the state of {} can no longer be read after this trim",
            names.join(", ")
        );
    }
    let mut first = store.trim(session, through).await?.first_index;
    let mut calls = 1;
    while first <= through {
        if calls % 10 == 0 {
            say!("trimmed {session} up to #{} of #{through}…", first - 1);
        }
        let next = store.trim(session, through).await?.first_index;
        calls += 1;
        if next == first {
            break;
        }
        first = next;
    }
    say!("trimmed {session}: it keeps its events from #{first} on");
    Ok(())
}

/// `a2 fork`: one line saying what the new session holds.
pub async fn fork(
    store: &dyn a2::Store,
    source: &str,
    index: u64,
    target: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    match store.fork(source, index, target).await? {
        a2::ForkOutcome::Forked { first_index } => {
            say!(
                "forked {source} at #{index} into {target}: events #{first_index}..#{index}, the next append gets #{}",
                index + 1
            );
        }
        a2::ForkOutcome::AlreadyForked => {
            say!("{target} was forked from {source} at #{index} already; nothing changed");
        }
    }
    Ok(())
}

/// `a2 cancel`: one line saying what happened (CN1, CN3). An event that
/// was settled already is no error: nothing changed, and the line says so.
pub async fn cancel(
    store: &dyn a2::Store,
    session: &str,
    index: u64,
    reason: Option<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    match store.cancel(session, index, reason).await? {
        a2::CancelOutcome::Cancelled(row) => {
            let lane = match &row.event.lane {
                Some(lane) => format!("; lane {lane:?} moves on"),
                None => String::new(),
            };
            let running =
                if row.attempt_count > 0 && row.last_failed_attempt != Some(row.attempt_count) {
                    format!(
                        "; attempt {} is superseded, its worker told to stop",
                        row.attempt_count
                    )
                } else {
                    String::new()
                };
            say!(
                "cancelled {session} #{index} ({}){running}{lane}",
                row.event.event_type
            );
        }
        a2::CancelOutcome::NotPending(row) => {
            say!(
                "{session} #{index} ({}) was settled already: it is {}; nothing changed",
                row.event.event_type,
                row.state().name().replace('_', " ")
            );
        }
    }
    Ok(())
}

/// `a2 revive`: one line saying what happened; an event that is not
/// dead-lettered is an error (exit status 1), with its state.
pub async fn revive(
    store: &dyn a2::Store,
    session: &str,
    index: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    match store.revive(session, index).await? {
        a2::ReviveOutcome::Revived(row) => {
            say!(
                "revived {session} #{index} ({}): pending again, attempt {} comes next",
                row.event.event_type,
                row.attempt_count + 1
            );
            Ok(())
        }
        a2::ReviveOutcome::NotDeadLettered(row) => {
            let state = row.state().name();
            Err(format!("{session} #{index} is not dead-lettered: it is {state}").into())
        }
    }
}
