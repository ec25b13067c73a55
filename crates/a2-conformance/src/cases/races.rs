//! Races (C6 and the atomicity of A1, A4, CO2, CO4, F6): concurrent tasks on
//! both handles, then checks of what each was told and what is stored.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use a2_core::{ClaimOutcome, CompleteOutcome, ErrorCode, FailKind, Store};
use tokio::task::JoinHandle;

use crate::support::*;
use crate::{SetupFn, fixture};

async fn join_all<T>(tasks: Vec<JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        match task.await {
            Ok(value) => out.push(value),
            Err(err) => panic!("a racing task failed: {err}"),
        }
    }
    out
}

pub(crate) fn handle(fx: &crate::Fixture, i: usize) -> Arc<dyn Store> {
    if i.is_multiple_of(2) {
        fx.store.clone()
    } else {
        fx.peer.clone()
    }
}

/// A1, C6: 8 tasks × 200 single-event appends through both handles get
/// indexes exactly 1..=1600, each once; each task sees its own events in
/// increasing index order.
pub async fn a1_c6_racing_appends_get_indexes_1_to_1600(setup: SetupFn) {
    let fx = fixture(setup).await;
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let store = handle(&fx, t);
            tokio::spawn(async move {
                let mut mine = Vec::with_capacity(200);
                for i in 0..200 {
                    let rows = append(store.as_ref(), "s", vec![ev_id(&format!("t{t}-{i}"))]).await;
                    assert_eq!(rows.len(), 1);
                    mine.push((rows[0].event.index, rows[0].event.id.clone()));
                }
                mine
            })
        })
        .collect();
    let results = join_all(tasks).await;
    let mut seen = BTreeMap::new();
    for mine in &results {
        assert!(
            mine.windows(2).all(|w| w[0].0 < w[1].0),
            "A1: a task's appends are ordered"
        );
        for (index, id) in mine {
            assert!(
                seen.insert(*index, id.clone()).is_none(),
                "A1: index {index} handed out twice"
            );
        }
    }
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        (1..=1600).collect::<Vec<u64>>(),
        "A1: dense"
    );
    let rows = read_all(fx.store.as_ref(), "s").await;
    assert_eq!(rows.len(), 1600);
    for row in &rows {
        assert_eq!(
            seen.get(&row.event.index),
            Some(&row.event.id),
            "A1: stored where reported"
        );
    }
}

/// A4, A5: tasks of two store handles racing to append one id, to two
/// sessions and twice to a third: both sessions get their own event, and in
/// the shared session exactly one event is written while the loser's
/// append is a retry that returns the winner's row.
pub async fn a4_racing_appends_of_one_id_are_per_session(setup: SetupFn) {
    let fx = fixture(setup).await;
    for round in 0..50 {
        let id = format!("id-{round}");
        let tasks: Vec<_> = ["left", "right", "both", "both"]
            .into_iter()
            .enumerate()
            .map(|(i, session)| {
                let store = handle(&fx, i);
                let id = id.clone();
                tokio::spawn(async move {
                    store
                        .append(session, vec![ev_id(&id)])
                        .await
                        .map(|out| out.events)
                })
            })
            .collect();
        let results: Vec<_> = join_all(tasks)
            .await
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| panic!("A4: {id}: {e}")))
            .collect();
        assert_eq!(results[0][0].event.session_id, "left");
        assert_eq!(results[1][0].event.session_id, "right");
        assert_eq!(results[2], results[3], "A5: one event of {id} in `both`");
    }
    for session in ["left", "right", "both"] {
        let rows = read_all(fx.store.as_ref(), session).await;
        assert_eq!(rows.len(), 50, "A4: every id stored once in {session}");
    }
}

