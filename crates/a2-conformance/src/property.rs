//! The model-based property test: random sequences of appends (with lanes,
//! settled events and causes), claims, renewals, completions (with returned
//! events), failures (with and without a retry time, small `max_failures`),
//! releases, revives of dead letters, closes, forks and clock moves over
//! three sessions, checked after every step.
//!
//! Each step's outcome is predicted from the rows read before it and the
//! SPEC rules (C1, C2, C3, C4, C5, RN1, RN2, RN3, CO2, CO3, CO4, CO5, F2, F3,
//! F4, F5, F6, RL1, RV1, RV2, RV3, A7, CL1, CL2, CL3, FK1, FK2, FK3, FK4), and after each step the store must
//! keep these invariants:
//! - indexes are dense, 1..=n, with n the expected frontier (A1);
//! - every (index, attempt) is handed out once, and `attempt_count` equals
//!   the number of claims handed out for the event (C2, C6);
//! - an event is processed at most once, by one attempt, and never both
//!   processed and dead-lettered; a dead-lettered event is never claimed
//!   again (CO2, F6);
//! - per lane, processing follows index order (§1 readiness);
//! - `list_sessions` counters equal a recount from `read` (I1);
//! - `pending_sessions` lists exactly the sessions with pending events (PS1);
//! - `read_history` and `read_events` pages agree with `read` (R2, I2).
//!
//! Lease ttls and retry delays end in 50 ms while the clock moves in
//! multiples of 100 ms, so no expiry ever falls exactly on "now": the
//! predictions never depend on which side of a boundary a store counts.

use std::collections::{BTreeMap, BTreeSet};

use a2_core::{
    AppendClaim, AppendOptions, CancelOutcome, Cause, Claim, ClaimOutcome, ClaimRequest,
    CloseOutcome, CompleteOutcome, CompleteRequest, ErrorCode, FailKind, FailRequest, ForkOutcome,
    Lease, Millis, NewEvent, ReadRange, ReleaseRequest, RenewRequest, ReviveOutcome, Store,
    StoredEvent,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRng, TestRunner};
use serde_json::json;

use crate::{SetupFn, fixture};

/// How many random sequences [`crate::conformance!`] runs.
pub const DEFAULT_CASES: u32 = 256;

const SESSIONS: [&str; 3] = ["s", "s:x", "t"];
const LANES: [&str; 3] = ["x", "y", "x:y"];
const HOLDERS: [&str; 2] = ["w1", "w2"];

/// One event of an append or of a completion's returned events.
#[derive(Debug, Clone)]
struct EventSpec {
    lane: Option<usize>,
    settled: bool,
    /// For appends: picks one of the session's handed-out claims as cause.
    cause: Option<usize>,
    /// A delay in ms (DL1), for unsettled events.
    delay: Option<u64>,
}

/// One step.
#[derive(Debug, Clone)]
enum Op {
    Append {
        session: usize,
        events: Vec<EventSpec>,
        /// `append_and_claim` with (holder, limit, ttl) (AC1, AC2, AC3, AC4).
        claim: Option<(usize, usize, u64)>,
        /// Closes the session in the same step (CL6).
        close: bool,
    },
    Claim {
        session: usize,
        holder: usize,
        limit: usize,
        ttl: u64,
        exclude: Vec<u64>,
    },
    Renew {
        session: usize,
        pick: usize,
        ttl: u64,
    },
    Complete {
        session: usize,
        pick: usize,
        returned: Vec<EventSpec>,
    },
    Fail {
        session: usize,
        pick: usize,
        max_failures: u32,
        retry_in: Option<i64>,
    },
    Release {
        session: usize,
        pick: usize,
    },
    /// Revives a dead letter of the session (most picks) or any event.
    Revive {
        session: usize,
        pick: usize,
    },
    /// Cancels a handed-out claim's event (most picks) or any event
    /// (CN1, CN2, CN3).
    Cancel {
        session: usize,
        pick: usize,
    },
    /// Forks `source` onto `target` at an index picked from 0 to one past
    /// its frontier (FK1, FK2, FK3, FK4).
    Fork {
        source: usize,
        target: usize,
        at: usize,
    },
    /// Closes the session (CL1): later appends and returned events are
    /// refused (CL2, CL3), its pending work still settles.
    Close {
        session: usize,
    },
    Advance {
        ms: i64,
    },
    /// A worker's retry loop in one step: claim one event, then fail that
    /// very attempt (so events reach their third and later failures).
    ClaimAndFail {
        session: usize,
        max_failures: u32,
        retry_in: Option<i64>,
    },
}

/// A `pick` that means "the claim handed out last in this session".
const LAST: usize = usize::MAX;

fn event_spec(with_cause: bool) -> impl Strategy<Value = EventSpec> {
    let cause = if with_cause {
        proptest::option::weighted(0.2, 0usize..64).boxed()
    } else {
        Just(None).boxed()
    };
    (
        proptest::option::weighted(0.6, 0usize..LANES.len()),
        proptest::bool::weighted(0.2),
        cause,
        proptest::option::weighted(0.15, prop_oneof![Just(300u64), Just(800)]),
    )
        .prop_map(|(lane, settled, cause, delay)| EventSpec {
            lane,
            settled,
            cause,
            delay: delay.filter(|_| !settled),
        })
}

fn ttl() -> impl Strategy<Value = u64> {
    prop_oneof![Just(150u64), Just(450), Just(1_050), Just(2_550)]
}

