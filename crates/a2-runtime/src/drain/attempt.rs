//! One attempt: the handler run, then its outcome recorded (RT3, RT7, RT9,
//! RT10, RT14).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_core::{
    CompleteOutcome, CompleteRequest, ErrorCode, FailKind, FailRequest, NewEvent, StoredEvent,
};
use futures::FutureExt;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use super::cancel::Stop;
use crate::context::Context;
use crate::handler::HandlerError;
use crate::ids::{self, Kind};
use crate::retry;
use crate::shared::Shared;
use crate::stats::{AttemptReport, Counters, Outcome};

/// One attempt: run the handler (panics caught, cancellable), then record
/// the outcome with `complete_attempt` or `fail_attempt` (RT3), in a span
/// carrying session, index, attempt, type and outcome (RT7).
pub(super) async fn run_attempt(
    app: Arc<Shared>,
    events: Vec<StoredEvent>,
    batch: bool,
    stop: Stop,
    permit: OwnedSemaphorePermit,
) -> bool {
    let Some(event) = events.last() else {
        return false;
    };
    // A lane moves on when its head completes (CO2).
    let laned = events.iter().any(|e| e.event.lane.is_some());
    let span = tracing::info_span!(
        "a2.attempt",
        session = %event.event.session_id,
        index = event.event.index,
        attempt = event.attempt_count,
        r#type = %event.event.event_type,
        batch = events.len(),
        outcome = tracing::field::Empty,
    );
    // The report's strings are copied only when someone reads the report.
    let report = app.observer.as_ref().map(|_| {
        (
            AttemptReport {
                session: event.event.session_id.clone(),
                index: event.event.index,
                attempt: event.attempt_count,
                event_type: event.event.event_type.clone(),
                outcome: Outcome::Lost,
                elapsed: Duration::ZERO,
            },
            Instant::now(),
        )
    });
    let outcome = attempt(&app, events, batch, stop, permit)
        .instrument(span.clone())
        .await;
    span.record("outcome", outcome.name());
    let _entered = span.enter();
    match &outcome {
        Outcome::Failed { error, .. } => tracing::info!(%error, "attempt failed"),
        Outcome::DeadLettered { error, .. } => tracing::warn!(%error, "event dead-lettered"),
        Outcome::StoreError { error } => tracing::warn!(%error, "outcome not recorded"),
        other => tracing::debug!(outcome = other.name(), "attempt finished"),
    }
    // RT13: a plain completion frees nothing; anything else may have (a
    // cancel's PS2 wake-up is not heard by a store without push).
    let again = laned || !matches!(outcome, Outcome::Completed { returned: 0 });
    if let (Some(observer), Some((report, started))) = (&app.observer, report) {
        observer(&AttemptReport {
            outcome,
            elapsed: started.elapsed(),
            ..report
        });
    }
    again
}

/// The attempts of one handler call: one event, or a batch handler's
/// batch, in index order; the last one carries the returned events.
struct Call {
    session: String,
    index: u64,
    attempt: u32,
    event_type: String,
    /// (index, attempt, failures so far) of every attempt of the call.
    attempts: Vec<(u64, u32, u32)>,
    batch_size: Option<u32>,
}

impl Call {
    /// The call of `events` (non-empty), or `None` for no events.
    fn of(events: &[StoredEvent], batch: bool) -> Option<Self> {
        let last = events.last()?;
        Some(Self {
            session: last.event.session_id.clone(),
            index: last.event.index,
            attempt: last.attempt_count,
            event_type: last.event.event_type.clone(),
            attempts: events
                .iter()
                .map(|e| (e.event.index, e.attempt_count, e.failure_count))
                .collect(),
            batch_size: batch.then(|| u32::try_from(events.len()).unwrap_or(u32::MAX)),
        })
    }

    /// A completion of `attempt` of `index` returning `events` (RT9: only
    /// the last event of a batch returns any).
    fn completion(&self, index: u64, attempt: u32, events: Vec<NewEvent>) -> CompleteRequest {
        CompleteRequest {
            session: self.session.clone(),
            index,
            attempt,
            events,
            batch_size: self.batch_size,
        }
    }
}

/// What a handler call came to.
type HandlerResult = std::result::Result<Vec<NewEvent>, HandlerError>;