/// C6: 8 tasks racing `claim_available` over one session (while leases
/// expire and are claimed again) never get the same (index, attempt); the
/// attempts handed out for each event are exactly 1..=attempt_count.
pub async fn c6_racing_claimers_never_share_an_attempt(setup: SetupFn) {
    let fx = fixture(setup).await;
    append_n(fx.store.as_ref(), "s", 200).await;
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let store = handle(&fx, t);
            let clock = fx.clock.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                for round in 0..40 {
                    if t == 0 && round % 4 == 3 {
                        // Expire every lease now and then, so events are
                        // claimed again as new attempts.
                        clock.advance(1_001);
                    }
                    got.extend(handed(store.as_ref(), &format!("w{t}"), 3).await);
                }
                got
            })
        })
        .collect();
    let results = join_all(tasks).await;
    assert!(results.iter().any(|got| !got.is_empty()));
    let rows = read_all(fx.store.as_ref(), "s").await;
    assert_handed_once(&results, rows);
}

/// What a claim of session `s` with a 1 s lease hands `holder`: the
/// (index, attempt) pairs, none when nothing was claimable.
async fn handed(store: &dyn Store, holder: &str, limit: usize) -> Vec<a2_core::Claim> {
    match claim(store, "s", holder, 1_000, limit).await {
        ClaimOutcome::Claimed { events: rows, .. } => claims_of(&rows),
        ClaimOutcome::Busy { .. } | ClaimOutcome::Settled => Vec::new(),
    }
}

/// C6: no (index, attempt) among `handed` (what every racer was given)
/// appears twice, and the attempts handed out of each row are exactly
/// 1..=attempt_count.
fn assert_handed_once(handed: &[Vec<a2_core::Claim>], rows: Vec<a2_core::StoredEvent>) {
    let mut by_index: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for claim in handed.iter().flatten() {
        let fresh = by_index
            .entry(claim.index)
            .or_default()
            .insert(claim.attempt);
        assert!(fresh, "C6: {claim:?} was handed out twice");
    }
    for row in rows {
        let attempts = by_index.remove(&row.event.index).unwrap_or_default();
        let expected: BTreeSet<u32> = (1..=row.attempt_count).collect();
        assert_eq!(
            attempts, expected,
            "C6: attempts of {} are 1..=attempt_count",
            row.event.index
        );
    }
}

/// AC2, C6: tasks that append and claim at once race tasks that claim, on
/// both handles, with leases expiring now and then: no (index, attempt) is
/// handed out twice, and every event's attempts are exactly 1..=attempt_count.
pub async fn ac2_c6_claims_at_append_and_racing_claimers_never_share_an_attempt(setup: SetupFn) {
    let fx = fixture(setup).await;
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let store = handle(&fx, t);
            let clock = fx.clock.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                for round in 0..30 {
                    if t == 0 && round % 5 == 4 {
                        clock.advance(1_001);
                    }
                    let holder = format!("w{t}");
                    if t % 2 == 0 {
                        let events = vec![ev("a"), ev("b").lane(format!("l{}", round % 3))];
                        let out = super::append_claim::append_claimed(
                            store.as_ref(),
                            "s",
                            events,
                            &holder,
                            1_000,
                            2,
                        )
                        .await;
                        got.extend(claims_of(&out.claimed_rows().cloned().collect::<Vec<_>>()));
                    } else {
                        got.extend(handed(store.as_ref(), &holder, 3).await);
                    }
                }
                got
            })
        })
        .collect();
    let results = join_all(tasks).await;
    let rows = read_all(fx.store.as_ref(), "s").await;
    assert_eq!(rows.len(), 4 * 30 * 2, "A1: every append landed");
    assert_handed_once(&results, rows);
}