fn op() -> impl Strategy<Value = Op> {
    // Most steps go to the first session, so that events live long enough
    // to be claimed, failed and claimed again.
    let session = prop_oneof![6 => Just(0usize), 2 => Just(1usize), 2 => Just(2usize)];
    prop_oneof![
        3 => (session.clone(), proptest::collection::vec(event_spec(true), 0..5), proptest::bool::weighted(0.08))
            .prop_map(|(session, events, close)| Op::Append { session, events, claim: None, close }),
        2 => (session.clone(), proptest::collection::vec(event_spec(true), 0..5), 0..HOLDERS.len(), 0usize..4, ttl(), proptest::bool::weighted(0.08))
            .prop_map(|(session, events, holder, limit, ttl, close)| Op::Append { session, events, claim: Some((holder, limit, ttl)), close }),
        4 => (session.clone(), 0..HOLDERS.len(), 1usize..4, ttl())
            .prop_map(|(session, holder, limit, ttl)| Op::Claim { session, holder, limit, ttl, exclude: vec![] }),
        1 => (session.clone(), 0..HOLDERS.len(), 1usize..4, ttl(), proptest::collection::vec(1u64..10, 1..3))
            .prop_map(|(session, holder, limit, ttl, exclude)| Op::Claim { session, holder, limit, ttl, exclude }),
        1 => (session.clone(), 0usize..64, ttl()).prop_map(|(session, pick, ttl)| Op::Renew { session, pick, ttl }),
        3 => (session.clone(), 0usize..64, proptest::collection::vec(event_spec(false), 0..3))
            .prop_map(|(session, pick, returned)| Op::Complete { session, pick, returned }),
        3 => (session.clone(), 0usize..64, 1u32..4, proptest::option::of(prop_oneof![Just(250i64), Just(650)]))
            .prop_map(|(session, pick, max_failures, retry_in)| Op::Fail { session, pick, max_failures, retry_in }),
        1 => (session.clone(), 0usize..64).prop_map(|(session, pick)| Op::Release { session, pick }),
        2 => (session.clone(), 0usize..64).prop_map(|(session, pick)| Op::Revive { session, pick }),
        1 => (session.clone(), 0usize..64).prop_map(|(session, pick)| Op::Cancel { session, pick }),
        1 => session.clone().prop_map(|session| Op::Close { session }),
        1 => (session.clone(), 0usize..SESSIONS.len(), 0usize..64)
            .prop_map(|(source, target, at)| Op::Fork { source, target, at }),
        2 => (session.clone(), 1u32..5, proptest::option::weighted(0.3, Just(250i64)))
            .prop_map(|(session, max_failures, retry_in)| Op::ClaimAndFail { session, max_failures, retry_in }),
        2 => prop_oneof![Just(100i64), Just(200), Just(500), Just(1_000), Just(3_000)]
            .prop_map(|ms| Op::Advance { ms }),
    ]
}

/// Runs the model-based property test against the store `setup` opens:
/// `cases` random sequences of up to 80 steps, each on a fresh store, from a
/// fixed seed (so a failure reproduces), shrinking a failure to a minimal
/// sequence before reporting it.
///
/// # Panics
/// When a sequence breaks an invariant or a predicted outcome; the message
/// holds the minimal failing sequence.
pub fn property_test(setup: SetupFn, cases: u32) {
    // A test that cannot build its runtime cannot run at all.
    #[allow(clippy::expect_used)]
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("building the tokio runtime for the property test");
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(config.rng_algorithm);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let strategy = proptest::collection::vec(op(), 1..80);
    let result = runner.run(&strategy, |ops| runtime.block_on(run(setup, ops)));
    if let Err(err) = result {
        panic!("model-based property failed: {err}");
    }
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($fmt)+)));
        }
    };
}

fn fail_with<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> TestCaseError + '_ {
    move |err| TestCaseError::fail(format!("{what}: {err}"))
}

/// What the model remembers between steps.
#[derive(Default)]
struct Model {
    /// Expected frontier per session.
    frontier: [u64; 3],
    /// Every (index, attempt) handed out per session, with its holder.
    handed: [Vec<(Claim, usize)>; 3],
    /// Claims released (not used again, see `pick`).
    released: [BTreeSet<Claim>; 3],
    /// Which attempt processed an event, once processed (None for settled).
    processed: [BTreeMap<u64, Option<u32>>; 3],
    /// Attempts that failed.
    failed: [BTreeSet<Claim>; 3],
    /// The attempt count at which an event was dead-lettered.
    dead: [BTreeMap<u64, u32>; 3],
    /// Fresh ids for returned events.
    next_id: u64,
    /// The frontier each session was closed at (CL1).
    closed: [Option<u64>; 3],
    /// The source and index each session was forked from (FK3).
    origin: [Option<(usize, u64)>; 3],
}

impl Model {
    /// A handed-out claim of this session, or none yet. Half the picks take
    /// a current attempt (latest, not failed, event unfinished), a quarter
    /// the latest attempt of any event, the rest any claim handed out,
    /// stale ones included.
    fn pick(&self, session: usize, pick: usize) -> Option<(Claim, usize)> {
        if pick == LAST {
            return self.handed[session].last().copied();
        }
        let live: Vec<(Claim, usize)> = self.handed[session]
            .iter()
            .filter(|(claim, _)| !self.released[session].contains(claim))
            .copied()
            .collect();
        let latest: Vec<(Claim, usize)> = live
            .iter()
            .filter(|(claim, _)| {
                !self.handed[session]
                    .iter()
                    .any(|(other, _)| other.index == claim.index && other.attempt > claim.attempt)
            })
            .copied()
            .collect();
        let current: Vec<(Claim, usize)> = latest
            .iter()
            .filter(|(claim, _)| {
                !self.failed[session].contains(claim)
                    && !self.processed[session].contains_key(&claim.index)
                    && !self.dead[session].contains_key(&claim.index)
            })
            .copied()
            .collect();
        let from = [current, latest, live]
            .into_iter()
            .skip(match pick % 4 {
                0 | 1 => 0,
                2 => 1,
                _ => 2,
            })
            .find(|from| !from.is_empty())?;
        Some(from[(pick / 4) % from.len()])
    }
}

fn is_ready(rows: &[StoredEvent], row: &StoredEvent) -> bool {
    if !row.is_pending() {
        return false;
    }
    match &row.event.lane {
        None => true,
        Some(lane) => rows
            .iter()
            .take_while(|r| r.event.index < row.event.index)
            .all(|r| r.event.lane.as_ref() != Some(lane) || r.processed_at.is_some()),
    }
}

