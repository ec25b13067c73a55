//! The remote worker API: a worker in any language finds pending sessions,
//! claims events, renews its leases while it works, then completes or
//! fails each attempt, and releases what it will not finish (§3).

use a2_core::{
    ClaimOutcome, ClaimRequest, CompleteOutcome, CompleteRequest, FailRequest, Lease, NewEvent,
    PageRequest, ReleaseRequest, RenewRequest,
};

use crate::auth::CanWork;
use crate::error::{ApiError, ApiResult, Json, Query};
use crate::model::*;
use crate::routes::page_limit;
use crate::routes::sessions::check_batch;
use crate::state::AppState;

/// How many pending sessions a claim without a session looks at, at most:
/// a bound on one request's work when many sessions are busy.
const CLAIM_SCAN: usize = 1_000;

/// Sessions with pending events, in byte order (PS1).
#[utoipa::path(
    get,
    path = "/v1/work/pending",
    params(PendingQuery),
    security(("bearer" = ["work"])),
    responses((status = 200, description = "Sessions with pending work", body = PendingResponse))
)]
pub(crate) async fn pending(
    CanWork(state): CanWork,
    Query(query): Query<PendingQuery>,
) -> ApiResult<Json<PendingResponse>> {
    let limit = page_limit(query.limit, 100)?;
    let page = state
        .store
        .pending_sessions(PageRequest {
            cursor: query.cursor.filter(|c| !c.is_empty()),
            limit,
        })
        .await?;
    Ok(Json(PendingResponse {
        sessions: page.sessions,
        cursor: page.cursor,
    }))
}

/// Leases ready events to a holder (C1, C2, C3, C4, C5, C6, C7). With `session`, claims there;
/// without, claims in the first session with claimable work (looking at up
/// to 1 000 sessions with pending events) and says which.
#[utoipa::path(
    post,
    path = "/v1/work/claim",
    request_body = ClaimBody,
    security(("bearer" = ["work"])),
    responses((status = 200, description = "Claimed, busy or settled", body = ClaimResponse))
)]
pub(crate) async fn claim(
    CanWork(state): CanWork,
    Json(body): Json<ClaimBody>,
) -> ApiResult<Json<ClaimResponse>> {
    let limit = body.limit.unwrap_or(1);
    let request = |session: String, exclude: Vec<u64>| ClaimRequest {
        session,
        holder: body.holder.clone(),
        lease: Lease::Ttl(body.ttl_ms),
        exclude_indexes: exclude,
        limit,
    };
    if let Some(session) = body.session.clone() {
        let outcome = state
            .store
            .claim_available(request(session.clone(), body.exclude_indexes.clone()))
            .await?;
        return Ok(Json(answer(&state, Some(session), outcome)));
    }
    if !body.exclude_indexes.is_empty() {
        return Err(ApiError::invalid(
            "exclude_indexes needs a session: indexes name events of one session",
        ));
    }
    // Validate once up front, so bad input is refused even when no
    // session is pending (and the loop below is never entered).
    a2_core::validate::claim_request(&request("-".into(), Vec::new()))?;
    let mut busy: Option<i64> = None;
    let mut cursor = None;
    let mut seen = 0;
    while seen < CLAIM_SCAN {
        let page = state
            .store
            .pending_sessions(PageRequest {
                cursor: cursor.take(),
                limit: 100,
            })
            .await?;
        for session in page.sessions {
            seen += 1;
            let outcome = state
                .store
                .claim_available(request(session.clone(), Vec::new()))
                .await?;
            match outcome {
                ClaimOutcome::Claimed { ref events, .. } if !events.is_empty() => {
                    return Ok(Json(answer(&state, Some(session), outcome)));
                }
                ClaimOutcome::Busy { retry_at } => {
                    busy = Some(busy.map_or(retry_at, |b| b.min(retry_at)));
                }
                _ => {}
            }
        }
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let outcome = match busy {
        Some(retry_at) => ClaimOutcome::Busy { retry_at },
        None => ClaimOutcome::Settled,
    };
    Ok(Json(answer(&state, None, outcome)))
}

fn answer(state: &AppState, session: Option<String>, outcome: ClaimOutcome) -> ClaimResponse {
    let (outcome, retry_at) = match outcome {
        ClaimOutcome::Claimed { events, next_at } => {
            state.metrics.claimed.increment(events.len() as u64);
            return ClaimResponse::claimed(session.unwrap_or_default(), events, next_at);
        }
        ClaimOutcome::Busy { retry_at } => (ClaimKind::Busy, Some(retry_at)),
        ClaimOutcome::Settled => (ClaimKind::Settled, None),
    };
    ClaimResponse {
        outcome,
        session,
        events: Vec::new(),
        retry_at,
        next_at: None,
    }
}

/// Extends leases still held (RN1, RN2, RN3).
#[utoipa::path(
    post,
    path = "/v1/work/renew",
    request_body = RenewBody,
    security(("bearer" = ["work"])),
    responses((status = 200, description = "Renewed and superseded claims", body = RenewResponse))
)]
pub(crate) async fn renew(
    CanWork(state): CanWork,
    Json(body): Json<RenewBody>,
) -> ApiResult<Json<RenewResponse>> {
    let outcome = state
        .store
        .renew_claims(RenewRequest {
            session: body.session,
            holder: body.holder,
            claims: body.claims.into_iter().map(Into::into).collect(),
            lease: Lease::Ttl(body.ttl_ms),
        })
        .await?;
    Ok(Json(RenewResponse {
        renewed: outcome.renewed,
        superseded: outcome.superseded,
    }))
}