/// CO2, F6, CO5, F2: completing and failing the same attempt concurrently:
/// exactly one wins, and the event ends processed or dead-lettered, not both.
pub async fn co2_f6_racing_complete_and_fail_exactly_one_wins(setup: SetupFn) {
    let fx = fixture(setup).await;
    for round in 0..40 {
        let session = format!("s{round}");
        append_n(fx.store.as_ref(), &session, 1).await;
        claimed(fx.store.as_ref(), &session, "w", TTL, 1).await;
        let (store, peer) = if round % 2 == 0 {
            (fx.store.clone(), fx.peer.clone())
        } else {
            (fx.peer.clone(), fx.store.clone())
        };
        let s1 = session.clone();
        let completing =
            tokio::spawn(async move { complete(store.as_ref(), &s1, 1, 1, vec![ev("r")]).await });
        let s2 = session.clone();
        let failing = tokio::spawn(async move { fail(peer.as_ref(), &s2, 1, 1, 1, None).await });
        let completed = match completing.await {
            Ok(Ok(out)) => out,
            other => panic!("complete errored: {other:?}"),
        };
        let failed = match failing.await {
            Ok(Ok(out)) => out,
            other => panic!("fail errored: {other:?}"),
        };
        let rows = read_all(fx.store.as_ref(), &session).await;
        match (completed, failed.outcome) {
            (CompleteOutcome::Completed { events }, FailKind::Superseded) => {
                assert_eq!(events.len(), 1);
                assert_eq!(rows.len(), 2, "CO2: the returned event was appended");
                assert_eq!(rows[0].processed_by_attempt, Some(1));
                assert_eq!(
                    (rows[0].failed_at, rows[0].failure_count),
                    (None, 0),
                    "F2: the failure wrote nothing"
                );
            }
            (CompleteOutcome::Superseded, FailKind::DeadLettered) => {
                assert_eq!(rows.len(), 1, "CO5: the completion wrote nothing");
                assert!(rows[0].failed_at.is_some());
                assert_eq!(rows[0].processed_at, None);
            }
            (c, f) => panic!("exactly one must win; got {c:?} and {f:?}"),
        }
    }
}

/// CO4, CO3: two completions of the same attempt with different returned
/// ids race: one completes, the other gets `PartialDuplicateBatch`; only the
/// winner's events are stored.
pub async fn co4_racing_completions_of_one_attempt_exactly_one_wins(setup: SetupFn) {
    let fx = fixture(setup).await;
    for round in 0..40 {
        let session = format!("s{round}");
        append_n(fx.store.as_ref(), &session, 1).await;
        claimed(fx.store.as_ref(), &session, "w", TTL, 1).await;
        let tasks: Vec<_> = (0..2)
            .map(|i| {
                let store = handle(&fx, i + round);
                let session = session.clone();
                tokio::spawn(async move {
                    let id = format!("{session}-by-{i}");
                    complete(store.as_ref(), &session, 1, 1, vec![ev_id(&id)])
                        .await
                        .map(|out| (out, id))
                })
            })
            .collect();
        let results = join_all(tasks).await;
        let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(
            winners.len(),
            1,
            "CO4: exactly one completion wins: {results:?}"
        );
        let (outcome, id) = winners[0];
        assert!(matches!(outcome, CompleteOutcome::Completed { .. }));
        for result in &results {
            if let Err(err) = result {
                assert_eq!(err.code(), ErrorCode::PartialDuplicateBatch, "CO4");
            }
        }
        let rows = read_all(fx.store.as_ref(), &session).await;
        assert_eq!(rows.len(), 2);
        assert_eq!(
            &rows[1].event.id, id,
            "CO4: only the winner's event is stored"
        );
        assert_eq!(rows[0].returned_event_ids, vec![id.clone()]);
    }
}