fn lease_active(row: &StoredEvent, now: Millis) -> bool {
    row.claim_holder.is_some() && row.claim_expires_at.is_some_and(|at| at > now)
}

fn waiting_retry(row: &StoredEvent, now: Millis) -> bool {
    row.retry_at.is_some_and(|at| at > now)
}

fn new_event(spec: &EventSpec, id: String) -> NewEvent {
    let mut event = NewEvent::new("prop", json!({ "id": id })).id(id);
    if let Some(lane) = spec.lane {
        event = event.lane(LANES[lane]);
    }
    if spec.settled {
        event = event.settled();
    }
    if let Some(ms) = spec.delay {
        event = event.delay(std::time::Duration::from_millis(ms));
    }
    event
}

/// A stored row is the event as sent: id, type, payload, lane, cause,
/// created now, and processed now exactly when settled (A8, A9, A11).
fn as_sent(
    row: &StoredEvent,
    sent: &NewEvent,
    session: &str,
    now: Millis,
    cause: Option<Cause>,
) -> Result<(), TestCaseError> {
    let settled = sent.settled;
    ensure!(
        Some(&row.event.id) == sent.id.as_ref()
            && row.event.event_type == sent.event_type
            && row.event.payload == sent.payload
            && row.event.session_id == session
            && row.event.created_at == now
            && row.event.lane == sent.lane
            && row.event.cause == cause
            && row.attempt_count == 0
            && row.processed_by_attempt.is_none()
            && row.processed_at == settled.then_some(now)
            && row.is_pending() != settled
            && row.retry_at == sent.delay_ms.map(|ms| now + ms as i64),
        "A8/A9/A11/DL1: stored {row:?}, sent {sent:?}"
    );
    Ok(())
}

async fn read(store: &dyn Store, session: usize) -> Result<Vec<StoredEvent>, TestCaseError> {
    store
        .read(SESSIONS[session], ReadRange::default())
        .await
        .map_err(fail_with("read"))
}

async fn run(setup: SetupFn, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let fx = fixture(setup).await;
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let store = if step % 3 == 2 {
            fx.peer.as_ref()
        } else {
            fx.store.as_ref()
        };
        let parts = match op {
            Op::ClaimAndFail {
                session,
                max_failures,
                retry_in,
            } => {
                let claim = Op::Claim {
                    session: *session,
                    holder: 0,
                    limit: 1,
                    ttl: 1_050,
                    exclude: vec![],
                };
                let fail = Op::Fail {
                    session: *session,
                    pick: LAST,
                    max_failures: *max_failures,
                    retry_in: *retry_in,
                };
                vec![claim, fail]
            }
            other => vec![other.clone()],
        };
        for part in &parts {
            let now = a2_core::Clock::now_ms(fx.clock.as_ref());
            apply(store, &mut model, part, now, &fx.clock)
                .await
                .map_err(|e| TestCaseError::fail(format!("step {step} {part:?}: {e}")))?;
            check(fx.store.as_ref(), &mut model, step)
                .await
                .map_err(|e| TestCaseError::fail(format!("after step {step} {part:?}: {e}")))?;
        }
    }
    Ok(())
}

async fn apply(
    store: &dyn Store,
    model: &mut Model,
    op: &Op,
    now: Millis,
    clock: &a2_core::ManualClock,
) -> Result<(), TestCaseError> {
    match op {
        Op::Advance { ms } => clock.advance(*ms),
        // Split into a claim and a fail by `run`.
        Op::ClaimAndFail { .. } => {}
        Op::Renew { session, pick, ttl } => {
            apply_renew(store, model, now, session, pick, ttl).await?
        }
        Op::Revive { session, pick } => apply_revive(store, model, now, session, pick).await?,
        Op::Cancel { session, pick } => apply_cancel(store, model, now, *session, *pick).await?,
        Op::Close { session } => apply_close(store, model, *session).await?,
        Op::Fork { source, target, at } => apply_fork(store, model, *source, *target, *at).await?,
        Op::Release { session, pick } => apply_release(store, model, now, session, pick).await?,
        Op::Append {
            session,
            events,
            claim,
            close,
        } => apply_append(store, model, now, session, events, claim, *close).await?,
        Op::Claim {
            session,
            holder,
            limit,
            ttl,
            exclude,
        } => apply_claim(store, model, now, session, holder, limit, ttl, exclude).await?,
        Op::Complete {
            session,
            pick,
            returned,
        } => apply_complete(store, model, now, session, pick, returned).await?,
        Op::Fail {
            session,
            pick,
            max_failures,
            retry_in,
        } => apply_fail(store, model, now, session, pick, max_failures, retry_in).await?,
    }
    Ok(())
}

/// The step `Op::Renew`: runs it and checks its outcome against the
/// rules, updating the model.
async fn apply_renew(
    store: &dyn Store,
    model: &mut Model,
    now: Millis,
    session: &usize,
    pick: &usize,
    ttl: &u64,
) -> Result<(), TestCaseError> {
    let s = *session;
    let Some((claim, holder)) = model.pick(s, *pick) else {
        return Ok(());
    };
    let rows = read(store, s).await?;
    let row = &rows[claim.index as usize - 1];
    // RN1, CN2: a newer attempt, or a cancel, supersedes the claim.
    let superseded = claim.attempt < row.attempt_count || row.cancelled_at.is_some();
    let renewed = claim.attempt == row.attempt_count
        && row.claim_holder.as_deref() == Some(HOLDERS[holder])
        && lease_active(row, now)
        && row.is_pending();
    let request = RenewRequest {
        session: SESSIONS[s].into(),
        holder: HOLDERS[holder].into(),
        claims: vec![claim],
        lease: Lease::Ttl(*ttl),
    };
    let out = store
        .renew_claims(request)
        .await
        .map_err(fail_with("renew"))?;
    let want = |yes: bool| if yes { vec![claim.index] } else { vec![] };
    ensure!(
        out.superseded == want(superseded),
        "RN1: {out:?}, row {row:?}"
    );
    ensure!(
        out.renewed == want(renewed),
        "RN2/RN3: {out:?}, row {row:?}"
    );
    let after = read(store, s).await?;
    let r = &after[claim.index as usize - 1];
    let expiry = if renewed {
        Some(now + *ttl as i64)
    } else {
        row.claim_expires_at
    };
    ensure!(
        r.claim_expires_at == expiry,
        "RN2: expiry of {r:?}, expected {expiry:?}"
    );
    Ok(())
}

