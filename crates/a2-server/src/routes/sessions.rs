//! Sessions: list, append, read, history, state, snapshots, clear.

use a2_core::{HistoryOptions, ListSessionsOptions, NewEvent, ReadEventsOptions, SnapshotWrite};
use axum::http::StatusCode;

use crate::auth::{CanAdmin, CanAppend, CanRead, CanWork};
use crate::error::{ApiError, ApiResult, Json, OptionalJson, Path, Query};
use crate::model::*;
use crate::routes::page_limit;
use crate::state::AppState;

/// Lists sessions with their counters, in byte order of id (I1).
#[utoipa::path(
    get,
    path = "/v1/sessions",
    params(ListSessionsQuery),
    security(("bearer" = ["read"])),
    responses((status = 200, description = "A page of sessions", body = SessionListResponse))
)]
pub(crate) async fn list(
    CanRead(state): CanRead,
    Query(query): Query<ListSessionsQuery>,
) -> ApiResult<Json<SessionListResponse>> {
    let limit = page_limit(query.limit, 100)?;
    let options = ListSessionsOptions::new(limit)
        .prefix(query.prefix.filter(|p| !p.is_empty()))
        .cursor(query.cursor.filter(|c| !c.is_empty()));
    let page = state.store.list_sessions(options).await?;
    let mut page = SessionListResponse::from(page);
    for session in &mut page.sessions {
        session.followers = state.store.session_followers(&session.session_id) as u64;
    }
    Ok(Json(page))
}

/// Appends a batch atomically (A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11,
/// A12). Idempotent by event id: sending a batch whose ids were all written
/// before returns the original rows and writes nothing (A5), so a client may
/// retry a request whose answer it lost.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session}/events",
    params(("session" = String, Path, description = "The session id")),
    request_body = AppendBody,
    security(("bearer" = ["append"])),
    responses((status = 200, description = "The stored rows", body = AppendResponse))
)]
pub(crate) async fn append(
    CanAppend(state): CanAppend,
    Path(session): Path<String>,
    Json(body): Json<AppendBody>,
) -> ApiResult<Json<AppendResponse>> {
    check_batch(&state, body.events.len())?;
    let events: Vec<NewEvent> = body.events.into_iter().map(NewEvent::from).collect();
    let mut options = a2_core::AppendOptions::new();
    if let Some(expiry) = body.expiry {
        options = options.expiry(expiry.into());
    }
    if let Some(frontier) = body.if_frontier {
        options = options.if_frontier(frontier);
    }
    if body.close {
        options = options.close();
    }
    let outcome = state.streams.append_with(&session, events, options).await?;
    state
        .metrics
        .appended
        .increment(outcome.events.len() as u64);
    crate::routes::let_woken_run().await;
    Ok(Json(outcome.into()))
}

/// Refuses a batch longer than the server's limit.
pub(crate) fn check_batch(state: &AppState, len: usize) -> Result<(), ApiError> {
    let max = state.config.max_batch_len;
    if len > max {
        return Err(ApiError::invalid(format!(
            "a batch holds at most {max} events over HTTP, not {len}; \
             `a2 serve --max-batch N` raises it"
        )));
    }
    Ok(())
}

/// A page of a session's events with their processing state (I2).
#[utoipa::path(
    get,
    path = "/v1/sessions/{session}/events",
    params(("session" = String, Path, description = "The session id"), ReadEventsQuery),
    security(("bearer" = ["read"])),
    responses((status = 200, description = "A page of events", body = EventsPageResponse))
)]
pub(crate) async fn read_events(
    CanRead(state): CanRead,
    Path(session): Path<String>,
    Query(query): Query<ReadEventsQuery>,
) -> ApiResult<Json<EventsPageResponse>> {
    let limit = page_limit(query.limit, 100)?;
    a2_core::validate::session_id(&session)?;
    let options = ReadEventsOptions::new(limit)
        .after_index(query.after_index.unwrap_or(0))
        .through_index(query.through_index);
    let page = state.store.read_events(&session, options).await?;
    Ok(Json(page.into()))
}