/// Completes an attempt, appending the events it returned (CO1, CO2, CO3, CO4, CO5, CO6).
#[utoipa::path(
    post,
    path = "/v1/work/complete",
    request_body = CompleteBody,
    security(("bearer" = ["work"])),
    responses((status = 200, description = "Completed or superseded", body = CompleteResponse))
)]
pub(crate) async fn complete(
    CanWork(state): CanWork,
    Json(body): Json<CompleteBody>,
) -> ApiResult<Json<CompleteResponse>> {
    check_batch(&state, body.events.len())?;
    let outcome = state
        .streams
        .complete(CompleteRequest {
            session: body.session,
            index: body.index,
            attempt: body.attempt,
            events: body.events.into_iter().map(NewEvent::from).collect(),
            batch_size: body.batch_size,
        })
        .await?;
    Ok(Json(match outcome {
        CompleteOutcome::Completed { events } => {
            state.metrics.completed.increment(1);
            CompleteResponse::completed(events)
        }
        CompleteOutcome::Superseded => CompleteResponse {
            outcome: CompleteKind::Superseded,
            events: Vec::new(),
        },
    }))
}

/// Records a failed attempt; dead-letters the event once it failed
/// `max_failures` times (F1, F2, F3, F4, F5, F6).
#[utoipa::path(
    post,
    path = "/v1/work/fail",
    request_body = FailBody,
    security(("bearer" = ["work"])),
    responses((status = 200, description = "Failed, dead-lettered or superseded", body = FailResponse))
)]
pub(crate) async fn fail(
    CanWork(state): CanWork,
    Json(body): Json<FailBody>,
) -> ApiResult<Json<FailResponse>> {
    let retry_at = body.retry_after_ms.map(|ms| {
        let ms = i64::try_from(a2_core::validate::effective_ttl(ms)).unwrap_or(i64::MAX);
        state.store.clock().now_ms().saturating_add(ms)
    });
    let outcome = state
        .store
        .fail_attempt(FailRequest {
            session: body.session,
            index: body.index,
            attempt: body.attempt,
            error: body.error,
            max_failures: body.max_failures,
            retry_at,
        })
        .await?;
    match outcome.outcome {
        a2_core::FailKind::Failed => state.metrics.failed.increment(1),
        a2_core::FailKind::DeadLettered => {
            state.metrics.failed.increment(1);
            state.metrics.dead_lettered.increment(1);
        }
        a2_core::FailKind::Superseded => {}
    }
    Ok(Json(outcome.into()))
}

/// Ends this holder's leases at once, so another worker can claim the
/// events without waiting for the leases to run out (RL1).
#[utoipa::path(
    post,
    path = "/v1/work/release",
    request_body = ReleaseBody,
    security(("bearer" = ["work"])),
    responses((status = 200, description = "Released indexes", body = ReleaseResponse))
)]
pub(crate) async fn release(
    CanWork(state): CanWork,
    Json(body): Json<ReleaseBody>,
) -> ApiResult<Json<ReleaseResponse>> {
    let released = state
        .store
        .release_claims(ReleaseRequest {
            session: body.session,
            holder: body.holder,
            claims: body.claims.into_iter().map(Into::into).collect(),
        })
        .await?;
    Ok(Json(ReleaseResponse { released }))
}