/// The step `Op::Close`: CL1's outcome, the close recorded in the model.
async fn apply_close(store: &dyn Store, model: &mut Model, s: usize) -> Result<(), TestCaseError> {
    let result = store.close_session(SESSIONS[s]).await;
    if model.frontier[s] == 0 {
        let code = result.as_ref().err().map(|e| e.code());
        ensure!(
            code == Some(ErrorCode::InvalidArgument),
            "CL1: nothing to close, got {result:?}"
        );
        return Ok(());
    }
    let out = result.map_err(fail_with("close_session"))?;
    let expected = match model.closed[s] {
        None => {
            matches!(out, CloseOutcome::Closed { frontier, .. } if frontier == model.frontier[s])
        }
        Some(at) => matches!(out, CloseOutcome::AlreadyClosed { frontier, .. } if frontier == at),
    };
    ensure!(expected, "CL1: got {out:?}, model {:?}", model.closed[s]);
    model.closed[s].get_or_insert(model.frontier[s]);
    Ok(())
}

/// The step `Op::Fork`: FK4's refusals, FK3's answers for an existing
/// target, else the copy of FK1 and FK2 (the source's rows up to the
/// index, leases released), which the model takes over: the copied claims
/// count as handed out in the fork and as released there.
async fn apply_fork(
    store: &dyn Store,
    model: &mut Model,
    s: usize,
    t: usize,
    pick: usize,
) -> Result<(), TestCaseError> {
    let frontier = model.frontier[s];
    let at = pick as u64 % (frontier + 2);
    let source = read(store, s).await?;
    let result = store.fork(SESSIONS[s], at, SESSIONS[t]).await;
    let code = result.as_ref().err().map(|e| e.code());
    if s == t || at == 0 {
        ensure!(
            code == Some(ErrorCode::InvalidArgument),
            "FK4: got {result:?}"
        );
        return Ok(());
    }
    if model.frontier[t] > 0 {
        if model.origin[t] == Some((s, at)) {
            ensure!(
                matches!(result, Ok(ForkOutcome::AlreadyForked)),
                "FK3: the same fork again, got {result:?}"
            );
        } else {
            ensure!(
                code == Some(ErrorCode::SessionExists),
                "FK3: got {result:?}"
            );
        }
        return Ok(());
    }
    if at > frontier {
        ensure!(
            code == Some(ErrorCode::InvalidArgument),
            "FK4: index {at} past {frontier}, got {result:?}"
        );
        return Ok(());
    }
    ensure!(
        matches!(result, Ok(ForkOutcome::Forked { first_index: 1 })),
        "FK1: got {result:?}"
    );
    let copy = read(store, t).await?;
    let expected = crate::forked_rows(&source[..at as usize], SESSIONS[t]);
    ensure!(copy == expected, "FK1/FK2: the fork holds {copy:?}");
    model.frontier[t] = at;
    model.handed[t] = model.handed[s]
        .iter()
        .filter(|(claim, _)| claim.index <= at)
        .copied()
        .collect();
    model.released[t] = model.handed[t].iter().map(|(claim, _)| *claim).collect();
    model.processed[t] = model.processed[s]
        .range(..=at)
        .map(|(i, by)| (*i, *by))
        .collect();
    model.failed[t] = model.failed[s]
        .iter()
        .filter(|claim| claim.index <= at)
        .copied()
        .collect();
    model.dead[t] = model.dead[s].range(..=at).map(|(i, n)| (*i, *n)).collect();
    model.closed[t] = None;
    model.origin[t] = Some((s, at));
    Ok(())
}

/// The step `Op::Revive`: runs it and checks its outcome against the
/// rules, updating the model.
async fn apply_revive(
    store: &dyn Store,
    model: &mut Model,
    now: Millis,
    session: &usize,
    pick: &usize,
) -> Result<(), TestCaseError> {
    let s = *session;
    let rows = read(store, s).await?;
    if rows.is_empty() {
        return Ok(());
    }
    let dead: Vec<u64> = model.dead[s].keys().copied().collect();
    let index = if !dead.is_empty() && pick % 4 != 3 {
        dead[(pick / 4) % dead.len()]
    } else {
        (pick % rows.len()) as u64 + 1
    };
    let before = rows[index as usize - 1].clone();
    let out = store
        .revive(SESSIONS[s], index)
        .await
        .map_err(fail_with("revive"))?;
    let after = read(store, s).await?;
    let r = &after[index as usize - 1];
    if before.failed_at.is_some() {
        ensure!(
            out == ReviveOutcome::Revived(r.clone()),
            "RV2: got {out:?}, stored {r:?}"
        );
        ensure!(
            r.failed_at.is_none()
                && r.failure_count == 0
                && r.is_pending()
                && r.attempt_count == before.attempt_count
                && !lease_active(r, now)
                && r.retry_at.is_none()
                && r.last_failed_attempt == before.last_failed_attempt
                && r.last_error == before.last_error,
            "RV2: revived record {r:?}, was {before:?}"
        );
        model.dead[s].remove(&index);
    } else {
        ensure!(
            out == ReviveOutcome::NotDeadLettered(before.clone()),
            "RV3: got {out:?}, row {before:?}"
        );
        ensure!(*r == before, "RV3: {before:?} became {r:?}");
    }
    Ok(())
}

