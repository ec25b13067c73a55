//! Completions (CO1, CO2, CO3, CO4, CO5, CO6, B1, CL3) and what settling
//! an event does to its lane (DL2): the decisions are `rules::complete`'s.

use crate::sql::Conn;
use a2_core::rules::append::final_id;
use a2_core::rules::complete::Completion;
use a2_core::{Cause, CompleteOutcome, CompleteRequest, Result, StoredEvent, rules};

use crate::append::{self, Inserted};
use crate::op::On;
use crate::rows;
use crate::session::{SessionRow, bound};
use crate::sql::owned;
use crate::sql::{Sql, Text, corrupt, encode};
use crate::writes::Writes;

/// CO1, CO2, CO3, CO4, CO5, CO6, B1 (a validated request whose returned
/// events have their final ids).
pub(crate) async fn complete(
    on: On<'_, impl Conn>,
    request: CompleteRequest,
) -> Result<CompleteOutcome> {
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let (name, index) = (request.session.as_str(), request.index);
    // DL1: a returned event's due time, before anything else.
    rules::delay::due_times(&request.events, now)?;
    let Some((current, row)) = attempted(sql, client, name, index, now).await? else {
        return Ok(CompleteOutcome::Superseded);
    };
    let returned = request.events.iter().map(final_id);
    match rules::complete::decide(&(&row).into(), index, request.attempt, returned)? {
        Completion::Superseded => return Ok(CompleteOutcome::Superseded),
        Completion::Replay => {
            let events = returned_rows(sql, client, current.sid, &row).await?;
            return Ok(CompleteOutcome::Completed { events });
        }
        Completion::Complete => {}
    }
    // CL3: a closed session settles its events but takes no new ones.
    if !request.events.is_empty() {
        rules::lifecycle::check_open(name, current.log.closed)?;
    }
    let found = append::ids_found(sql, client, current.sid, &request.events).await?;
    rules::complete::check_new_ids(request.events.iter().map(final_id), |id| {
        Ok(found.get(id).copied())
    })?;
    let mut writes = Writes::default();
    settle(sql, client, current.sid, &row, &request, now, &mut writes).await?;
    if !request.events.is_empty() {
        // The returned events' lanes are read: the event leaves its lane
        // first.
        writes.defer(sql, client, "completing").await?;
    }
    // CO2: the returned events, caused by this attempt, in the same step;
    // the completed event leaves the pending count.
    let cause = Cause {
        index,
        attempt: request.attempt,
        batch_size: request.batch_size,
    };
    let mut events = request.events;
    for event in &mut events {
        event.cause = Some(cause);
    }
    let Inserted { rows, pending, .. } = append::insert(
        sql,
        client,
        name,
        &current,
        &events,
        None,
        1,
        now,
        &mut writes,
    )
    .await?;
    writes.defer(sql, client, "completing").await?;
    if !rows.is_empty() {
        on.notices
            .appended(name, current.log.frontier + rows.len() as u64, false);
    }
    if pending > 0 {
        on.notices.work(name);
    }
    Ok(CompleteOutcome::Completed { events: rows })
}

/// The row of session `name`, locked, and its event `index` whose attempt
/// ends (CO1, F1: out of range when neither is there), or `None` when the
/// event was trimmed: it was settled before it went (TR3).
async fn attempted(
    sql: &Sql<'_>,
    client: &impl Conn,
    name: &str,
    index: u64,
    now: a2_core::Millis,
) -> Result<Option<(SessionRow, StoredEvent)>> {
    let (current, row) = rows::lock_with_event(sql, client, name, index).await?;
    let current = match current {
        Some(s) if !s.expired(now) => s,
        _ => return Err(rules::read::out_of_range(name, index, 0)),
    };
    match row {
        Some(row) => Ok(Some((current, row))),
        None if rules::lifecycle::is_trimmed(current.log.first_index, index) => Ok(None),
        None => Err(rules::read::out_of_range(name, index, current.log.frontier)),
    }
}

/// CO2's write to the completed event `row`: processed by the attempt,
/// returning the ids of the request's events, its lease gone, out of the
/// ready set (added to `writes`); the next event of its lane comes in
/// (DL2).
async fn settle(
    sql: &Sql<'_>,
    client: &impl Conn,
    sid: i64,
    row: &StoredEvent,
    request: &CompleteRequest,
    now: a2_core::Millis,
    writes: &mut Writes,
) -> Result<()> {
    let index = bound(row.event.index);
    let returned: Vec<&str> = request.events.iter().map(final_id).collect();
    let returned = (!returned.is_empty())
        .then(|| serde_json::to_string(&returned).map_err(|e| corrupt(e.to_string())))
        .transpose()?;
    let s = sql.schema;
    let processed = format!(
        "UPDATE {s}.records SET processed_at = $3, processed_by_attempt = $4,
            returned_ids = $5, claim_holder = NULL, claim_expires_at = NULL, retry_at = NULL,
            open = false
         WHERE sid = $1 AND idx = $2"
    );
    let attempt = crate::sql::sql_attempt(request.attempt);
    let params = owned![sid, index, now, attempt, returned];
    writes.push("records", processed, params);
    let unready = format!("DELETE FROM {s}.ready WHERE sid = $1 AND idx = $2");
    let params = owned![sid, index];
    writes.push("ready", unready, params);
    if let Some(lane) = &row.event.lane {
        // The lane's next event is read from `records`: sent after.
        writes.defer(sql, client, "completing").await?;
        advance_lane(sql, client, sid, lane, index).await?;
    }
    Ok(())
}