/// S1, S2: `read_state` is one atomic read: while the peer appends and
/// moves the snapshot forward, every read returns the events right after its
/// snapshot, contiguous up to one frontier, and snapshots never go back.
pub async fn s1_read_state_is_one_consistent_read_under_appends(setup: SetupFn) {
    let fx = fixture(setup).await;
    append_n(fx.store.as_ref(), "s", 1).await;
    let writer = {
        let peer = fx.peer.clone();
        tokio::spawn(async move {
            for i in 2..=300u64 {
                append(peer.as_ref(), "s", vec![ev("e")]).await;
                if i % 10 == 0 {
                    let write = vec![super::state::snap("r", i - 5, serde_json::json!(i - 5))];
                    if let Err(err) = peer.put_snapshots("s", write).await {
                        panic!("put_snapshots failed: {err}");
                    }
                }
            }
        })
    };
    let mut last_snapshot = 0;
    let mut last_frontier = 0;
    loop {
        let read = super::state::state(fx.store.as_ref(), "s", "r").await;
        let from = read.snapshot.as_ref().map_or(0, |x| x.index);
        if let Some(snapshot) = &read.snapshot {
            assert_eq!(
                snapshot.state,
                serde_json::json!(snapshot.index),
                "S1: the snapshot as written"
            );
        }
        assert!(
            from >= last_snapshot,
            "S2: the snapshot went back from {last_snapshot} to {from}"
        );
        let got: Vec<u64> = read.events.iter().map(|e| e.index).collect();
        let frontier = from + got.len() as u64;
        assert_eq!(
            got,
            (from + 1..=frontier).collect::<Vec<_>>(),
            "S1: contiguous after the snapshot"
        );
        assert!(frontier >= last_frontier, "S1: the frontier went back");
        last_snapshot = from;
        last_frontier = frontier;
        if frontier == 300 {
            break;
        }
        tokio::task::yield_now().await;
    }
    join_all(vec![writer]).await;
}

/// What one racing worker saw.
#[derive(Default)]
struct Seen {
    handed: Vec<(String, a2_core::Claim)>,
    completed: Vec<(String, a2_core::Claim)>,
    dead: Vec<(String, u64)>,
}