/// The newest events before an index, a page at a time backwards (R2).
#[utoipa::path(
    get,
    path = "/v1/sessions/{session}/history",
    params(("session" = String, Path, description = "The session id"), HistoryQuery),
    security(("bearer" = ["read"])),
    responses((status = 200, description = "A page of history", body = HistoryResponse))
)]
pub(crate) async fn history(
    CanRead(state): CanRead,
    Path(session): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> ApiResult<Json<HistoryResponse>> {
    let limit = page_limit(query.limit, 50)?;
    a2_core::validate::session_id(&session)?;
    let options = HistoryOptions::new(limit).before_index(query.before_index);
    let page = state.store.read_history(&session, options).await?;
    Ok(Json(page.into()))
}

/// A reducer's snapshot and the events after it (S1), at most `limit` of
/// them (1 000 by default): a misspelt reducer, which has no snapshot, does
/// not return a whole long log. `has_more` says when more events follow up
/// to `through_index`.
#[utoipa::path(
    get,
    path = "/v1/sessions/{session}/state/{reducer}",
    params(
        ("session" = String, Path, description = "The session id"),
        ("reducer" = String, Path, description = "The reducer's name"),
        StateQuery
    ),
    security(("bearer" = ["read"])),
    responses((status = 200, description = "Snapshot and newer events", body = StateResponse))
)]
pub(crate) async fn state(
    CanRead(state): CanRead,
    Path((session, reducer)): Path<(String, String)>,
    Query(query): Query<StateQuery>,
) -> ApiResult<Json<StateResponse>> {
    let limit = page_limit(query.limit, crate::routes::MAX_PAGE)?;
    a2_core::validate::session_id(&session)?;
    a2_core::validate::name("reducer", &reducer)?;
    let read = state.store.read_state(&session, &reducer).await?;
    Ok(Json(StateResponse::paged(read, limit)))
}

/// Stores a reducer's snapshot, kept only if newer than the stored one (S2).
#[utoipa::path(
    put,
    path = "/v1/sessions/{session}/state/{reducer}",
    params(
        ("session" = String, Path, description = "The session id"),
        ("reducer" = String, Path, description = "The reducer's name")
    ),
    request_body = PutSnapshotBody,
    security(("bearer" = ["work"])),
    responses((status = 204, description = "Stored, or older than the stored one"))
)]
pub(crate) async fn put_snapshot(
    CanWork(state): CanWork,
    Path((session, reducer)): Path<(String, String)>,
    Json(body): Json<PutSnapshotBody>,
) -> ApiResult<StatusCode> {
    let write = SnapshotWrite {
        reducer,
        index: body.index,
        state: body.state,
    };
    state.store.put_snapshots(&session, vec![write]).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The session's snapshots by reducer name (I3).
#[utoipa::path(
    get,
    path = "/v1/sessions/{session}/snapshots",
    params(("session" = String, Path, description = "The session id")),
    security(("bearer" = ["read"])),
    responses((status = 200, description = "Snapshots", body = SnapshotsResponse))
)]
pub(crate) async fn snapshots(
    CanRead(state): CanRead,
    Path(session): Path<String>,
) -> ApiResult<Json<SnapshotsResponse>> {
    a2_core::validate::session_id(&session)?;
    let list = state.store.list_snapshots(&session).await?;
    Ok(Json(list.into()))
}

/// Deletes a session entirely (I4).
#[utoipa::path(
    delete,
    path = "/v1/sessions/{session}",
    params(("session" = String, Path, description = "The session id")),
    security(("bearer" = ["admin"])),
    responses((status = 204, description = "Deleted (or never existed)"))
)]
pub(crate) async fn clear(
    CanAdmin(state): CanAdmin,
    Path(session): Path<String>,
) -> ApiResult<StatusCode> {
    a2_core::validate::session_id(&session)?;
    state.streams.clear(&session).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sets a session's expiry (EX1, EX2): `ttl_ms` (sliding: that long after
/// its last write) and/or `expires_at`; neither keeps it until deleted. At
/// its deadline the session is gone as after a delete, and its live feeds
/// end with `SessionExpired`.
#[utoipa::path(
    put,
    path = "/v1/sessions/{session}/expiry",
    params(("session" = String, Path, description = "The session id")),
    request_body = ExpiryBody,
    security(("bearer" = ["append"])),
    responses((status = 200, description = "The session's new deadline", body = ExpiryResponse))
)]
pub(crate) async fn set_expiry(
    CanAppend(state): CanAppend,
    Path(session): Path<String>,
    Json(body): Json<ExpiryBody>,
) -> ApiResult<Json<ExpiryResponse>> {
    a2_core::validate::session_id(&session)?;
    let outcome = state.store.set_expiry(&session, body.into()).await?;
    Ok(Json(ExpiryResponse {
        deadline: outcome.deadline,
    }))
}

/// Closes a session (CL1): its log is final at its frontier. Later appends
/// are refused with `SessionClosed` (409), pending events are still
/// processed, and live feeds end with an `end` message once they delivered
/// the last event (CL4). Closing again answers `already_closed`.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session}/close",
    params(("session" = String, Path, description = "The session id")),
    security(("bearer" = ["append"])),
    responses((status = 200, description = "Closed, or closed before", body = CloseResponse))
)]
pub(crate) async fn close(
    CanAppend(state): CanAppend,
    Path(session): Path<String>,
) -> ApiResult<Json<CloseResponse>> {
    a2_core::validate::session_id(&session)?;
    let outcome = state.store.close_session(&session).await?;
    Ok(Json(outcome.into()))
}

