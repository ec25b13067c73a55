//! The routes of a wake's consumers: a webhook's callback, a pull-wake
//! worker's claim, ack and release. The callback, ack and release are
//! authorized by the wake's token, not by the server's API tokens.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::bodies::{ClaimRequest, SubscriptionPath, Typed, WakeReport, invalid};
use super::manage::{conflict, normalize};
use crate::auth::CanAppend;
use crate::error::{ApiError, ApiResult, ErrorBody, Path};
use crate::routes::streams::text;
use crate::state::AppState;
use crate::streams::subscriptions::fold::{
    Change, Kind, Refusal, TOKEN_TTL_MS, Token, stream_info,
};
use crate::streams::subscriptions::wake::{Started, end_wake, start, tell};
use crate::streams::subscriptions::{Seen, decide, error, keys};
use crate::streams::{At, parse_offset};

/// What a consumer sends with its token: the wake it acts on, offsets
/// acknowledged, whether it is done. The handlers of the wake's token
/// extract it from the request's `Authorization` header and body.
pub(crate) struct Report {
    token: String,
    wake_id: Option<String>,
    generation: Option<u64>,
    acks: Vec<(String, String)>,
    done: bool,
}

impl<S: Send + Sync> FromRequest<S> for Report {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let headers = req.headers().clone();
        let body = Typed::<WakeReport>::from_request(req, state).await;
        report_of(&headers, body)
    }
}

fn report_of(
    headers: &HeaderMap,
    body: Result<Typed<WakeReport>, ApiError>,
) -> Result<Report, ApiError> {
    let token = text(headers, header::AUTHORIZATION.as_str())
        .and_then(|v| v.strip_prefix("Bearer "))
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            error(
                StatusCode::UNAUTHORIZED,
                "TOKEN_INVALID",
                "send the wake's token as Authorization: Bearer",
            )
        })?
        .to_owned();
    // The token is checked first: a request without one is refused as
    // unauthorized whatever its body.
    let Typed(body) = body?;
    Ok(Report {
        token,
        wake_id: body.wake_id,
        generation: body.generation,
        acks: body
            .acks
            .unwrap_or_default()
            .into_iter()
            .map(|ack| (normalize(&ack.stream), ack.offset))
            .collect(),
        done: body.done == Some(true),
    })
}

/// Checks the token of `report` against the wake in progress.
fn check(seen: &Seen<'_>, report: &Report) -> Result<(), ApiError> {
    let hash = keys::hash(&report.token);
    seen.sub
        .check_token(
            &hash,
            report.wake_id.as_deref(),
            report.generation,
            seen.now,
        )
        .map_err(|refusal| match refusal {
            Refusal::Invalid => error(StatusCode::UNAUTHORIZED, "TOKEN_INVALID", "unknown token"),
            Refusal::Expired => error(
                StatusCode::UNAUTHORIZED,
                "TOKEN_EXPIRED",
                "the token expired",
            ),
            Refusal::Fenced => conflict("FENCED", "the wake generation is stale"),
        })
}

/// Refuses what only a pull-wake subscription takes (a claim, an ack, a
/// release) when the subscription is a webhook's.
fn pull_wake(seen: &Seen<'_>) -> Result<(), ApiError> {
    if seen.sub.spec.kind != Kind::PullWake {
        return Err(invalid("the subscription is not pull-wake"));
    }
    Ok(())
}

/// The acknowledgements of `report`, checked: linked streams, offsets
/// neither before what was acknowledged nor past the tail.
fn acks_of(seen: &Seen<'_>, report: &Report) -> Result<Vec<(String, u64)>, ApiError> {
    let bad = |why: String| conflict("INVALID_OFFSET", why);
    report
        .acks
        .iter()
        .map(|(path, text)| {
            let link = seen
                .sub
                .links
                .get(path)
                .ok_or_else(|| bad(format!("{path:?} is not a stream of the subscription")))?;
            // Subscriptions count streams by session index: a fork's
            // inserted events are not counted around here.
            let index = match parse_offset(text) {
                Ok(At::After(position)) if text != "-1" => position.base,
                _ => return Err(bad(format!("{text:?} is not an offset to acknowledge"))),
            };
            if link.acked.is_some_and(|acked| index < acked) {
                return Err(bad(format!(
                    "{text:?} is before what {path:?} acknowledged"
                )));
            }
            if index > seen.tails.get(path).copied().unwrap_or(0) {
                return Err(bad(format!("{text:?} is past the tail of {path:?}")));
            }
            Ok((path.clone(), index))
        })
        .collect()
}

/// Acknowledges and, when done, ends the wake (starting the next one if
/// there is work): the callback of a webhook, the ack of a pull-wake.
async fn acknowledge(
    state: &AppState,
    id: &str,
    report: Report,
    pull: bool,
) -> ApiResult<Json<Value>> {
    let (sub, tails, next) = decide(&state.streams, id, &HashMap::new(), |seen| {
        if pull {
            pull_wake(&seen)?;
        }
        check(&seen, &report)?;
        let acks = acks_of(&seen, &report)?;
        let changes = vec![Change::Acked {
            acks,
            lease_until: seen.now + seen.sub.spec.lease_ttl_ms as i64,
        }];
        Ok(if report.done {
            end_wake(&seen, changes, false)
        } else {
            (changes, None)
        })
    })
    .await?;
    let next_wake = next.is_some();
    tell(&state.streams, &sub, &tails, next);
    Ok(Json(json!({ "ok": true, "next_wake": next_wake })))
}

