//! Processing on Redis (§3): `claim_available`, `renew_claims`,
//! `complete_attempt`, `fail_attempt`, `release_claims` and `revive`, each
//! one script call (RD1) whose reply the store turns into the outcome.

use a2_core::validate;
use a2_core::*;

use crate::ops::{self, claim, complete};

use super::*;

impl RedisStore {
    pub(super) async fn claim_available_op(&self, request: ClaimRequest) -> Result<ClaimOutcome> {
        let inner = self.open()?;
        validate::claim_request(&request)?;
        let now = inner.now();
        let expires = request.lease.expires_at(now);
        if expires <= now {
            return Err(Error::invalid(format!(
                "lease expires at {expires}, not after the store's now {now}"
            )));
        }
        // Where every call is a round trip of its own (REST), the claim
        // brings the log entries back itself: one request, not two.
        // (Within the provider's cap on entries per reply.)
        let limit = validate::effective_limit(request.limit);
        let entries = inner.transport.fewer_round_trips() && limit <= inner.transport.stream_page();
        let args = claim::encode(
            &request.holder,
            expires,
            limit,
            entries,
            &request.exclude_indexes,
        );
        let reply = inner
            .run(&claim::SCRIPT, &request.session, now, args)
            .await?;
        Ok(match claim::decode(reply)? {
            claim::Reply::Settled => ClaimOutcome::Settled,
            claim::Reply::Busy { retry_at } => ClaimOutcome::Busy { retry_at },
            claim::Reply::Claimed(claimed, next_at) => ClaimOutcome::Claimed {
                events: inner.claimed_rows(&request.session, claimed).await?,
                next_at,
            },
            claim::Reply::Rows(rows, next_at) => ClaimOutcome::Claimed {
                events: rows
                    .into_iter()
                    .map(|(index, record, entry)| {
                        if entry == redis::Value::Nil {
                            return Err(Error::corrupted(
                                format!("event {index} was claimed but is missing from the log"),
                                Some(&request.session),
                                Some(index),
                            ));
                        }
                        let entry = crate::codec::entry_reply(&request.session, entry)?;
                        crate::codec::stored(entry.event, Some(&record))
                    })
                    .collect::<Result<_>>()?,
                next_at,
            },
            claim::Reply::Corrupted { index } => {
                return Err(Error::corrupted(
                    format!("event {index} is claimable but missing from the log"),
                    Some(&request.session),
                    Some(index),
                ));
            }
        })
    }

    pub(super) async fn renew_claims_op(&self, request: RenewRequest) -> Result<RenewOutcome> {
        let inner = self.open()?;
        validate::renew_request(&request)?;
        let claims = sorted_claims(&request.claims);
        if claims.is_empty() {
            return Ok(RenewOutcome::default());
        }
        let now = inner.now();
        let args = ops::renew::encode(&request.holder, request.lease.expires_at(now), &claims);
        let reply = inner
            .run(&ops::renew::SCRIPT, &request.session, now, args)
            .await?;
        // Claims ascend, so each list does; an index named with two
        // attempts appears once.
        let mut outcome = ops::renew::decode(reply)?;
        outcome.renewed.dedup();
        outcome.superseded.dedup();
        Ok(outcome)
    }

    pub(super) async fn complete_attempt_op(
        &self,
        request: CompleteRequest,
    ) -> Result<CompleteOutcome> {
        let inner = self.open()?;
        validate::complete_request(&request, &inner.options.limits)?;
        let returns_events = !request.events.is_empty();
        let mut batch = ops::batch::Batch::new(request.events, inner.options.ids.as_ref())?;
        let cause = Cause {
            index: request.index,
            attempt: request.attempt,
            batch_size: request.batch_size,
        };
        let returned = serde_json::to_string(&batch.ids)
            .map_err(|e| Error::invalid(format!("returned ids: {e}")))?;
        let now = inner.now();
        batch.schedule(now)?;
        let args = complete::encode(
            cause,
            &returned,
            &batch,
            &batch.wake(inner.wake_carry_cap, Some(cause)),
        );
        let reply = inner
            .run(&complete::SCRIPT, &request.session, now, args)
            .await?;
        match complete::decode(&request.session, reply)? {
            complete::Reply::Invalid => Err(Error::invalid(format!(
                "index {} does not exist in session {:?}",
                request.index, request.session
            ))),
            complete::Reply::Superseded => Ok(CompleteOutcome::Superseded),
            complete::Reply::Mismatch => Err(Error::duplicate(format!(
                "event {} was completed by attempt {} with other returned ids",
                request.index, request.attempt
            ))),
            complete::Reply::Exists { id } => Err(Error::duplicate(format!(
                "returned id {id:?} already exists"
            ))),
            complete::Reply::Done(events) => Ok(CompleteOutcome::Completed { events }),
            complete::Reply::Closed => Err(Error::session_closed(&request.session)),
            complete::Reply::Written { first } => {
                // The events it returned reach this process's feeds at
                // once, also where they poll (ST2).
                if returns_events {
                    inner
                        .subscriber
                        .wrote(&inner.session_keys(&request.session).events_channel);
                }
                Ok(CompleteOutcome::Completed {
                    events: batch.rows(&request.session, first, now, Some(cause)),
                })
            }
        }
    }

    pub(super) async fn fail_attempt_op(&self, request: FailRequest) -> Result<FailOutcome> {
        let inner = self.open()?;
        validate::fail_request(&request)?;
        let args = ops::fail::encode(
            request.index,
            request.attempt,
            &request.error,
            request.max_failures,
            request.retry_at,
        );
        let reply = inner
            .run(&ops::fail::SCRIPT, &request.session, inner.now(), args)
            .await?;
        ops::fail::decode(reply)?.ok_or_else(|| {
            Error::invalid(format!(
                "index {} does not exist in session {:?}",
                request.index, request.session
            ))
        })
    }

    pub(super) async fn release_claims_op(&self, request: ReleaseRequest) -> Result<Vec<u64>> {
        let inner = self.open()?;
        validate::release_request(&request)?;
        let claims = sorted_claims(&request.claims);
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let args = ops::release::encode(&request.holder, &claims);
        let reply = inner
            .run(&ops::release::SCRIPT, &request.session, inner.now(), args)
            .await?;
        ops::release::decode(reply)
    }

    pub(super) async fn revive_op(&self, session: &str, index: u64) -> Result<ReviveOutcome> {
        let inner = self.open()?;
        validate::session_id(session)?;
        let reply = inner
            .run(
                &ops::revive::SCRIPT,
                session,
                inner.now(),
                ops::revive::encode(index),
            )
            .await?;
        ops::event_reply("revive", session, index, reply, ops::revive::OUTCOMES)
    }
}

impl RedisStore {
    pub(super) async fn cancel_op(&self, request: CancelRequest<'_>) -> Result<CancelOutcome> {
        let inner = self.open()?;
        let (session, index) = (request.session, request.index);
        let args = ops::cancel::encode(index, request.reason.as_deref());
        let reply = inner
            .run(&ops::cancel::SCRIPT, session, inner.now(), args)
            .await?;
        ops::event_reply("cancel", session, index, reply, ops::cancel::OUTCOMES)
    }
}
