//! Claims, renewals and releases on a real Postgres, on a clock the tests
//! move: what each answers, and claims racing from many store instances.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use a2_core::{
    Claim, ClaimOutcome, ClaimRequest, Lease, ManualClock, NewEvent, ReleaseRequest, RenewRequest,
};
use a2_postgres::PostgresStore;
use serde_json::json;

const T0: i64 = 1_700_000_000_000;

mod common;

use common::{listen, within};

/// A store in a schema of its own on the shared server, on `clock`.
async fn store(schema: &str, clock: &Arc<ManualClock>) -> PostgresStore {
    common::store_on(schema, Some(clock.clone())).await
}

fn request(holder: &str, limit: usize, exclude: &[u64]) -> ClaimRequest {
    ClaimRequest {
        session: "s".into(),
        holder: holder.into(),
        lease: Lease::Ttl(10_000),
        exclude_indexes: exclude.to_vec(),
        limit,
    }
}

fn claimed(outcome: ClaimOutcome) -> (Vec<(u64, u32)>, Option<i64>) {
    match outcome {
        ClaimOutcome::Claimed { events, next_at } => (
            events
                .iter()
                .map(|e| (e.event.index, e.attempt_count))
                .collect(),
            next_at,
        ),
        other => panic!("expected Claimed, got {other:?}"),
    }
}

/// C1, C2, C3, C5, C7, DL1, DL2: what claims hand out and when the rest
/// comes due.
#[tokio::test]
async fn c2_c3_c7_claims_hand_out_ready_events_and_name_the_next_time() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = store("t_work_claims", &clock).await;
    assert_eq!(
        store.claim_available(request("w", 5, &[])).await.unwrap(),
        ClaimOutcome::Settled,
        "C1: no such session"
    );
    store
        .append(
            "s",
            vec![
                NewEvent::new("a", json!(1)),
                NewEvent::new("b", json!(2)).lane("l"),
                NewEvent::new("c", json!(3)).lane("l"),
                NewEvent::new("d", json!(4)).delay(Duration::from_millis(500)),
            ],
        )
        .await
        .unwrap();
    let (got, next) = claimed(store.claim_available(request("w", 1, &[])).await.unwrap());
    assert_eq!(got, [(1, 1)], "C2: in index order, up to the limit");
    assert_eq!(next, Some(T0 + 500), "C7: the delayed event's due time");
    let (got, next) = claimed(store.claim_available(request("w", 5, &[])).await.unwrap());
    assert_eq!(
        got,
        [(2, 1)],
        "DL2: the lane's head only; DL1: not before its time"
    );
    assert_eq!(next, Some(T0 + 500));
    assert_eq!(
        store.claim_available(request("v", 5, &[])).await.unwrap(),
        ClaimOutcome::Busy { retry_at: T0 + 500 },
        "C3: the earliest time"
    );
    clock.advance(500);
    let (got, next) = claimed(store.claim_available(request("v", 5, &[1])).await.unwrap());
    assert_eq!(got, [(4, 1)]);
    assert_eq!(next, Some(T0 + 10_000), "C7: 2's lease (1 excluded)");
    clock.advance(9_500);
    let (got, _) = claimed(store.claim_available(request("v", 5, &[])).await.unwrap());
    assert_eq!(got, [(1, 2), (2, 2)], "C5: expired leases, new attempts");
}

/// C6 across instances: 8 store instances claim from one session at once
/// until it is drained; every event is handed out exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c6_racing_claims_hand_each_attempt_out_once() {
    let clock = Arc::new(ManualClock::new(T0));
    let stores: Vec<PostgresStore> =
        futures::future::join_all((0..8).map(|_| store("t_work_race", &clock))).await;
    let events: Vec<NewEvent> = (0..300).map(|n| NewEvent::new("t", json!(n))).collect();
    stores[0].append("s", events).await.unwrap();
    let tasks = (0..16).map(|t| {
        let store = stores[t % stores.len()].clone();
        tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                match store
                    .claim_available(request(&format!("w{t}"), 7, &[]))
                    .await
                    .unwrap()
                {
                    ClaimOutcome::Claimed { events, .. } => {
                        mine.extend(events.iter().map(|e| (e.event.index, e.attempt_count)))
                    }
                    _ => return mine,
                }
            }
        })
    });
    let all: Vec<(u64, u32)> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .flat_map(|r| r.unwrap())
        .collect();
    let distinct: BTreeSet<u64> = all.iter().map(|(i, _)| *i).collect();
    assert_eq!(all.len(), 300, "C6: no attempt handed out twice");
    assert_eq!(distinct, (1..=300).collect(), "every event claimed");
    assert!(all.iter().all(|(_, attempt)| *attempt == 1));
}