/// The step `Op::Cancel`: runs it and checks its outcome against the
/// rules (CN1, CN3), updating the model. A cancelled event is settled by
/// no attempt, like one settled at append.
async fn apply_cancel(
    store: &dyn Store,
    model: &mut Model,
    now: Millis,
    s: usize,
    pick: usize,
) -> Result<(), TestCaseError> {
    let rows = read(store, s).await?;
    if rows.is_empty() {
        return Ok(());
    }
    let index = match model.pick(s, pick).filter(|_| pick % 4 != 3) {
        Some((claim, _)) => claim.index,
        None => (pick % rows.len()) as u64 + 1,
    };
    let before = rows[index as usize - 1].clone();
    let out = store
        .cancel(SESSIONS[s], index, Some(format!("step {pick}")))
        .await
        .map_err(fail_with("cancel"))?;
    let after = read(store, s).await?;
    let r = &after[index as usize - 1];
    if before.processed_at.is_none() {
        ensure!(
            out == CancelOutcome::Cancelled(r.clone()),
            "CN1: got {out:?}, stored {r:?}"
        );
        ensure!(
            r.cancelled_at == Some(now)
                && r.processed_at == Some(now)
                && r.processed_by_attempt.is_none()
                && r.claim_holder.is_none()
                && r.claim_expires_at.is_none()
                && r.retry_at.is_none()
                && r.failed_at.is_none()
                && r.attempt_count == before.attempt_count
                && r.failure_count == before.failure_count,
            "CN1: cancelled record {r:?}, was {before:?}"
        );
        model.processed[s].insert(index, None);
        model.dead[s].remove(&index);
    } else {
        ensure!(
            out == CancelOutcome::NotPending(before.clone()),
            "CN3: got {out:?}, row {before:?}"
        );
        ensure!(*r == before, "CN3: {before:?} became {r:?}");
    }
    Ok(())
}

/// The step `Op::Release`: runs it and checks its outcome against the
/// rules, updating the model.
async fn apply_release(
    store: &dyn Store,
    model: &mut Model,
    now: Millis,
    session: &usize,
    pick: &usize,
) -> Result<(), TestCaseError> {
    let s = *session;
    let Some((claim, holder)) = model.pick(s, *pick) else {
        return Ok(());
    };
    let rows = read(store, s).await?;
    let row = &rows[claim.index as usize - 1];
    let released = claim.attempt == row.attempt_count
        && row.claim_holder.as_deref() == Some(HOLDERS[holder])
        && lease_active(row, now)
        && row.is_pending();
    let request = ReleaseRequest {
        session: SESSIONS[s].into(),
        holder: HOLDERS[holder].into(),
        claims: vec![claim],
    };
    let out = store
        .release_claims(request)
        .await
        .map_err(fail_with("release"))?;
    let want = if released { vec![claim.index] } else { vec![] };
    ensure!(
        out == want,
        "RL1: released {out:?}, expected {want:?}, row {row:?}"
    );
    let after = read(store, s).await?;
    let r = &after[claim.index as usize - 1];
    ensure!(
        r.attempt_count == row.attempt_count,
        "RL1: the attempt stays counted"
    );
    if released {
        ensure!(!lease_active(r, now), "RL1: lease still active: {r:?}");
    } else {
        ensure!(r == row, "RL1: nothing released, yet {row:?} became {r:?}");
    }
    model.released[s].insert(claim);
    Ok(())
}

