//! Processing records (§1) as the rules read them.

use a2_core::{Millis, Result, rules};
use tokio_postgres::GenericClient;

use crate::session::bound;
use crate::sql::{Sql, attempt_of};

/// What the rules read of one event's record.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordRow {
    pub(crate) attempt_count: u32,
    pub(crate) processed_at: Option<Millis>,
    pub(crate) processed_by_attempt: Option<u32>,
    pub(crate) returned_event_ids: Vec<String>,
    pub(crate) claim_holder: Option<String>,
    pub(crate) claim_expires_at: Option<Millis>,
    pub(crate) retry_at: Option<Millis>,
    pub(crate) failure_count: u32,
    pub(crate) last_failed_attempt: Option<u32>,
    pub(crate) failed_at: Option<Millis>,
    pub(crate) cancelled_at: Option<Millis>,
}

impl RecordRow {
    /// The record as the rules take it.
    pub(crate) fn rules(&self) -> rules::Record<'_> {
        rules::Record {
            attempt_count: self.attempt_count,
            processed_at: self.processed_at,
            processed_by_attempt: self.processed_by_attempt,
            returned_event_ids: &self.returned_event_ids,
            claim_holder: self.claim_holder.as_deref(),
            claim_expires_at: self.claim_expires_at,
            retry_at: self.retry_at,
            failure_count: self.failure_count,
            last_failed_attempt: self.last_failed_attempt,
            failed_at: self.failed_at,
            cancelled_at: self.cancelled_at,
        }
    }
}

/// The record of event `index` of session `sid`: an event appended settled
/// has none and reads as processed at its append; `None` when the session
/// has no such event.
pub(crate) async fn read(
    sql: &Sql<'_>,
    client: &impl GenericClient,
    sid: i64,
    index: u64,
) -> Result<Option<RecordRow>> {
    let row = sql
        .query_opt(
            client,
            "reading a processing record",
            &format!(
                "SELECT e.created_at, r.idx IS NOT NULL, r.attempt_count, r.processed_at,
                    r.processed_by_attempt, r.returned_ids, r.claim_holder, r.claim_expires_at,
                    r.retry_at, r.failure_count, r.last_failed_attempt, r.failed_at,
                    r.cancelled_at
                 FROM {s}.events e LEFT JOIN {s}.records r ON r.sid = e.sid AND r.idx = e.idx
                 WHERE e.sid = $1 AND e.idx = $2",
                s = sql.schema
            ),
            &[&sid, &bound(index)],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    if !row.get::<_, bool>(1) {
        return Ok(Some(RecordRow {
            processed_at: Some(row.get(0)),
            ..RecordRow::default()
        }));
    }
    let attempt = |at: usize| -> Result<Option<u32>> {
        row.get::<_, Option<i32>>(at).map(attempt_of).transpose()
    };
    let returned: Option<String> = row.get(5);
    Ok(Some(RecordRow {
        attempt_count: attempt_of(row.get(2))?,
        processed_at: row.get(3),
        processed_by_attempt: attempt(4)?,
        returned_event_ids: match returned {
            Some(text) => serde_json::from_str(&text).map_err(|e| {
                crate::sql::corrupt(format!("returned ids that are not a JSON list: {e}"))
            })?,
            None => Vec::new(),
        },
        claim_holder: row.get(6),
        claim_expires_at: row.get(7),
        retry_at: row.get(8),
        failure_count: attempt_of(row.get(9))?,
        last_failed_attempt: attempt(10)?,
        failed_at: row.get(11),
        cancelled_at: row.get(12),
    }))
}