/// RN1, RN2, RL1, PS2: a renewal moves the holder's lease; a stale one is
/// superseded; a release frees the event at once for another holder and
/// announces it.
#[tokio::test]
async fn rn1_rn2_rl1_renewals_and_releases() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = store("t_work_leases", &clock).await;
    store
        .append(
            "s",
            vec![NewEvent::new("a", json!(1)), NewEvent::new("b", json!(2))],
        )
        .await
        .unwrap();
    let (got, _) = claimed(store.claim_available(request("w", 2, &[])).await.unwrap());
    assert_eq!(got, [(1, 1), (2, 1)]);
    let renew = |holder: &str, claims: Vec<Claim>| RenewRequest {
        session: "s".into(),
        holder: holder.into(),
        claims,
        lease: Lease::Ttl(20_000),
    };
    clock.advance(5_000);
    let out = store
        .renew_claims(renew(
            "w",
            vec![Claim {
                index: 1,
                attempt: 1,
            }],
        ))
        .await
        .unwrap();
    assert_eq!(out.renewed, [1], "RN2");
    clock.advance(6_000);
    // 2's lease ran out at T0 + 10 000; 1's holds until T0 + 25 000.
    let (got, _) = claimed(store.claim_available(request("v", 5, &[])).await.unwrap());
    assert_eq!(got, [(2, 2)], "C5: only the expired lease");
    let out = store
        .renew_claims(renew(
            "w",
            vec![
                Claim {
                    index: 1,
                    attempt: 1,
                },
                Claim {
                    index: 2,
                    attempt: 1,
                },
            ],
        ))
        .await
        .unwrap();
    assert_eq!((out.renewed, out.superseded), (vec![1], vec![2]), "RN1");

    // A release frees the event at once, and says so on the work channel.
    let (_listener, mut heard) = listen("t_work_leases.work").await;
    let released = store
        .release_claims(ReleaseRequest {
            session: "s".into(),
            holder: "w".into(),
            claims: vec![
                Claim {
                    index: 1,
                    attempt: 1,
                },
                Claim {
                    index: 2,
                    attempt: 1,
                },
            ],
        })
        .await
        .unwrap();
    assert_eq!(released, [1], "RL1: only a live lease of the holder");
    let notice = within("PS2: the release is announced", heard.recv())
        .await
        .unwrap();
    assert_eq!(notice, "\"s\"", "the session, as a JSON string");
    let (got, _) = claimed(store.claim_available(request("v", 5, &[])).await.unwrap());
    assert_eq!(got, [(1, 2)], "claimable at once by another holder");
}