/// The step `Op::Append`: runs it and checks its outcome against the
/// rules, updating the model.
async fn apply_append(
    store: &dyn Store,
    model: &mut Model,
    now: Millis,
    session: &usize,
    events: &[EventSpec],
    claim: &Option<(usize, usize, u64)>,
    close: bool,
) -> Result<(), TestCaseError> {
    let s = *session;
    let rows = read(store, s).await?;
    let mut batch = Vec::new();
    let mut valid = true;
    for spec in events {
        model.next_id += 1;
        let mut event = new_event(spec, format!("a{}", model.next_id));
        if let Some(pick) = spec.cause
            && let Some((claim, _)) = model.pick(s, pick)
        {
            let row = &rows[claim.index as usize - 1];
            // A7: the latest attempt, not dead-lettered nor cancelled (CN2).
            valid &= row.attempt_count == claim.attempt
                && row.failed_at.is_none()
                && row.cancelled_at.is_none();
            event = event.caused_by(Cause {
                index: claim.index,
                attempt: claim.attempt,
                batch_size: None,
            });
        }
        batch.push(event);
    }
    let n = batch.len() as u64;
    let result = match (claim, close) {
        (None, false) => store.append(SESSIONS[s], batch.clone()).await,
        (Some((holder, limit, ttl)), false) => {
            let claim = AppendClaim::new(HOLDERS[*holder], Lease::Ttl(*ttl), *limit);
            store
                .append_and_claim(SESSIONS[s], batch.clone(), claim)
                .await
        }
        (claim, true) => {
            let mut options = AppendOptions::new().close();
            if let Some((holder, limit, ttl)) = claim {
                options =
                    options.claim(AppendClaim::new(HOLDERS[*holder], Lease::Ttl(*ttl), *limit));
            }
            store.append_with(SESSIONS[s], batch.clone(), options).await
        }
    };
    if close && n == 0 {
        // CL6: a close needs events; checked before anything else.
        let code = result.as_ref().err().map(|e| e.code());
        ensure!(
            code == Some(ErrorCode::InvalidArgument),
            "CL6: an empty batch that closes, got {result:?}"
        );
        return Ok(());
    }
    if model.closed[s].is_some() && n > 0 {
        // CL2: fresh ids, so never a replay: refused before A7.
        let code = result.as_ref().err().map(|e| e.code());
        ensure!(
            code == Some(ErrorCode::SessionClosed),
            "CL2: expected SessionClosed, got {result:?}"
        );
        return Ok(());
    }
    if !valid {
        let code = result.as_ref().err().map(|e| e.code());
        ensure!(
            code == Some(ErrorCode::SupersededAttempt),
            "A7: expected SupersededAttempt, got {result:?}"
        );
        return Ok(());
    }
    let out = result.map_err(fail_with("append"))?;
    let got: Vec<u64> = out.events.iter().map(|r| r.event.index).collect();
    let want: Vec<u64> = (model.frontier[s] + 1..=model.frontier[s] + n).collect();
    ensure!(got == want, "A1: indexes {got:?}, expected {want:?}");
    // AC2: the appended events ready at once, in index order, up to
    // the limit, each claimed as C2 claims it.
    let after: Vec<StoredEvent> = rows.iter().chain(&out.events).cloned().collect();
    let want_claimed: Vec<u64> = match claim {
        None => Vec::new(),
        Some((_, limit, _)) => out
            .events
            .iter()
            .filter(|r| is_ready(&after, r) && r.retry_at.is_none())
            .take(*limit)
            .map(|r| r.event.index)
            .collect(),
    };
    ensure!(
        out.claimed == want_claimed,
        "AC2: claimed {:?}, expected {want_claimed:?}",
        out.claimed
    );
    for (row, sent) in out.events.iter().zip(&batch) {
        if !out.claimed.contains(&row.event.index) {
            as_sent(row, sent, SESSIONS[s], now, sent.cause)?;
            continue;
        }
        let Some((holder, _, ttl)) = claim else {
            unreachable!("claimed only with a claim")
        };
        let mut unclaimed = row.clone();
        unclaimed.attempt_count = 0;
        unclaimed.first_claimed_at = None;
        unclaimed.last_claimed_at = None;
        unclaimed.claim_holder = None;
        unclaimed.claim_expires_at = None;
        as_sent(&unclaimed, sent, SESSIONS[s], now, sent.cause)?;
        ensure!(
            row.attempt_count == 1
                && row.first_claimed_at == Some(now)
                && row.last_claimed_at == Some(now)
                && row.claim_holder.as_deref() == Some(HOLDERS[*holder])
                && row.claim_expires_at == Some(now + *ttl as i64),
            "AC2: claim fields of {row:?}"
        );
        model.handed[s].push((
            Claim {
                index: row.event.index,
                attempt: 1,
            },
            *holder,
        ));
    }
    for row in &out.events {
        if row.processed_at.is_some() {
            model.processed[s].insert(row.event.index, None);
        }
    }
    model.frontier[s] += n;
    if close {
        // CL6: closed at the frontier the append reached.
        model.closed[s] = Some(model.frontier[s]);
    }
    let pending = out.events.iter().any(|r| r.is_pending()) || rows.iter().any(|r| r.is_pending());
    ensure!(
        out.has_pending == pending,
        "A10: has_pending {} expected {pending}",
        out.has_pending
    );
    Ok(())
}

/// The step `Op::Claim`: runs it and checks its outcome against the
/// rules, updating the model. (It takes the step's five fields as they
/// are, beside the store, the model and the time.)
#[allow(clippy::too_many_arguments)]
async fn apply_claim(
    store: &dyn Store,
    model: &mut Model,
    now: Millis,
    session: &usize,
    holder: &usize,
    limit: &usize,
    ttl: &u64,
    exclude: &[u64],
) -> Result<(), TestCaseError> {
    let s = *session;
    let rows = read(store, s).await?;
    let excluded = |r: &StoredEvent| exclude.contains(&r.event.index);
    let claimable: Vec<&StoredEvent> = rows
        .iter()
        .filter(|r| is_ready(&rows, r) && !lease_active(r, now) && !waiting_retry(r, now))
        .filter(|r| !excluded(r))
        .take(*limit)
        .collect();
    // When nothing is claimable: the earliest lease expiry or retry
    // time of the ready events (C3). Whether excluded events count
    // there, SPEC leaves open (C3 vs C4), so both answers are taken.
    let busy_time = |with_excluded: bool| {
        rows.iter()
            .filter(|r| is_ready(&rows, r) && (with_excluded || !excluded(r)))
            .filter_map(|r| {
                let lease = r.claim_expires_at.filter(|_| lease_active(r, now));
                let retry = r.retry_at.filter(|&at| at > now);
                lease.max(retry)
            })
            .min()
    };
    let busy_or_settled = |time: Option<Millis>| match time {
        Some(retry_at) => ClaimOutcome::Busy { retry_at },
        None => ClaimOutcome::Settled,
    };
    let expected: Option<Vec<ClaimOutcome>> = if !claimable.is_empty() {
        None
    } else if !rows.iter().any(|r| r.is_pending()) {
        Some(vec![ClaimOutcome::Settled])
    } else {
        Some(vec![
            busy_or_settled(busy_time(false)),
            busy_or_settled(busy_time(true)),
        ])
    };
    let request = ClaimRequest {
        session: SESSIONS[s].into(),
        holder: HOLDERS[*holder].into(),
        lease: Lease::Ttl(*ttl),
        exclude_indexes: exclude.to_vec(),
        limit: *limit,
    };
    let out = store
        .claim_available(request)
        .await
        .map_err(fail_with("claim"))?;
    match (expected, out) {
        (None, ClaimOutcome::Claimed { events: got, .. }) => {
            let got_indexes: Vec<u64> = got.iter().map(|r| r.event.index).collect();
            let want: Vec<u64> = claimable.iter().map(|r| r.event.index).collect();
            ensure!(
                got_indexes == want,
                "C2: claimed {got_indexes:?}, expected {want:?}"
            );
            for (row, before) in got.iter().zip(&claimable) {
                let claim = Claim {
                    index: row.event.index,
                    attempt: row.attempt_count,
                };
                ensure!(
                    row.attempt_count == before.attempt_count + 1,
                    "C2: attempt_count += 1"
                );
                ensure!(
                    row.claim_holder.as_deref() == Some(HOLDERS[*holder])
                        && row.claim_expires_at == Some(now + *ttl as i64)
                        && row.last_claimed_at == Some(now)
                        && row.first_claimed_at == before.first_claimed_at.or(Some(now)),
                    "C2: claim fields of {row:?}"
                );
                ensure!(
                    !model.handed[s].iter().any(|(c, _)| *c == claim),
                    "C6: {claim:?} handed out twice"
                );
                ensure!(
                    !model.dead[s].contains_key(&claim.index),
                    "F6: dead-lettered event claimed"
                );
                model.handed[s].push((claim, *holder));
            }
        }
        (Some(want), got) => {
            ensure!(
                want.contains(&got),
                "C1/C3/C4: got {got:?}, expected one of {want:?}"
            )
        }
        (None, got) => ensure!(
            false,
            "C2: expected a claim of {:?}, got {got:?}",
            claimable
        ),
    }
    Ok(())
}