/// C6, CO2, CO5, F6, §1 lanes: six workers on both handles drain three
/// sessions concurrently (claim, then complete with a returned event or
/// fail until dead-lettered), while the clock moves so leases expire and
/// attempts are superseded. Afterwards: no attempt was handed out twice, each processed
/// event was completed by exactly one attempt, lanes were processed in
/// index order, and everything left pending waits behind a dead letter.
pub async fn c6_co2_f6_concurrent_workers_drain_every_session(setup: SetupFn) {
    let fx = fixture(setup).await;
    let sessions = ["d1", "d2", "d:3"];
    for session in sessions {
        let events = (0..30)
            .map(|i| match i % 3 {
                0 => ev("initial").lane("a"),
                1 => ev("initial").lane("b"),
                _ => ev("initial"),
            })
            .collect();
        append(fx.store.as_ref(), session, events).await;
    }
    let tasks: Vec<_> = (0..6)
        .map(|t| {
            let store = handle(&fx, t);
            let clock = fx.clock.clone();
            tokio::spawn(async move {
                let mut seen = Seen::default();
                let mut settled_in_a_row = 0;
                for round in 0..3_000usize {
                    if t == 0 && round % 7 == 6 {
                        clock.advance(300);
                    }
                    let session = sessions[(round + t) % sessions.len()];
                    let rows = match claim(store.as_ref(), session, &format!("w{t}"), 500, 2).await
                    {
                        ClaimOutcome::Claimed { events: rows, .. } => rows,
                        ClaimOutcome::Settled => {
                            settled_in_a_row += 1;
                            if settled_in_a_row >= 2 * sessions.len() {
                                break;
                            }
                            continue;
                        }
                        ClaimOutcome::Busy { .. } => {
                            settled_in_a_row = 0;
                            tokio::task::yield_now().await;
                            continue;
                        }
                    };
                    settled_in_a_row = 0;
                    for row in rows {
                        let claim = at(row.event.index, row.attempt_count);
                        seen.handed.push((session.to_owned(), claim));
                        if claim.index % 3 == 1 && claim.attempt == 1 {
                            // A slow handler: its lease runs out before it
                            // finishes, so another worker may supersede it.
                            clock.advance(600);
                            tokio::task::yield_now().await;
                        }
                        if claim.index % 10 == 8 {
                            let out = failed(
                                store.as_ref(),
                                session,
                                claim.index,
                                claim.attempt,
                                2,
                                None,
                            )
                            .await;
                            if out.outcome == FailKind::DeadLettered {
                                seen.dead.push((session.to_owned(), claim.index));
                            }
                        } else {
                            let returned = if row.event.event_type == "initial"
                                && claim.index.is_multiple_of(5)
                            {
                                vec![ev("child").lane("a")]
                            } else {
                                vec![]
                            };
                            match complete(
                                store.as_ref(),
                                session,
                                claim.index,
                                claim.attempt,
                                returned,
                            )
                            .await
                            {
                                Ok(CompleteOutcome::Completed { .. }) => {
                                    seen.completed.push((session.to_owned(), claim))
                                }
                                Ok(CompleteOutcome::Superseded) => {}
                                Err(err) => {
                                    panic!("complete of {claim:?} in {session} failed: {err}")
                                }
                            }
                        }
                    }
                }
                seen
            })
        })
        .collect();
    let results = join_all(tasks).await;
    let mut handed = BTreeSet::new();
    let mut completed: BTreeMap<(String, u64), Vec<u32>> = BTreeMap::new();
    let mut dead = BTreeSet::new();
    for seen in results {
        for (session, claim) in seen.handed {
            assert!(
                handed.insert((session.clone(), claim)),
                "C6: {session} {claim:?} handed out twice"
            );
        }
        for (session, claim) in seen.completed {
            completed
                .entry((session, claim.index))
                .or_default()
                .push(claim.attempt);
        }
        dead.extend(seen.dead);
    }
    let s = fx.store.as_ref();
    for session in sessions {
        let rows = read_all(s, session).await;
        for row in &rows {
            let i = row.event.index;
            let attempts = handed
                .iter()
                .filter(|(x, c)| x == session && c.index == i)
                .count();
            assert_eq!(
                row.attempt_count as usize, attempts,
                "C2: attempt_count of {session} {i}"
            );
            let wins = completed
                .get(&(session.to_owned(), i))
                .cloned()
                .unwrap_or_default();
            match row.processed_by_attempt {
                Some(attempt) => assert_eq!(
                    wins,
                    [attempt],
                    "CO2: {session} {i} completed once, by {attempt}"
                ),
                None => assert!(
                    wins.is_empty(),
                    "CO5: {session} {i} completions {wins:?} left no trace"
                ),
            }
            assert_eq!(
                row.failed_at.is_some(),
                dead.contains(&(session.to_owned(), i)),
                "F6: {session} {i} dead-lettered as reported"
            );
            assert!(
                !(row.processed_at.is_some() && row.failed_at.is_some()),
                "processed and dead: {row:?}"
            );
            if row.is_pending() {
                let blocked = row.event.lane.is_some()
                    && rows.iter().any(|r| {
                        r.event.index < i && r.event.lane == row.event.lane && r.failed_at.is_some()
                    });
                assert!(
                    blocked,
                    "C4: {session} {i} is pending but not behind a dead letter: {row:?}"
                );
            }
        }
        for lane in ["a", "b"] {
            let mut last_processed = i64::MIN;
            let mut open = false;
            for row in rows
                .iter()
                .filter(|r| r.event.lane.as_deref() == Some(lane))
            {
                match row.processed_at {
                    Some(at) => {
                        assert!(
                            !open,
                            "lane {lane} of {session}: {} processed after an unprocessed event",
                            row.event.index
                        );
                        assert!(
                            at >= last_processed,
                            "lane {lane} of {session}: processed out of order"
                        );
                        last_processed = at;
                    }
                    None => open = true,
                }
            }
        }
        let summary = all_sessions(s)
            .await
            .into_iter()
            .find(|x| x.session_id == session);
        let summary = summary.unwrap_or_else(|| panic!("I1: {session} not listed"));
        assert_eq!(summary.event_count, rows.len() as u64, "I1");
        assert_eq!(
            summary.pending_count,
            rows.iter().filter(|r| r.is_pending()).count() as u64,
            "I1"
        );
        assert_eq!(
            summary.failed_count,
            rows.iter().filter(|r| r.failed_at.is_some()).count() as u64,
            "I1"
        );
        let attempts: u64 = rows.iter().map(|r| u64::from(r.attempt_count)).sum();
        assert_eq!(summary.attempt_count, attempts, "I1");
    }
}