/// CO2, CO3, CO4, DL2: a completion settles its event, moves its lane on
/// and appends what it returned, caused by it; the same completion again
/// answers the same rows; a stale one is superseded.
#[tokio::test]
async fn co2_co3_co4_completions_settle_move_lanes_and_append() {
    use a2_core::{CompleteOutcome, CompleteRequest};
    let clock = Arc::new(ManualClock::new(T0));
    let store = store("t_work_complete", &clock).await;
    store
        .append(
            "s",
            vec![
                NewEvent::new("a", json!(1)).lane("l"),
                NewEvent::new("b", json!(2)).lane("l"),
            ],
        )
        .await
        .unwrap();
    let (got, _) = claimed(store.claim_available(request("w", 5, &[])).await.unwrap());
    assert_eq!(got, [(1, 1)], "DL2: the head only");
    let complete = |attempt: u32| CompleteRequest {
        session: "s".into(),
        index: 1,
        attempt,
        events: vec![NewEvent::new("reply", json!({ "to": 1 })).id("r1")],
        batch_size: None,
    };
    clock.advance(10);
    let done = store.complete_attempt(complete(1)).await.unwrap();
    let CompleteOutcome::Completed { events } = done else {
        panic!("expected Completed, got {done:?}");
    };
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event.index, 3);
    assert_eq!(
        events[0].event.cause,
        Some(a2_core::Cause::new(1, 1)),
        "CO2: caused by it"
    );
    let again = store.complete_attempt(complete(1)).await.unwrap();
    assert_eq!(
        again,
        CompleteOutcome::Completed {
            events: events.clone()
        },
        "CO3"
    );
    assert_eq!(
        store.complete_attempt(complete(2)).await.unwrap(),
        CompleteOutcome::Superseded,
        "CO4"
    );
    let rows = store
        .read("s", a2_core::ReadRange::default())
        .await
        .unwrap();
    assert_eq!(rows[0].processed_at, Some(T0 + 10));
    assert_eq!(rows[0].processed_by_attempt, Some(1));
    assert_eq!(rows[0].returned_event_ids, ["r1"]);
    assert!(rows[0].claim_holder.is_none());
    let (got, next) = claimed(store.claim_available(request("w", 5, &[])).await.unwrap());
    assert_eq!(
        got,
        [(2, 1), (3, 1)],
        "the lane moved on; the reply is ready"
    );
    assert_eq!(next, None);
}

/// F6, F3, C4, DL2: a failure makes its event ready again from its retry
/// time; at the limit it is dead-lettered, out of the pending count, and
/// its lane waits behind it.
#[tokio::test]
async fn f6_failures_retry_then_dead_letter_and_hold_the_lane() {
    use a2_core::{FailKind, FailRequest};
    let clock = Arc::new(ManualClock::new(T0));
    let store = store("t_work_fail", &clock).await;
    store
        .append(
            "s",
            vec![
                NewEvent::new("a", json!(1)).lane("l"),
                NewEvent::new("b", json!(2)).lane("l"),
            ],
        )
        .await
        .unwrap();
    let fail = |attempt: u32| FailRequest {
        session: "s".into(),
        index: 1,
        attempt,
        error: "boom".into(),
        retry_at: Some(T0 + 1_000),
        max_failures: 2,
    };
    claimed(store.claim_available(request("w", 5, &[])).await.unwrap());
    let first = store.fail_attempt(fail(1)).await.unwrap();
    assert_eq!((first.outcome, first.failure_count), (FailKind::Failed, 1));
    assert_eq!(
        store.claim_available(request("w", 5, &[])).await.unwrap(),
        ClaimOutcome::Busy {
            retry_at: T0 + 1_000
        },
        "F6: ready again from its retry time; DL2: its lane waits"
    );
    clock.advance(1_000);
    let (got, _) = claimed(store.claim_available(request("w", 5, &[])).await.unwrap());
    assert_eq!(got, [(1, 2)]);
    let second = store.fail_attempt(fail(2)).await.unwrap();
    assert_eq!(
        (second.outcome, second.failure_count),
        (FailKind::DeadLettered, 2)
    );
    assert_eq!(
        store.claim_available(request("w", 5, &[])).await.unwrap(),
        ClaimOutcome::Settled,
        "C4: all that is pending waits behind a dead letter"
    );
    let again = store.fail_attempt(fail(2)).await.unwrap();
    assert_eq!(again.outcome, FailKind::DeadLettered, "F3");
    let rows = store
        .read("s", a2_core::ReadRange::default())
        .await
        .unwrap();
    assert_eq!(rows[0].failed_at, Some(T0 + 1_000));
    assert_eq!(rows[0].last_error.as_deref(), Some("boom"));
}