/// DL2: after event `index` of `lane` was settled, when it headed the lane,
/// the lane's next unprocessed event becomes ready (at its due time when
/// delayed) — unless it is a dead letter, which holds its lane.
pub(crate) async fn advance_lane(
    sql: &Sql<'_>,
    client: &impl Conn,
    sid: i64,
    lane: &str,
    index: i64,
) -> Result<()> {
    let statement = format!(
        "INSERT INTO {s}.ready (sid, idx, due_at)
         SELECT sid, idx, coalesce(retry_at, 0) FROM {s}.records
         WHERE sid = $1 AND lane = $2 AND lane IS NOT NULL AND open AND failed_at IS NULL
            AND idx > $3
            AND NOT EXISTS (SELECT 1 FROM {s}.records
                WHERE sid = $1 AND lane = $2 AND lane IS NOT NULL AND open AND idx < $3)
         ORDER BY idx LIMIT 1
         ON CONFLICT DO NOTHING",
        s = sql.schema
    );
    let params = owned![sid, encode(lane).into_owned(), index];
    sql.defer(client, "moving the lane on", statement, params)
        .await
}

/// CO3: the rows of the ids the completion of `row` returned, as stored.
async fn returned_rows(
    sql: &Sql<'_>,
    client: &impl Conn,
    sid: i64,
    row: &StoredEvent,
) -> Result<Vec<StoredEvent>> {
    let name = row.event.session_id.as_str();
    let statement = format!(
        "SELECT {c} FROM {from} WHERE e.sid = $1 AND e.id = ANY($2) ORDER BY e.idx",
        c = rows::COLUMNS,
        from = rows::from(sql.schema)
    );
    let ids = &row.returned_event_ids;
    let texts: Vec<Text> = ids.iter().map(|id| Text(id)).collect();
    let found = sql
        .query(
            client,
            "reading returned events",
            &statement,
            &[&sid, &texts],
        )
        .await?;
    if found.len() != ids.len() {
        return Err(a2_core::Error::corrupted(
            format!(
                "an id returned by event {} is missing from the log",
                row.event.index
            ),
            Some(name),
            Some(row.event.index),
        ));
    }
    found.iter().map(|r| rows::stored(name, r)).collect()
}

/// F1, F2, F3, F4, F5, F6 (a validated request): a failure the rules record
/// clears the lease and counts; the event is ready again (at once, or from
/// the request's retry time), or dead-lettered: out of the ready set and of
/// the pending count, its lane held behind it (C4).
pub(crate) async fn fail(
    on: On<'_, impl Conn>,
    request: a2_core::FailRequest,
) -> Result<a2_core::FailOutcome> {
    use a2_core::FailKind;
    use a2_core::rules::fail::Failure;
    let (sql, client, now) = (&on.sql, on.client, on.now);
    let (name, index) = (request.session.as_str(), request.index);
    let Some((current, row)) = attempted(sql, client, name, index, now).await? else {
        return Ok(a2_core::FailOutcome {
            outcome: FailKind::Superseded,
            failure_count: 0,
        });
    };
    let decision = rules::fail::decide(&(&row).into(), request.attempt, request.max_failures);
    let (failure_count, dead) = match decision {
        Failure::Record {
            failure_count,
            dead,
        } => (failure_count, dead),
        // F2, F3, F4, F5: nothing written.
        report => return Ok(report.outcome(row.failure_count)),
    };
    // F6.
    let s = sql.schema;
    let (sid, at) = (current.sid, bound(index));
    let failed = format!(
        "UPDATE {s}.records SET failure_count = $3, last_error = $4, last_failed_at = $5,
            last_failed_attempt = $6, claim_holder = NULL, claim_expires_at = NULL,
            failed_at = $7, retry_at = $8
         WHERE sid = $1 AND idx = $2"
    );
    let retry_at = if dead { None } else { request.retry_at };
    let params = owned![
        sid,
        at,
        crate::sql::sql_attempt(failure_count),
        encode(&request.error).into_owned(),
        now,
        crate::sql::sql_attempt(request.attempt),
        dead.then_some(now),
        retry_at
    ];
    let mut writes = Writes::default();
    writes.push("records", failed, params);
    // Ready again at its retry time, or (dead) not at all.
    if dead {
        let gone = format!("DELETE FROM {s}.ready WHERE sid = $1 AND idx = $2");
        let params = owned![sid, at];
        writes.push("ready", gone, params);
    } else {
        let due = retry_at.unwrap_or(0);
        let again = format!("UPDATE {s}.ready SET due_at = $3 WHERE sid = $1 AND idx = $2");
        let params = owned![sid, at, due];
        writes.push("ready", again, params);
    }
    let counted = format!(
        "UPDATE {s}.sessions SET failure_count = failure_count + 1,
            failed_count = failed_count + $2, pending_count = pending_count - $2,
            updated_at = greatest(updated_at, $3)
         WHERE sid = $1"
    );
    let params = owned![sid, i64::from(dead), now];
    writes.push("sessions", counted, params);
    writes.defer(sql, client, "failing").await?;
    Ok(decision.outcome(row.failure_count))
}