/// RV3, RV2, C6: 8 tasks revive one dead letter while 8 others claim in its
/// session, through both handles, over 10 rounds: each round exactly one
/// revive revives it, at most one claim gets it (with the next attempt
/// number), and the counters end where one revive puts them.
pub async fn rv3_racing_revives_of_one_dead_letter_revive_it_once(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    let mut attempt = 0;
    for round in 0..10 {
        let got = match claim(s, "s", "w", TTL, 1).await {
            ClaimOutcome::Claimed { events: rows, .. } => rows,
            // The previous round's claimers all came before its revive.
            other => panic!("round {round}: expected the event claimable, got {other:?}"),
        };
        attempt += 1;
        assert_eq!(claims_of(&got), [at(1, attempt)], "round {round}");
        assert_eq!(
            failed(s, "s", 1, attempt, 1, None).await.outcome,
            FailKind::DeadLettered
        );
        let tasks: Vec<_> = (0..16)
            .map(|t| {
                let store = handle(&fx, t);
                tokio::spawn(async move {
                    if t < 8 {
                        match store.revive("s", 1).await {
                            Ok(outcome) => (outcome.is_revived(), None),
                            Err(err) => panic!("revive failed: {err}"),
                        }
                    } else {
                        match store
                            .claim_available(claim_request("s", "racer", TTL, 1))
                            .await
                        {
                            Ok(ClaimOutcome::Claimed { events: rows, .. }) => {
                                (false, Some(claims_of(&rows)))
                            }
                            Ok(_) => (false, None),
                            Err(err) => panic!("claim failed: {err}"),
                        }
                    }
                })
            })
            .collect();
        let results = join_all(tasks).await;
        let revives = results.iter().filter(|(revived, _)| *revived).count();
        assert_eq!(revives, 1, "RV3: round {round}: revived {revives} times");
        let claims: Vec<_> = results.iter().filter_map(|(_, c)| c.clone()).collect();
        assert!(claims.len() <= 1, "C6: round {round}: {claims:?}");
        if let Some(claim) = claims.first() {
            attempt += 1;
            assert_eq!(claim[..], [at(1, attempt)], "RV2: a new attempt");
            assert!(
                release_claims(s, "racer", at(1, attempt)).await,
                "round {round}: the racer's lease is released"
            );
        }
        let counts = counters(s, "s").await;
        assert_eq!(
            counts,
            (1, 1, 0, u64::from(attempt), 0),
            "RV2, I1: round {round}"
        );
    }
}

/// Releases one claim of `holder`; true when it was released.
async fn release_claims(store: &dyn Store, holder: &str, claim: a2_core::Claim) -> bool {
    match store
        .release_claims(a2_core::ReleaseRequest {
            session: "s".to_owned(),
            holder: holder.to_owned(),
            claims: vec![claim],
        })
        .await
    {
        Ok(released) => released == [claim.index],
        Err(err) => panic!("release failed: {err}"),
    }
}