/// Runs the handler for `events` (one event, or a batch handler's batch,
/// non-empty, in index order) under `permit`, and records the outcome:
/// completion (the last event with the returned events, the others with
/// none, RT9) or a failure of every attempt. The permit goes back as soon
/// as the handler has returned, for a place of `recording` (RT14).
async fn attempt(
    app: &Arc<Shared>,
    events: Vec<StoredEvent>,
    batch: bool,
    stop: Stop,
    permit: OwnedSemaphorePermit,
) -> Outcome {
    let Some(call) = Call::of(&events, batch) else {
        return Outcome::Superseded;
    };
    let result = match run_handler(app, &call.event_type, events, batch, &stop).await {
        Ok(result) => result,
        // Cancelled: the lease was lost, or the runtime shuts down.
        Err(outcome) => return outcome,
    };
    // RT17: the event was cancelled while the handler ran; its attempt is
    // superseded (CN2), so nothing of it is recorded.
    if stop.is_by_cancel() {
        Counters::add(&app.counters.cancelled, 1);
        return Outcome::Cancelled;
    }
    // RT14: the handler is done; recording its outcome takes a place of
    // its own, so the next handler can start while the store answers.
    // Taken before the permit goes back, so a slow store holds handlers
    // back rather than letting outcomes pile up.
    let _recording = app.recording.clone().acquire_owned().await;
    drop(permit);
    let error = match result {
        Ok(returned) => match record_completion(app, &call, returned).await {
            Ok(outcome) => return outcome,
            Err(error) => error,
        },
        Err(error) => error.message().to_owned(),
    };
    // Every attempt of the call failed; the last one's outcome is reported.
    let mut outcome = Outcome::Superseded;
    for &(index, attempt, failures_before) in &call.attempts {
        outcome = fail(app, &call.session, index, attempt, failures_before, &error).await;
    }
    outcome
}

/// Runs the handler registered for `event_type` (a batch handler when
/// `batch`; else the type's handler or the fallback) on `events`, a panic
/// counting as an error (RT3). No handler completes with nothing.
/// `Err` is the outcome of an attempt cancelled while it ran: released at
/// shutdown, or lost with its lease.
async fn run_handler(
    app: &Arc<Shared>,
    event_type: &str,
    mut events: Vec<StoredEvent>,
    batch: bool,
    stop: &Stop,
) -> std::result::Result<HandlerResult, Outcome> {
    let inner: &Shared = app;
    let handler = if batch {
        inner
            .batch_handlers
            .get(event_type)
            .map(|b| b.handler.clone())
    } else {
        inner
            .handlers
            .get(event_type)
            .or(inner.fallback.as_ref())
            .cloned()
    };
    let Some(handler) = handler else {
        return Ok(Ok(Vec::new()));
    };
    let ctx = if batch {
        let Some(last) = events.last().cloned() else {
            return Err(Outcome::Superseded);
        };
        Context::for_batch(app.clone(), last, events, stop.signal.clone())
    } else {
        let Some(event) = events.pop() else {
            return Err(Outcome::Superseded);
        };
        Context::new(app.clone(), event, stop.signal.clone())
    };
    let run = AssertUnwindSafe(async move { handler(ctx).await }).catch_unwind();
    tokio::select! {
        biased;
        _ = stop.drop.cancelled() => Err(if inner.abort.is_cancelled() {
            Outcome::Released
        } else if stop.is_by_cancel() {
            // RT17: the handler did not return within the grace period.
            Counters::add(&inner.counters.cancelled, 1);
            Outcome::Cancelled
        } else {
            Counters::add(&inner.counters.lost, 1);
            Outcome::Lost
        }),
        result = run => Ok(result.unwrap_or_else(|panic| {
            Err(HandlerError::new(format!("handler panicked: {}", panic_message(&panic))))
        })),
    }
}