/// The step `Op::Complete`: runs it and checks its outcome against the
/// rules, updating the model.
async fn apply_complete(
    store: &dyn Store,
    model: &mut Model,
    now: Millis,
    session: &usize,
    pick: &usize,
    returned: &[EventSpec],
) -> Result<(), TestCaseError> {
    let s = *session;
    let Some((claim, _)) = model.pick(s, *pick) else {
        return Ok(());
    };
    let rows = read(store, s).await?;
    let row = rows[claim.index as usize - 1].clone();
    let mut events = Vec::new();
    for spec in returned {
        model.next_id += 1;
        events.push(new_event(spec, format!("r{}", model.next_id)));
    }
    let n = events.len() as u64;
    let request = CompleteRequest {
        session: SESSIONS[s].into(),
        index: claim.index,
        attempt: claim.attempt,
        events: events.clone(),
        batch_size: None,
    };
    let sent = events;
    let result = store.complete_attempt(request).await;
    if row.processed_at.is_some() {
        if row.processed_by_attempt == Some(claim.attempt) {
            if n == 0 && row.returned_event_ids.is_empty() {
                ensure!(
                    matches!(&result, Ok(CompleteOutcome::Completed { events }) if events.is_empty()),
                    "CO3: expected the original (empty) completion, got {result:?}"
                );
            } else {
                let code = result.as_ref().err().map(|e| e.code());
                ensure!(
                    code == Some(ErrorCode::PartialDuplicateBatch),
                    "CO4: got {result:?}"
                );
            }
        } else {
            ensure!(
                matches!(result, Ok(CompleteOutcome::Superseded)),
                "CO4: got {result:?}"
            );
        }
    } else if row.failed_at.is_some()
        || claim.attempt != row.attempt_count
        || row.last_failed_attempt == Some(claim.attempt)
    {
        ensure!(
            matches!(result, Ok(CompleteOutcome::Superseded)),
            "CO5: got {result:?}, row {row:?}"
        );
    } else if model.closed[s].is_some() && n > 0 {
        // CL3: the events it returns would add to a closed log.
        let code = result.as_ref().err().map(|e| e.code());
        ensure!(
            code == Some(ErrorCode::SessionClosed),
            "CL3: expected SessionClosed, got {result:?}"
        );
    } else {
        let out = result.map_err(fail_with("complete"))?;
        let CompleteOutcome::Completed { events } = out else {
            return Err(TestCaseError::fail(format!(
                "CO2: expected Completed, got {out:?}, row {row:?}"
            )));
        };
        let got: Vec<u64> = events.iter().map(|r| r.event.index).collect();
        let want: Vec<u64> = (model.frontier[s] + 1..=model.frontier[s] + n).collect();
        ensure!(
            got == want,
            "CO2: returned indexes {got:?}, expected {want:?}"
        );
        let cause = Some(Cause {
            index: claim.index,
            attempt: claim.attempt,
            batch_size: None,
        });
        for (row, sent) in events.iter().zip(&sent) {
            as_sent(row, sent, SESSIONS[s], now, cause)?;
        }
        ensure!(
            events.iter().all(|r| r.event.cause == cause),
            "CO2: cause of returned events"
        );
        for r in &events {
            if r.processed_at.is_some() {
                model.processed[s].insert(r.event.index, None);
            }
        }
        model.frontier[s] += n;
        ensure!(
            !model.processed[s].contains_key(&claim.index),
            "CO2: {} processed twice",
            claim.index
        );
        model.processed[s].insert(claim.index, Some(claim.attempt));
        let after = read(store, s).await?;
        let r = &after[claim.index as usize - 1];
        let ids: Vec<String> = events.iter().map(|e| e.event.id.clone()).collect();
        ensure!(
            r.processed_at == Some(now) && r.returned_event_ids == ids && !lease_active(r, now),
            "CO2: processed record {r:?}"
        );
        ensure!(
            after[after.len() - events.len()..] == events[..],
            "CO2: returned rows as stored"
        );
    }
    Ok(())
}

