//! `append` and `append_and_claim` on Redis (A1, A5, AC1, AC2): one
//! script call either way.

use std::collections::BTreeMap;

use a2_core::validate;
use a2_core::*;

use crate::ops::{self, append};

use super::*;

impl RedisStore {
    /// `append` (A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12), claiming
    /// the appended ready events when `claim` is given (AC1, AC2, AC3, AC4,
    /// AC5): one script call either way.
    pub(super) async fn append_claiming(
        &self,
        request: AppendRequest<'_>,
    ) -> Result<AppendOutcome> {
        let AppendRequest {
            session,
            events,
            options,
        } = request;
        let inner = self.open()?;
        let claim = options.claim;
        validate::batch(&events, &inner.options.limits, true)?;
        let mut batch = ops::batch::Batch::new(events, inner.options.ids.as_ref())?;
        let now = inner.now();
        batch.schedule(now)?;
        // EX1, EX2: the expiry is checked before anything is written; the
        // store's default goes with every append, for the script to set on
        // a session it creates.
        let expiry = match (options.expiry, inner.options.default_expiry) {
            (Some(expiry), _) => append::SetExpiry::Set(validate::session_expiry(expiry, now)?),
            (None, Some(default)) => {
                append::SetExpiry::Default(validate::session_expiry(default, now)?)
            }
            (None, None) => append::SetExpiry::Keep,
        };
        let claiming = match &claim {
            Some(claim) => Some(append::Claiming {
                holder: &claim.holder,
                expires: validate::claim_expiry(claim.lease, now)?,
                limit: validate::effective_limit(claim.limit),
            })
            .filter(|c| c.limit > 0),
            None => None,
        };
        let args = append::encode(
            &batch,
            &batch.wake(inner.wake_carry_cap, None),
            claiming.as_ref(),
            expiry,
            options.if_frontier,
            options.close,
        );
        let reply = inner.run(&append::SCRIPT, session, now, args).await?;
        match append::decode(session, reply)? {
            append::Reply::Empty { has_pending } => Ok(AppendOutcome::nothing(has_pending)),
            append::Reply::Written {
                first,
                has_pending,
                claimed,
            } => {
                let mut events = batch.rows(session, first, now, None);
                if let Some(claiming) = &claiming {
                    leased_rows(&mut events, first, &claimed, claiming, now)?;
                }
                // This process's own feeds of the session hear of it now,
                // also where they poll (ST2).
                inner
                    .subscriber
                    .wrote(&inner.session_keys(session).events_channel);
                Ok(AppendOutcome {
                    events,
                    has_pending,
                    claimed,
                })
            }
            append::Reply::Retry { has_pending, rows } => {
                check_retry(session, &batch, &rows)?;
                Ok(AppendOutcome {
                    events: rows,
                    has_pending,
                    claimed: Vec::new(),
                })
            }
            append::Reply::Partial { id } => Err(Error::duplicate(format!(
                "id {id:?} already exists but other ids of the batch do not"
            ))),
            append::Reply::NoCause { index } => Err(Error::invalid(format!(
                "cause index {index} does not exist in session {session:?}"
            ))),
            append::Reply::Superseded { index } => Err(Error::superseded(format!(
                "the cause attempt of event {index} is not its latest, or it is dead-lettered"
            ))),
            append::Reply::Trimmed { first } => Err(Error::trimmed(session, first)),
            append::Reply::Closed => Err(Error::session_closed(session)),
            // A13: another write came first.
            append::Reply::Moved { frontier } => Err(Error::FrontierMoved {
                session: session.to_owned(),
                expected: options.if_frontier.unwrap_or_default(),
                frontier,
            }),
        }
    }
}

/// AC2: the rows the script leased at append (`claimed`, among the rows
/// written from index `first` on) as a claim leases them (C2).
fn leased_rows(
    rows: &mut [StoredEvent],
    first: u64,
    claimed: &[u64],
    claiming: &append::Claiming<'_>,
    now: Millis,
) -> Result<()> {
    for &index in claimed {
        let Some(row) = index
            .checked_sub(first)
            .and_then(|k| rows.get_mut(k as usize))
        else {
            return Err(crate::codec::broken(format!(
                "append claimed index {index}, not one it wrote"
            )));
        };
        row.attempt_count = 1;
        row.first_claimed_at = Some(now);
        row.last_claimed_at = Some(now);
        row.claim_holder = Some(claiming.holder.to_owned());
        row.claim_expires_at = Some(claiming.expires);
    }
    Ok(())
}

/// A5, decided as every store decides it: each stored row of a retry
/// matches the batch's event of its id.
fn check_retry(session: &str, batch: &ops::batch::Batch, rows: &[StoredEvent]) -> Result<()> {
    let wanted: BTreeMap<&str, &NewEvent> = batch
        .ids
        .iter()
        .map(String::as_str)
        .zip(&batch.events)
        .collect();
    for row in rows {
        let Some(event) = wanted.get(row.event.id.as_str()) else {
            return Err(Error::corrupted(
                format!(
                    "a retry's reply holds id {:?}, not in the batch",
                    row.event.id
                ),
                Some(session),
                Some(row.event.index),
            ));
        };
        rules::append::check_retry(event, &row.event)?;
    }
    Ok(())
}