/// Completes the call with the events its handler returned (CO2), then
/// the rest of a batch with none (RT9). `Err` is the error to fail the
/// attempts with: returned events the store refuses (a duplicate id, a
/// `cause` set, a limit) never complete, so the attempt is failed, retried
/// and finally dead-lettered. Events refused because the session was
/// closed meanwhile (CL3) are dropped, and the attempt completes without
/// them (RT15): a closed log takes nothing more, and the event settles.
async fn record_completion(
    app: &Arc<Shared>,
    call: &Call,
    mut returned: Vec<NewEvent>,
) -> std::result::Result<Outcome, String> {
    let inner: &Shared = app;
    let counters = &inner.counters;
    let count = returned.len();
    // Fixed ids make a retried completion a replay (RT10, CO3).
    ids::fill(
        &mut returned,
        &call.session,
        call.index,
        call.attempt,
        Kind::Returned,
        0,
    );
    let mut request = call.completion(call.index, call.attempt, returned);
    let mut completed =
        retry::when_unavailable(|| inner.store.complete_attempt(request.clone())).await;
    if let Err(error) = &completed
        && error.code() == ErrorCode::SessionClosed
        && count > 0
    {
        tracing::warn!(
            session = %call.session,
            index = call.index,
            dropped = count,
            "the session was closed while the handler ran: its returned events are dropped"
        );
        request.events.clear();
        completed = retry::when_unavailable(|| inner.store.complete_attempt(request.clone())).await;
    }
    match completed {
        Ok(CompleteOutcome::Completed { .. }) => {
            complete_rest_of_batch(app, call).await;
            Counters::add(&counters.completed, 1);
            Ok(Outcome::Completed { returned: count })
        }
        Ok(CompleteOutcome::Superseded) => {
            Counters::add(&counters.superseded, 1);
            Ok(Outcome::Superseded)
        }
        Err(e)
            if matches!(
                e.code(),
                ErrorCode::InvalidArgument | ErrorCode::PartialDuplicateBatch
            ) =>
        {
            Err(format!("returned events refused: {e}"))
        }
        Err(e) => {
            Counters::add(&counters.store_errors, 1);
            Ok(Outcome::StoreError {
                error: e.to_string(),
            })
        }
    }
}

/// RT9: the events of a batch before its last, completed with nothing
/// returned once the last one completed.
async fn complete_rest_of_batch(app: &Arc<Shared>, call: &Call) {
    let inner: &Shared = app;
    let counters = &inner.counters;
    let earlier = &call.attempts[..call.attempts.len().saturating_sub(1)];
    for &(index, attempt, _) in earlier {
        let request = call.completion(index, attempt, Vec::new());
        match retry::when_unavailable(|| inner.store.complete_attempt(request.clone())).await {
            Ok(CompleteOutcome::Completed { .. }) => Counters::add(&counters.completed, 1),
            Ok(CompleteOutcome::Superseded) => Counters::add(&counters.superseded, 1),
            Err(error) => {
                Counters::add(&counters.store_errors, 1);
                tracing::warn!(index, %error, "completing an event of the batch failed");
            }
        }
    }
}

/// Records a failed attempt with its backoff (F6, RT3).
async fn fail(
    app: &Arc<Shared>,
    session: &str,
    index: u64,
    attempt: u32,
    failures_before: u32,
    error: &str,
) -> Outcome {
    let inner: &Shared = app;
    let counters = &inner.counters;
    let failure = failures_before.saturating_add(1);
    let delay = inner.options.backoff.delay(failure);
    let retry_at = inner
        .store
        .clock()
        .now_ms()
        .saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
    let request = FailRequest {
        session: session.to_owned(),
        index,
        attempt,
        error: error.to_owned(),
        max_failures: inner.options.max_failures.max(1),
        retry_at: (!delay.is_zero()).then_some(retry_at),
    };
    match inner.store.fail_attempt(request).await {
        Ok(outcome) => match outcome.outcome {
            FailKind::Failed => {
                Counters::add(&counters.failed, 1);
                Outcome::Failed {
                    error: error.to_owned(),
                    retry_at,
                    failures: outcome.failure_count,
                }
            }
            FailKind::DeadLettered => {
                Counters::add(&counters.dead_lettered, 1);
                Outcome::DeadLettered {
                    error: error.to_owned(),
                    failures: outcome.failure_count,
                }
            }
            FailKind::Superseded => {
                Counters::add(&counters.superseded, 1);
                Outcome::Superseded
            }
        },
        Err(e) => {
            Counters::add(&counters.store_errors, 1);
            Outcome::StoreError {
                error: e.to_string(),
            }
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