/// RV2, RV3, CN1, CN3, CN5, DL2: a revived dead letter runs again; a
/// cancel settles an event, moves its lane on, and announces the attempt
/// it stopped to every process; a second cancel writes nothing.
#[tokio::test]
async fn rv2_cn1_cn5_revives_and_cancels() {
    use a2_core::{CancelOutcome, FailRequest, ReviveOutcome};
    let clock = Arc::new(ManualClock::new(T0));
    let store = store("t_work_settle", &clock).await;
    store
        .append(
            "s",
            vec![
                NewEvent::new("a", json!(1)).lane("l"),
                NewEvent::new("b", json!(2)).lane("l"),
            ],
        )
        .await
        .unwrap();
    claimed(store.claim_available(request("w", 5, &[])).await.unwrap());
    let dead = FailRequest {
        session: "s".into(),
        index: 1,
        attempt: 1,
        error: "boom".into(),
        retry_at: None,
        max_failures: 1,
    };
    store.fail_attempt(dead).await.unwrap();
    let revived = store.revive("s", 1).await.unwrap();
    assert!(
        matches!(revived, ReviveOutcome::Revived(ref r) if r.failure_count == 0),
        "RV2"
    );
    assert!(
        matches!(
            store.revive("s", 1).await.unwrap(),
            ReviveOutcome::NotDeadLettered(_)
        ),
        "RV3"
    );
    let (got, _) = claimed(store.claim_available(request("w", 5, &[])).await.unwrap());
    assert_eq!(got, [(1, 2)], "RV2: claimable again");

    let (_listener, mut heard) = listen("t_work_settle.cancels").await;
    let cancelled = store
        .cancel_apply(a2_core::validate::cancel_request("s", 1, Some("stop".into())).unwrap())
        .await
        .unwrap();
    let CancelOutcome::Cancelled(row) = cancelled else {
        panic!("expected Cancelled, got {cancelled:?}");
    };
    assert_eq!(row.cancel_reason.as_deref(), Some("stop"));
    assert!(
        row.processed_at.is_some() && row.claim_holder.is_none(),
        "CN1"
    );
    let notice = within("CN5: the cancel is announced", heard.recv())
        .await
        .unwrap();
    let notice: serde_json::Value = serde_json::from_str(&notice).unwrap();
    assert_eq!(notice, json!({ "session": "s", "index": 1, "attempt": 2 }));
    assert!(
        matches!(
            store
                .cancel_apply(a2_core::validate::cancel_request("s", 1, None).unwrap())
                .await
                .unwrap(),
            CancelOutcome::NotPending(_)
        ),
        "CN3"
    );
    let (got, _) = claimed(store.claim_available(request("w", 5, &[])).await.unwrap());
    assert_eq!(got, [(2, 1)], "DL2: the lane moved on");
    let missing = store
        .cancel_apply(a2_core::validate::cancel_request("s", 9, None).unwrap())
        .await
        .unwrap_err();
    assert_eq!(missing.code(), a2_core::ErrorCode::InvalidArgument, "CN4");
}

/// S1, S2, PS1: snapshots never move back nor past the frontier; state
/// reads fold from them; pending sessions page in name order.
#[tokio::test]
async fn s1_s2_ps1_snapshots_and_pending_sessions() {
    use a2_core::{ErrorCode, PageRequest, SnapshotWrite};
    let clock = Arc::new(ManualClock::new(T0));
    let store = store("t_work_state", &clock).await;
    for name in ["b", "a", "c"] {
        store
            .append(
                name,
                vec![NewEvent::new("t", json!(1)), NewEvent::new("t", json!(2))],
            )
            .await
            .unwrap();
    }
    let snap = |index: u64| SnapshotWrite {
        reducer: "count".into(),
        index,
        state: json!({ "n": index }),
    };
    store.put_snapshots("a", vec![snap(1)]).await.unwrap();
    store.put_snapshots("a", vec![snap(0)]).await.unwrap();
    let beyond = store.put_snapshots("a", vec![snap(3)]).await.unwrap_err();
    assert_eq!(
        beyond.code(),
        ErrorCode::InvalidArgument,
        "S2: within the log"
    );
    let state = store.read_state("a", "count").await.unwrap();
    assert_eq!(state.snapshot.unwrap().index, 1, "S2: never back");
    assert_eq!(
        state.events.iter().map(|e| e.index).collect::<Vec<_>>(),
        [2]
    );
    let first = store
        .pending_sessions(PageRequest {
            cursor: None,
            limit: 2,
        })
        .await
        .unwrap();
    assert_eq!(first.sessions, ["a", "b"]);
    let rest = store
        .pending_sessions(PageRequest {
            cursor: first.cursor,
            limit: 2,
        })
        .await
        .unwrap();
    assert_eq!((rest.sessions, rest.cursor), (vec!["c".to_owned()], None));
}