/// Trims a session's settled prefix (TR1, TR2): events 1 … `through_index`
/// go, every later index stays. A pending or dead-lettered event in the
/// range, or an index past the frontier, is refused (400) with nothing
/// written; reads before the new first index answer `Trimmed` (410). A
/// trim that would leave a reducer's snapshot behind the trim point is
/// refused (409 `SnapshotsBehind`, naming the reducers), nothing written,
/// unless the body allows it (RT19).
#[utoipa::path(
    post,
    path = "/v1/sessions/{session}/trim",
    params(("session" = String, Path, description = "The session id")),
    request_body = TrimBody,
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "The first retained index", body = TrimResponse))
)]
pub(crate) async fn trim(
    CanAdmin(state): CanAdmin,
    Path(session): Path<String>,
    Json(body): Json<TrimBody>,
) -> ApiResult<Json<TrimResponse>> {
    a2_core::validate::session_id(&session)?;
    if !body.allow_stale_snapshots {
        let snapshots = state.store.list_snapshots(&session).await?;
        let behind = a2_core::rules::lifecycle::snapshots_behind(&snapshots, body.through_index);
        if !behind.is_empty() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "SnapshotsBehind",
                a2_core::rules::lifecycle::snapshots_behind_message(
                    &session,
                    body.through_index,
                    &behind,
                    "send \"allow_stale_snapshots\": true",
                ),
            ));
        }
    }
    let outcome = state.store.trim(&session, body.through_index).await?;
    Ok(Json(TrimResponse {
        first_index: outcome.first_index,
    }))
}

/// Forks a session at an index into a new session (FK1, FK2, FK3, FK4):
/// the target gets the events up to the index with their records (leases
/// released) and snapshots, then goes its own way. The same fork again
/// answers `already_forked`; a target that is another session is
/// `SessionExists` (409); a bad index or target is refused (400) and an
/// index whose events were trimmed away is `Trimmed` (410), nothing
/// written.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session}/fork",
    params(("session" = String, Path, description = "The source session id")),
    request_body = ForkBody,
    security(("bearer" = ["append"])),
    responses((status = 200, description = "Forked, or forked before", body = ForkResponse))
)]
pub(crate) async fn fork(
    CanAppend(state): CanAppend,
    Path(session): Path<String>,
    Json(body): Json<ForkBody>,
) -> ApiResult<Json<ForkResponse>> {
    a2_core::validate::session_id(&session)?;
    let outcome = state
        .streams
        .fork(&session, body.at_index, &body.target)
        .await?;
    Ok(Json(outcome.into()))
}

/// Makes a dead-lettered event pending again: failures reset, ready at
/// once, its lane unblocked (RV1, RV2, RV3). Any other event answers
/// `not_dead_lettered` and nothing is written, so of several revives of one
/// dead letter exactly one revives it.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session}/events/{index}/revive",
    params(
        ("session" = String, Path, description = "The session id"),
        ("index" = u64, Path, description = "The dead-lettered event's index")
    ),
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "Revived, or not dead-lettered", body = ReviveResponse))
)]
pub(crate) async fn revive(
    CanAdmin(state): CanAdmin,
    Path((session, index)): Path<(String, u64)>,
) -> ApiResult<Json<ReviveResponse>> {
    a2_core::validate::session_id(&session)?;
    let outcome = state.store.revive(&session, index).await?;
    if outcome.is_revived() {
        state.metrics.revived.increment(1);
    }
    Ok(Json(outcome.into()))
}

/// Cancels an event (CN1, CN2, CN3, CN4): pending, delayed, leased or
/// dead-lettered, it is settled as cancelled and its lane moves on; a
/// handler running it, in any process, is told to stop, and its attempt's
/// outcome is refused. An event settled already answers `not_pending` and
/// nothing is written. The body may be `{}`, or left out.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session}/events/{index}/cancel",
    params(
        ("session" = String, Path, description = "The session id"),
        ("index" = u64, Path, description = "The event's index")
    ),
    request_body = CancelBody,
    security(("bearer" = ["append"])),
    responses((status = 200, description = "Cancelled, or settled already", body = CancelResponse))
)]
pub(crate) async fn cancel(
    CanAppend(state): CanAppend,
    Path((session, index)): Path<(String, u64)>,
    OptionalJson(body): OptionalJson<CancelBody>,
) -> ApiResult<Json<CancelResponse>> {
    a2_core::validate::session_id(&session)?;
    let outcome = state.store.cancel(&session, index, body.reason).await?;
    if outcome.is_cancelled() {
        state.metrics.cancelled.increment(1);
    }
    Ok(Json(outcome.into()))
}
