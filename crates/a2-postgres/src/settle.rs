//! Revives and cancels (RV1, RV2, RV3, CN1, CN3, CN4, CN5): the decisions
//! are `rules::revive`'s and `rules::cancel`'s.

use crate::sql::Conn;
use a2_core::rules::cancel::Cancel;
use a2_core::{CancelOutcome, Result, ReviveOutcome, StoredEvent, rules};

use crate::complete::advance_lane;
use crate::op::On;
use crate::rows;
use crate::session::{SessionRow, bound};
use crate::sql::Text;

/// RV1, CN4: event `index` of session `name`, its session's row locked; an
/// index the session does not hold is `Trimmed` or `InvalidArgument`.
async fn event_of(
    on: &On<'_, impl Conn>,
    name: &str,
    index: u64,
) -> Result<(SessionRow, StoredEvent)> {
    let (sql, client) = (&on.sql, on.client);
    let (current, row) = rows::lock_with_event(sql, client, name, index).await?;
    let current = match current {
        Some(s) if !s.expired(on.now) => s,
        _ => return Err(rules::read::no_event(name, index, 1, 0)),
    };
    match row {
        Some(row) => Ok((current, row)),
        None => Err(rules::read::no_event(
            name,
            index,
            current.log.first_index,
            current.log.frontier,
        )),
    }
}

/// RV1, RV2, RV3: a dead letter is pending again with no failures, ready at
/// once (a dead letter heads its lane), and announced (PS2): the events
/// behind it are claimable again too.
pub(crate) async fn revive(
    on: On<'_, impl Conn>,
    (name, index): (String, u64),
) -> Result<ReviveOutcome> {
    let (current, row) = event_of(&on, &name, index).await?;
    if !rules::revive::revives(&(&row).into()) {
        return Ok(ReviveOutcome::NotDeadLettered(row));
    }
    let s = on.sql.schema;
    let (sid, at) = (current.sid, bound(index));
    let statements = [
        format!(
            "UPDATE {s}.records SET failed_at = NULL, failure_count = 0, retry_at = NULL,
                claim_holder = NULL, claim_expires_at = NULL
             WHERE sid = $1 AND idx = $2"
        ),
        format!(
            "INSERT INTO {s}.ready (sid, idx, due_at) VALUES ($1, $2, 0) ON CONFLICT DO NOTHING"
        ),
    ];
    for statement in &statements {
        on.sql
            .query(on.client, "reviving", statement, &[&sid, &at])
            .await?;
    }
    let counted = format!(
        "UPDATE {s}.sessions SET pending_count = pending_count + 1,
            failed_count = failed_count - 1, failure_count = failure_count - $2,
            updated_at = greatest(updated_at, $3)
         WHERE sid = $1"
    );
    let failures = i64::from(row.failure_count);
    on.sql
        .query(on.client, "reviving", &counted, &[&sid, &failures, &on.now])
        .await?;
    on.notices.work(&name);
    let (_, row) = event_of(&on, &name, index).await?;
    Ok(ReviveOutcome::Revived(row))
}

/// CN1, CN3, CN4, CN5: a pending or dead-lettered event is settled as
/// cancelled and its lane moves on; the cancel of a leased attempt is
/// announced to every process (`{schema}.cancels`), and events left
/// pending to the workers (PS2).
pub(crate) async fn cancel(
    on: On<'_, impl Conn>,
    (name, index, reason): (String, u64, Option<String>),
) -> Result<CancelOutcome> {
    let (current, row) = event_of(&on, &name, index).await?;
    let record = (&row).into();
    let decision = rules::cancel::decide(&record);
    if !decision.writes() {
        return Ok(CancelOutcome::NotPending(row));
    }
    let running = rules::cancel::running_attempt(&record);
    let s = on.sql.schema;
    let (sid, at, now) = (current.sid, bound(index), on.now);
    let cancelled = format!(
        "UPDATE {s}.records SET processed_at = $3, cancelled_at = $3, cancel_reason = $4,
            claim_holder = NULL, claim_expires_at = NULL, retry_at = NULL, failed_at = NULL,
            open = false
         WHERE sid = $1 AND idx = $2"
    );
    on.sql
        .query(
            on.client,
            "cancelling",
            &cancelled,
            &[&sid, &at, &now, &reason.as_deref().map(Text)],
        )
        .await?;
    let gone = format!("DELETE FROM {s}.ready WHERE sid = $1 AND idx = $2");
    on.sql
        .query(on.client, "cancelling", &gone, &[&sid, &at])
        .await?;
    let dead = i64::from(decision == Cancel::DeadLetter);
    let counted = format!(
        "UPDATE {s}.sessions SET pending_count = pending_count - (1 - $2::bigint),
            failed_count = failed_count - $2, updated_at = greatest(updated_at, $3)
         WHERE sid = $1"
    );
    on.sql
        .query(on.client, "cancelling", &counted, &[&sid, &dead, &now])
        .await?;
    if let Some(lane) = &row.event.lane {
        advance_lane(&on.sql, on.client, sid, lane, at).await?;
    }
    if let Some(attempt) = running {
        on.notices.cancelled(&name, index, attempt);
    }
    if current.pending_count - (1 - dead) > 0 {
        on.notices.work(&name);
    }
    let (_, row) = event_of(&on, &name, index).await?;
    Ok(CancelOutcome::Cancelled(row))
}