#[utoipa::path(
    post,
    path = "/v1/stream/__ds/subscriptions/{id}/callback",
    params(SubscriptionPath),
    request_body = super::bodies::WakeReport,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Acknowledged", body = super::bodies::Acknowledged),
        (status = 401, description = "No token, an unknown one (TOKEN_INVALID) or an expired one (TOKEN_EXPIRED)", body = ErrorBody),
        (status = 409, description = "A stale wake generation (FENCED) or an offset that cannot be acknowledged (INVALID_OFFSET)", body = ErrorBody),
    )
)]
/// `POST …/{id}/callback`: a webhook consumer's acknowledgement.
pub(crate) async fn callback(
    State(state): State<AppState>,
    Path(SubscriptionPath { id }): Path<SubscriptionPath>,
    report: Report,
) -> ApiResult<Json<Value>> {
    acknowledge(&state, &id, report, false).await
}

#[utoipa::path(
    post,
    path = "/v1/stream/__ds/subscriptions/{id}/ack",
    params(SubscriptionPath),
    request_body = super::bodies::WakeReport,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Acknowledged", body = super::bodies::Acknowledged),
        (status = 401, description = "No token, an unknown one (TOKEN_INVALID) or an expired one (TOKEN_EXPIRED)", body = ErrorBody),
        (status = 409, description = "A stale wake generation (FENCED) or an offset that cannot be acknowledged (INVALID_OFFSET)", body = ErrorBody),
    )
)]
/// `POST …/{id}/ack`: a pull-wake worker's acknowledgement.
pub(crate) async fn ack(
    State(state): State<AppState>,
    Path(SubscriptionPath { id }): Path<SubscriptionPath>,
    report: Report,
) -> ApiResult<Json<Value>> {
    acknowledge(&state, &id, report, true).await
}

#[utoipa::path(
    post,
    path = "/v1/stream/__ds/subscriptions/{id}/release",
    params(SubscriptionPath),
    request_body = super::bodies::WakeReport,
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Released"),
        (status = 401, description = "No token, an unknown one (TOKEN_INVALID) or an expired one (TOKEN_EXPIRED)", body = ErrorBody),
        (status = 409, description = "A stale wake generation (FENCED)", body = ErrorBody),
    )
)]
/// `POST …/{id}/release`: a pull-wake worker gives the wake up.
pub(crate) async fn release(
    State(state): State<AppState>,
    Path(SubscriptionPath { id }): Path<SubscriptionPath>,
    report: Report,
) -> ApiResult<StatusCode> {
    let (sub, tails, next) = decide(&state.streams, &id, &HashMap::new(), |seen| {
        pull_wake(&seen)?;
        check(&seen, &report)?;
        Ok(end_wake(&seen, Vec::new(), false))
    })
    .await?;
    tell(&state.streams, &sub, &tails, next);
    Ok(StatusCode::NO_CONTENT)
}

/// What a claim found.
enum Claim {
    Granted {
        token: String,
        started: Option<Started>,
    },
    Busy {
        holder: String,
        generation: u64,
    },
}

#[utoipa::path(
    post,
    path = "/v1/stream/__ds/subscriptions/{id}/claim",
    params(SubscriptionPath),
    request_body = super::bodies::ClaimRequest,
    security(("bearer" = ["append"])),
    responses(
        (status = 200, description = "Claimed: the wake, its token and its streams", body = serde_json::Value),
        (status = 409, description = "Another worker holds the wake (ALREADY_CLAIMED, with current_holder) or there is no work (NO_PENDING_WORK)", body = ErrorBody),
    )
)]
/// `POST …/{id}/claim` with `{"worker": …}`: the worker holds the wake
/// (one is started if there is work and none is in progress) under a
/// lease, with a token for its ack or release.
pub(crate) async fn claim(
    CanAppend(state): CanAppend,
    Path(SubscriptionPath { id }): Path<SubscriptionPath>,
    Typed(body): Typed<ClaimRequest>,
) -> ApiResult<Response> {
    let worker = Some(body.worker)
        .filter(|w| !w.is_empty())
        .ok_or_else(|| invalid("worker must be a non-empty string"))?;
    let (sub, tails, claim) = decide(&state.streams, &id, &HashMap::new(), |seen| {
        pull_wake(&seen)?;
        if let Some(holder) = seen.sub.live_wake(seen.now).and_then(|w| w.holder.clone()) {
            let busy = Claim::Busy {
                holder,
                generation: seen.sub.generation,
            };
            return Ok((Vec::new(), busy));
        }
        let mut changes = Vec::new();
        let mut started = None;
        if seen.sub.live_wake(seen.now).is_none() {
            started = Some(
                start(&seen, &mut changes)
                    .ok_or_else(|| conflict("NO_PENDING_WORK", "no stream has work"))?,
            );
        }
        let (token, hash) = keys::token();
        changes.push(Change::Claimed {
            holder: worker.clone(),
            token: Token {
                hash,
                expires: seen.now + TOKEN_TTL_MS,
            },
            lease_until: seen.now + seen.sub.spec.lease_ttl_ms as i64,
        });
        Ok((changes, Claim::Granted { token, started }))
    })
    .await?;
    match claim {
        Claim::Busy { holder, generation } => Ok((
            StatusCode::CONFLICT,
            Json(json!({ "error": {
                "code": "ALREADY_CLAIMED",
                "message": format!("the wake is held by {holder:?}"),
                "current_holder": holder,
                "generation": generation,
            }})),
        )
            .into_response()),
        Claim::Granted { token, started } => {
            let wake_id = sub.wake.as_ref().map(|w| w.id.clone());
            let answer = json!({
                "wake_id": wake_id,
                "generation": sub.generation,
                "token": token,
                "streams": stream_info(&sub, &tails),
                "lease_ttl_ms": sub.spec.lease_ttl_ms,
            });
            tell(&state.streams, &sub, &tails, started);
            Ok(Json(answer).into_response())
        }
    }
}