/// CN3, CO2: of 8 racing cancels of one leased event (through both
/// handles) and its holder's completion, exactly one settles it: either one
/// cancel is `Cancelled` and the completion `Superseded`, or the completion
/// wins and every cancel is `NotPending`. Ten rounds.
pub async fn cn3_racing_cancels_and_a_completion_settle_an_event_once(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 10).await;
    for round in 1..=10u64 {
        let got = claimed(s, "s", "w", TTL, 1).await;
        assert_eq!(claims_of(&got), [at(round, 1)], "round {round}");
        let tasks: Vec<_> = (0..9)
            .map(|t| {
                let store = handle(&fx, t);
                tokio::spawn(async move {
                    if t < 8 {
                        match store.cancel("s", round, Some(format!("racer {t}"))).await {
                            Ok(outcome) => outcome.is_cancelled(),
                            Err(err) => panic!("cancel failed: {err}"),
                        }
                    } else {
                        match complete(store.as_ref(), "s", round, 1, vec![]).await {
                            Ok(outcome) => matches!(outcome, CompleteOutcome::Completed { .. }),
                            Err(err) => panic!("complete failed: {err}"),
                        }
                    }
                })
            })
            .collect();
        let results = join_all(tasks).await;
        let settled = results.iter().filter(|won| **won).count();
        assert_eq!(settled, 1, "CN3: round {round}: settled {settled} times");
        let row = row(s, "s", round).await;
        assert_eq!(
            row.cancelled_at.is_some(),
            !results[8],
            "CN3: round {round}: the row says who won"
        );
    }
    assert_eq!(counters(s, "s").await.1, 0, "CN3: nothing left pending");
}

/// CL6, CL2, A1: 8 tasks append single events through both handles while
/// one of them, midway, appends a batch that closes the session. Every
/// append lands wholly before the close (its indexes at or below the
/// closed frontier) or is refused with `SessionClosed`; the closing batch
/// ends exactly at the closed frontier, and the log holds nothing after it.
pub async fn cl6_racing_appends_and_one_that_closes_agree_on_the_close(setup: SetupFn) {
    let fx = fixture(setup).await;
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let store = handle(&fx, t);
            tokio::spawn(async move {
                let mut landed = Vec::new();
                let mut closing = None;
                for i in 0..40 {
                    let id = format!("t{t}-{i}");
                    let result = if t == 3 && i == 20 {
                        let batch = vec![ev_id(&id), ev_id(&format!("{id}-last"))];
                        store
                            .append_with("s", batch, a2_core::AppendOptions::new().close())
                            .await
                    } else {
                        store.append("s", vec![ev_id(&id)]).await
                    };
                    match result {
                        Ok(out) => {
                            let indexes = indexes(&out.events);
                            if t == 3 && i == 20 {
                                closing = Some(indexes.clone());
                            }
                            landed.extend(indexes);
                        }
                        Err(err) if err.code() == ErrorCode::SessionClosed => {}
                        Err(err) => panic!("CL6: append {id}: {err}"),
                    }
                }
                (landed, closing)
            })
        })
        .collect();
    let results = join_all(tasks).await;
    let closing = results
        .iter()
        .find_map(|(_, c)| c.clone())
        .expect("CL6: the closing append lands (nothing closed the session before it)");
    let frontier = *closing.last().expect("two events");
    assert_eq!(closing, [frontier - 1, frontier], "CL6: one batch");
    let mut landed: Vec<u64> = results.iter().flat_map(|(l, _)| l.clone()).collect();
    landed.sort_unstable();
    assert_eq!(
        landed,
        (1..=frontier).collect::<Vec<_>>(),
        "CL2: every append that landed is at or below the close, each index once"
    );
    let rows = read_all(fx.store.as_ref(), "s").await;
    assert_eq!(rows.len() as u64, frontier, "CL6: nothing after the close");
    assert_eq!(
        summary(fx.peer.as_ref(), "s").await.event_count,
        frontier,
        "CL6: the close's frontier is the log's"
    );
    expect_code(
        fx.store.append("s", vec![ev("after")]).await,
        ErrorCode::SessionClosed,
        "CL2",
    );
}