/// The step `Op::Fail`: runs it and checks its outcome against the
/// rules, updating the model.
async fn apply_fail(
    store: &dyn Store,
    model: &mut Model,
    now: Millis,
    session: &usize,
    pick: &usize,
    max_failures: &u32,
    retry_in: &Option<i64>,
) -> Result<(), TestCaseError> {
    let s = *session;
    let Some((claim, _)) = model.pick(s, *pick) else {
        return Ok(());
    };
    let rows = read(store, s).await?;
    let row = &rows[claim.index as usize - 1];
    let request = FailRequest {
        session: SESSIONS[s].into(),
        index: claim.index,
        attempt: claim.attempt,
        error: "boom".into(),
        max_failures: *max_failures,
        retry_at: retry_in.map(|ms| now + ms),
    };
    let out = store
        .fail_attempt(request)
        .await
        .map_err(fail_with("fail"))?;
    let stale = claim.attempt != row.attempt_count;
    if row.processed_at.is_some() {
        ensure!(
            out.outcome == FailKind::Superseded,
            "F2: processed, got {out:?}"
        );
    } else if row.failed_at.is_some() {
        // F2 and F3 both describe an old attempt of a dead-lettered event.
        let ok =
            out.outcome == FailKind::DeadLettered || (stale && out.outcome == FailKind::Superseded);
        ensure!(ok, "F3: got {out:?}");
    } else if stale {
        ensure!(
            out.outcome == FailKind::Superseded,
            "F2: stale attempt, got {out:?}"
        );
    } else if row.last_failed_attempt == Some(claim.attempt) {
        ensure!(
            out.outcome == FailKind::Failed && out.failure_count == row.failure_count,
            "F4: got {out:?}"
        );
    } else {
        let count = row.failure_count + 1;
        let kind = if count >= *max_failures {
            FailKind::DeadLettered
        } else {
            FailKind::Failed
        };
        ensure!(
            out.outcome == kind && out.failure_count == count,
            "F6: got {out:?}, expected {kind:?} {count}"
        );
        model.failed[s].insert(claim);
        if kind == FailKind::DeadLettered {
            model.dead[s].insert(claim.index, row.attempt_count);
        }
        let after = read(store, s).await?;
        let r = &after[claim.index as usize - 1];
        ensure!(
            r.failure_count == count
                && r.last_failed_attempt == Some(claim.attempt)
                && r.last_failed_at == Some(now)
                && r.last_error.as_deref() == Some("boom")
                && !lease_active(r, now),
            "F6: failure record {r:?}"
        );
        if kind == FailKind::DeadLettered {
            ensure!(r.failed_at == Some(now), "F6: failed_at of {r:?}");
        } else {
            ensure!(r.failed_at.is_none(), "F6: failed_at of {r:?}");
            let retry_at = retry_in.map(|ms| now + ms);
            ensure!(
                r.retry_at.filter(|&at| at > now) == retry_at,
                "F6: retry_at of {r:?}"
            );
        }
    }
    Ok(())
}

async fn check(store: &dyn Store, model: &mut Model, step: usize) -> Result<(), TestCaseError> {
    let mut with_pending = Vec::new();
    let mut summaries = BTreeMap::new();
    for (s, name) in SESSIONS.iter().enumerate() {
        let rows = read(store, s).await?;
        let got: Vec<u64> = rows.iter().map(|r| r.event.index).collect();
        ensure!(
            got == (1..=model.frontier[s]).collect::<Vec<_>>(),
            "A1/R1: {} has indexes {got:?}",
            name
        );
        for row in &rows {
            let i = row.event.index;
            ensure!(
                !(row.processed_at.is_some() && row.failed_at.is_some()),
                "processed and dead-lettered: {row:?}"
            );
            let handed = model.handed[s].iter().filter(|(c, _)| c.index == i).count() as u32;
            ensure!(
                row.attempt_count == handed,
                "C2: attempt_count {} but {handed} claims handed out",
                row.attempt_count
            );
            match model.processed[s].get(&i) {
                Some(by) => ensure!(
                    row.processed_at.is_some() && row.processed_by_attempt == *by,
                    "CO2: processed record of {i} changed: {row:?}"
                ),
                None => ensure!(
                    row.processed_at.is_none(),
                    "CO2: {i} processed unseen: {row:?}"
                ),
            }
            match model.dead[s].get(&i) {
                Some(_) => ensure!(row.failed_at.is_some(), "F6: {i} no longer dead-lettered"),
                None => ensure!(row.failed_at.is_none(), "F6: {i} dead-lettered unseen"),
            }
        }
        // Per lane, processed (non-settled) events form a prefix.
        for lane in LANES {
            let mut seen_unprocessed = false;
            for row in rows
                .iter()
                .filter(|r| r.event.lane.as_deref() == Some(lane))
            {
                let settled = row.processed_at.is_some() && row.processed_by_attempt.is_none();
                if settled {
                    continue;
                }
                if row.processed_at.is_none() {
                    seen_unprocessed = true;
                } else {
                    ensure!(
                        !seen_unprocessed,
                        "lane {lane}: {} processed before an earlier event",
                        row.event.index
                    );
                }
            }
        }
        // R2, I2: the newest page and the first page agree with the rows
        // (one session per step, in turn, to keep the step cheap).
        if s == step % SESSIONS.len() {
            let n = rows.len();
            let history = store
                .read_history(name, a2_core::HistoryOptions::new(3))
                .await
                .map_err(fail_with("read_history"))?;
            ensure!(
                history.events[..] == rows[n.saturating_sub(3)..] && history.has_more == (n > 3),
                "R2: history {history:?}"
            );
            let page = store
                .read_events(name, a2_core::ReadEventsOptions::new(2).after_index(1))
                .await
                .map_err(fail_with("read_events"))?;
            ensure!(
                page.events[..] == rows[n.min(1)..n.min(3)] && page.through_index == n as u64,
                "I2: page {page:?}"
            );
        }
        if rows.iter().any(|r| r.is_pending()) {
            with_pending.push((*name).to_owned());
        }
        if let Some(first) = rows.first() {
            summaries.insert(
                (*name).to_owned(),
                (
                    rows.len() as u64,
                    rows.iter().filter(|r| r.is_pending()).count() as u64,
                    rows.iter().filter(|r| r.failed_at.is_some()).count() as u64,
                    rows.iter().map(|r| u64::from(r.attempt_count)).sum::<u64>(),
                    rows.iter().map(|r| u64::from(r.failure_count)).sum::<u64>(),
                    first.event.created_at,
                ),
            );
        }
    }
    let listed = crate::support::all_sessions(store).await;
    let listed: BTreeMap<_, _> = listed
        .into_iter()
        .map(|x| {
            let counts = (
                x.event_count,
                x.pending_count,
                x.failed_count,
                x.attempt_count,
                x.failure_count,
                x.first_event_at,
            );
            (x.session_id, counts)
        })
        .collect();
    ensure!(
        listed == summaries,
        "I1: listed {listed:?}, recounted {summaries:?}"
    );
    with_pending.sort();
    let pending = crate::support::all_pending(store).await;
    ensure!(
        pending == with_pending,
        "PS1: pending_sessions {pending:?}, expected {with_pending:?}"
    );
    Ok(())
}
