//! `fork` (FK1, FK2, FK3, FK4, FK5): the checks are [`rules::fork`]'s; the
//! copy is `INSERT … SELECT`s in one transaction, so the target appears
//! whole at its commit or not at all, and no row passes through Rust.

use crate::sql::Conn;
use a2_core::{Expiry, ForkOrigin, ForkOutcome, Result, rules, validate};

use crate::op::On;
use crate::session::{self, bound};
use crate::sql::{Text, index_of, text_opt};

/// FK2 in SQL: the fork's row, its counters summed over the copied
/// records (`rules::fork::ForkCounters`), the source's `first_event_at`,
/// its origin (FK5). `$1` target, `$2` source sid, `$3` first index, `$4`
/// the fork's index, `$5` now, `$6` source name.
fn new_session(s: &str) -> String {
    format!(
        "INSERT INTO {s}.sessions (name, frontier, pending_count, failed_count, attempt_count,
            failure_count, first_event_at, updated_at, first_index, forked_from, forked_index)
         SELECT $1, $4,
            count(*) FILTER (WHERE open AND failed_at IS NULL),
            count(*) FILTER (WHERE failed_at IS NOT NULL),
            coalesce(sum(attempt_count), 0), coalesce(sum(failure_count), 0),
            (SELECT first_event_at FROM {s}.sessions WHERE sid = $2), $5, $3, $6, $4
         FROM {s}.records WHERE sid = $2 AND idx BETWEEN $3 AND $4
         ON CONFLICT (name) DO NOTHING
         RETURNING sid"
    )
}

/// FK2 in SQL: the log rows as they are; the records without their lease
/// (an event leased in the source is ready in the fork as after a release,
/// RL1: at once, or at its retry time); the ready set of the range, which
/// is the fork's whole ready set (a lane's head within the range is its
/// head in the fork). `$1` fork sid, `$2` source sid, `$3`–`$4` the range.
fn copies(s: &str) -> [String; 3] {
    [
        format!(
            "INSERT INTO {s}.events (sid, idx, id, type, payload, created_at, lane, cause_index,
                cause_attempt, cause_batch)
             SELECT $1, idx, id, type, payload, created_at, lane, cause_index, cause_attempt,
                cause_batch
             FROM {s}.events WHERE sid = $2 AND idx BETWEEN $3 AND $4"
        ),
        format!(
            "INSERT INTO {s}.records (sid, idx, lane, open, attempt_count, first_claimed_at,
                last_claimed_at, claim_holder, claim_expires_at, retry_at, failure_count,
                last_failed_at, last_failed_attempt, last_error, failed_at, processed_at,
                processed_by_attempt, returned_ids, cancelled_at, cancel_reason)
             SELECT $1, idx, lane, open, attempt_count, first_claimed_at, last_claimed_at, NULL,
                NULL, retry_at, failure_count, last_failed_at, last_failed_attempt, last_error,
                failed_at, processed_at, processed_by_attempt, returned_ids, cancelled_at,
                cancel_reason
             FROM {s}.records WHERE sid = $2 AND idx BETWEEN $3 AND $4"
        ),
        format!(
            "INSERT INTO {s}.ready (sid, idx, due_at)
             SELECT $1, q.idx,
                CASE WHEN r.claim_holder IS NULL THEN q.due_at ELSE coalesce(r.retry_at, 0) END
             FROM {s}.ready q JOIN {s}.records r ON r.sid = q.sid AND r.idx = q.idx
             WHERE q.sid = $2 AND q.idx BETWEEN $3 AND $4"
        ),
    ]
}

/// FK1, FK2, FK3, FK4: forks `source` at `at` into `target`, a new session
/// with the store's default expiry (EX2). Its feeds (opened before it
/// existed) read, as after a clear; its pending events are announced.
pub(crate) async fn fork(
    on: On<'_, impl Conn>,
    (source, at, target, default_expiry): (String, u64, String, Option<Expiry>),
) -> Result<ForkOutcome> {
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let expiry = default_expiry
        .map(|e| validate::session_expiry(e, now))
        .transpose()?;
    // Both rows locked in name order: two forks between the same sessions
    // wait for each other instead of deadlocking.
    let (from, existing) = if source < target {
        let from = session::lock(sql, client, &source).await?;
        (from, session::lock(sql, client, &target).await?)
    } else {
        let existing = session::lock(sql, client, &target).await?;
        (session::lock(sql, client, &source).await?, existing)
    };
    if let Some(current) = existing.as_ref().filter(|s| !s.expired(now)) {
        let origin = origin(&on, current.sid).await?;
        return rules::fork::existing_target(&source, at, &target, origin.as_ref());
    }
    let Some(from) = from.filter(|s| !s.expired(now)) else {
        return Err(rules::fork::no_source(&source));
    };
    rules::fork::check_source(&source, from.log.frontier, from.log.first_index, at)?;
    // EX3: what is left of an expired target goes first, with any
    // snapshots written under its name: a fork is new.
    session::delete(sql, client, (&target, existing.map(|s| s.sid)), false).await?;
    let (first, last) = (bound(from.log.first_index), bound(at));
    let created = sql
        .query(
            client,
            "forking",
            &new_session(sql.schema),
            &[
                &Text(&target),
                &from.sid,
                &first,
                &last,
                &now,
                &Text(&source),
            ],
        )
        .await?;
    let Some(row) = created.first() else {
        // Another fork created the target meanwhile, and committed.
        let current = session::lock(sql, client, &target)
            .await?
            .ok_or_else(|| crate::sql::corrupt("a forked session vanished"))?;
        let origin = origin(&on, current.sid).await?;
        return rules::fork::existing_target(&source, at, &target, origin.as_ref());
    };
    let sid: i64 = row.get(0);
    for statement in copies(sql.schema) {
        sql.query(
            client,
            "forking",
            &statement,
            &[&sid, &from.sid, &first, &last],
        )
        .await?;
    }
    let snapshots = format!(
        "INSERT INTO {s}.snapshots (session, reducer, idx, state, updated_at)
         SELECT $1, reducer, idx, state, updated_at FROM {s}.snapshots
         WHERE session = $2 AND idx <= $3",
        s = sql.schema
    );
    sql.query(
        client,
        "forking",
        &snapshots,
        &[&Text(&target), &Text(&source), &last],
    )
    .await?;
    if let Some(expiry) = expiry {
        session::write_expiry(sql, client, sid, expiry).await?;
    }
    let forked = session::lock(sql, client, &target)
        .await?
        .ok_or_else(|| crate::sql::corrupt("a forked session vanished"))?;
    // PS1, PS2: the fork's pending events are its own work.
    if forked.pending_count > 0 {
        on.notices.work(&target);
    }
    on.notices.appended(&target, at, true);
    Ok(ForkOutcome::Forked {
        first_index: from.log.first_index,
    })
}

/// FK5: where session `sid` was forked from, if it is a fork.
async fn origin(on: &On<'_, impl Conn>, sid: i64) -> Result<Option<ForkOrigin>> {
    let statement = format!(
        "SELECT forked_from, forked_index FROM {s}.sessions WHERE sid = $1",
        s = on.sql.schema
    );
    let rows = on
        .sql
        .query(on.client, "reading the fork's origin", &statement, &[&sid])
        .await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    Ok(match (text_opt(row, 0), row.get::<_, Option<i64>>(1)) {
        (Some(session), Some(index)) => Some(ForkOrigin {
            session,
            index: index_of(index)?,
        }),
        _ => None,
    })
}
