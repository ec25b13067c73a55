//! Group commit: concurrent operations of an instance share script calls,
//! each as if alone (RD7, AC2), as functions or as scripts (RD1).

use super::*;

/// RD7: concurrent calls of one store instance share batch scripts under
/// load (fewer script calls than operations), and each still gets its
/// own, correct reply: 400 appends racing over 40 sessions give every
/// session dense indexes 1..=10 and each caller the row it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rd7_concurrent_calls_share_batch_scripts_and_keep_their_replies() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "batch", |o| o).await;
    let mut admin = common::admin(&server).await;
    reset_command_calls(&mut admin).await;
    let a = Arc::new(a);
    // 400 appends, and the first 40 sent twice (A5: the repeat gets the
    // same row, even when both travel in one batch).
    let tasks: Vec<_> = (0..440)
        .map(|n| {
            let a = a.clone();
            let k = if n < 400 { n } else { n - 400 };
            tokio::spawn(async move {
                let session = format!("s{}", k % 40);
                let id = format!("e{k}");
                let out = a
                    .append(&session, vec![NewEvent::new("e", json!(k)).id(&id)])
                    .await
                    .unwrap();
                assert_eq!(out.events.len(), 1);
                assert_eq!(out.events[0].event.id, id, "RD7: the caller's own row");
                (session, id, out.events[0].event.index)
            })
        })
        .collect();
    let mut indexes: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut of_id: BTreeMap<String, u64> = BTreeMap::new();
    for task in tasks {
        let (session, id, index) = task.await.unwrap();
        match of_id.get(&id) {
            Some(&first) => assert_eq!(first, index, "A5: {id} twice"),
            None => {
                of_id.insert(id, index);
                indexes.entry(session).or_default().push(index);
            }
        }
    }
    for (session, mut got) in indexes {
        got.sort();
        assert_eq!(
            got,
            (1..=10).collect::<Vec<_>>(),
            "RD7: dense indexes in {session}"
        );
        let rows = a.read(&session, ReadRange::default()).await.unwrap();
        assert_eq!(rows.len(), 10);
    }
    let stats = command_calls(&mut admin).await;
    let calls = script_calls(&stats);
    assert!(
        calls < 400,
        "RD7: 440 appends took {calls} script calls; none shared a batch"
    );
    // Appends of one session in one batch share one write of its state.
    let hsets = stats["hset"];
    assert!(
        hsets < 400,
        "RD7: 400 new events were written with {hsets} HSETs; no batch grouped a session's appends"
    );
}

/// RD7: operations started in one pass of the scheduler travel in one
/// script call, even on a quiet store whose calls are all free: the call
/// the first of them starts waits for that pass to end. (Each of the
/// first four would otherwise take a free call alone.)
#[tokio::test(flavor = "current_thread")]
async fn rd7_operations_started_together_share_one_call() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "together", |o| o).await;
    let mut admin = common::admin(&server).await;
    // The library is loaded and the connection is up before counting.
    a.append("warm", vec![NewEvent::new("e", json!(0))])
        .await
        .unwrap();
    reset_command_calls(&mut admin).await;
    let appends = (0..100).map(|k| {
        let a = &a;
        async move {
            let session = format!("s{}", k % 10);
            let id = format!("e{k}");
            let out = a
                .append(&session, vec![NewEvent::new("e", json!(k)).id(&id)])
                .await
                .unwrap();
            assert_eq!(out.events[0].event.id, id, "RD7: the caller's own row");
            out.events[0].event.index
        }
    });
    let indexes = futures::future::join_all(appends).await;
    for (k, index) in indexes.into_iter().enumerate() {
        assert_eq!(
            index,
            k as u64 / 10 + 1,
            "RD7: dense indexes, in call order"
        );
    }
    let calls = script_calls(&command_calls(&mut admin).await);
    assert_eq!(
        calls, 1,
        "RD7: 100 appends started together took {calls} calls"
    );
}

/// RD7, CL6, CL2: in one batch, the appends of a session after one that
/// closed it are refused as if each were alone — the group's later
/// operations see the close its earlier one made — and the log ends at the
/// closing append's last event.
#[tokio::test(flavor = "current_thread")]
async fn cl6_appends_batched_after_a_closing_append_are_refused() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "closing", |o| o).await;
    let mut admin = common::admin(&server).await;
    a.append("warm", vec![NewEvent::new("e", json!(0))])
        .await
        .unwrap();
    reset_command_calls(&mut admin).await;
    let one = |id: &str| vec![NewEvent::new("e", json!(id)).id(id)];
    let (before, closing, after, again) = tokio::join!(
        a.append("s", one("a")),
        a.append_with(
            "s",
            vec![
                NewEvent::new("e", json!("b")).id("b"),
                NewEvent::new("e", json!("c")).id("c"),
            ],
            a2_core::AppendOptions::new().close(),
        ),
        a.append("s", one("d")),
        a.append("s", one("e")),
    );
    assert_eq!(
        script_calls(&command_calls(&mut admin).await),
        1,
        "RD7: one batch"
    );
    assert_eq!(before.unwrap().events[0].event.index, 1);
    let closing: Vec<u64> = closing
        .unwrap()
        .events
        .iter()
        .map(|r| r.event.index)
        .collect();
    assert_eq!(closing, [2, 3], "CL6");
    for refused in [after, again] {
        assert_eq!(
            refused.map(|o| o.events.len()).map_err(|e| e.code()),
            Err(a2_core::ErrorCode::SessionClosed),
            "CL2: after the close, in the same batch"
        );
    }
    assert_eq!(
        log_of(&a, "s").await.len(),
        3,
        "CL6: nothing after the close"
    );
}

/// RD7, CO2, CO3: concurrent completions of one session that travel in one
/// batch share one read and one write of the session's state, and each
/// still behaves as if alone: 62 completions at once (a third of them
/// returning an event, a fifth sent twice, five with a wrong attempt, two
/// of them lane heads) give every caller its own reply, repeats the same
/// rows, and leave counters, records and lanes as sequential calls would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rd7_concurrent_completions_of_one_session_share_one_write() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "group", |o| o).await;
    let mut admin = common::admin(&server).await;
    let mut events: Vec<NewEvent> = (0..60).map(|k| NewEvent::new("e", json!(k))).collect();
    for lane in ["x", "y"] {
        events.extend((0..10).map(|k| NewEvent::new("e", json!(k)).lane(lane)));
    }
    a.append("s", events).await.unwrap();
    let ClaimOutcome::Claimed {
        events: claimed, ..
    } = claim_all(&a).await
    else {
        panic!("nothing claimed");
    };
    assert_eq!(claimed.len(), 62, "60 lane-less events and two lane heads");
    reset_command_calls(&mut admin).await;
    // The server holds the first calls until every completion is spawned,
    // so the rest queue behind them and travel in batches whatever the
    // machine's speed (a slow spawner would otherwise send small ones).
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query_async(&mut admin)
        .await
        .unwrap();
    let a = Arc::new(a);
    let request = |row: &StoredEvent, attempt: u32| CompleteRequest {
        session: "s".into(),
        index: row.event.index,
        attempt,
        events: if row.event.index.is_multiple_of(3) {
            vec![NewEvent::new("r", json!(row.event.index)).id(format!("r{}", row.event.index))]
        } else {
            vec![]
        },
        batch_size: None,
    };
    let mut tasks = Vec::new();
    for (k, row) in claimed.iter().enumerate() {
        let sends = if k % 5 == 0 { 2 } else { 1 };
        for _ in 0..sends {
            let (a, req) = (a.clone(), request(row, row.attempt_count));
            tasks.push((
                row.event.index,
                true,
                tokio::spawn(async move { a.complete_attempt(req).await }),
            ));
        }
        if k % 13 == 0 {
            let (a, req) = (a.clone(), request(row, row.attempt_count + 1));
            tasks.push((
                row.event.index,
                false,
                tokio::spawn(async move { a.complete_attempt(req).await }),
            ));
        }
    }
    let completes = tasks.len();
    // Every completion has reached the group commit (queued, or sent and
    // held by the pause) before the server answers any.
    eventually("every completion to reach the batcher", || {
        let a = a.clone();
        async move { a.operations_waiting() == completes }
    })
    .await;
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut admin)
        .await
        .unwrap();
    let mut outcomes: BTreeMap<u64, Vec<CompleteOutcome>> = BTreeMap::new();
    for (index, right, task) in tasks {
        let outcome = task.await.unwrap().unwrap();
        if right {
            outcomes.entry(index).or_default().push(outcome);
        } else {
            assert_eq!(outcome, CompleteOutcome::Superseded, "CO5: event {index}");
        }
    }
    let mut returned = 0;
    for (index, got) in &outcomes {
        let CompleteOutcome::Completed { events: rows } = &got[0] else {
            panic!("CO2: event {index} did not complete: {:?}", got[0]);
        };
        assert!(
            got.iter().all(|o| o == &got[0]),
            "CO3: repeats of {index} differ"
        );
        let expect = usize::from(index.is_multiple_of(3));
        assert_eq!(rows.len(), expect, "event {index}: its returned rows");
        for row in rows {
            assert_eq!(row.event.id, format!("r{index}"));
            assert_eq!(
                row.event.cause.map(|c| (c.index, c.attempt)),
                Some((*index, 1))
            );
        }
        returned += expect as u64;
    }
    assert_eq!(outcomes.len(), 62);

    // The state is what sequential calls leave.
    let rows = a.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(rows.len() as u64, 80 + returned);
    for row in &rows {
        let done = outcomes.contains_key(&row.event.index);
        assert_eq!(
            row.processed_at.is_some(),
            done,
            "event {}",
            row.event.index
        );
        if done {
            assert_eq!(row.processed_by_attempt, Some(1));
            assert_eq!(row.claim_holder, None);
        }
    }
    let page = a.list_sessions(ListSessionsOptions::new(10)).await.unwrap();
    let info = &page.sessions[0];
    assert_eq!(info.event_count, 80 + returned);
    assert_eq!(
        info.pending_count,
        18 + returned,
        "I1: pending after the completions"
    );
    // The lanes moved on: their second events are the heads now.
    let ClaimOutcome::Claimed { events: next, .. } = claim_all(&a).await else {
        panic!("nothing claimable after the completions");
    };
    let lanes: Vec<_> = next.iter().filter_map(|r| r.event.lane.clone()).collect();
    assert_eq!(lanes, vec!["x".to_owned(), "y".to_owned()]);
    assert_eq!(next.len() as u64, 2 + returned);

    // Completions of one session shared their writes: fewer HSETs than
    // completions (each alone writes once).
    let stats = command_calls(&mut admin).await;
    let calls = |name: &str| -> u64 { stats.get(name).copied().unwrap_or(0) };
    assert!(
        calls("hset") < completes as u64 / 2,
        "RD7: {completes} completions wrote the session {} times",
        calls("hset")
    );
    // ... read the records of a group, and the ids its completions
    // return, in one HMGET, and took its settled events out of the lease
    // queue in one ZREM.
    for command in ["hmget", "zrem"] {
        assert!(
            calls(command) < completes as u64 / 2,
            "RD7: {completes} completions ran {command} {} times",
            calls(command)
        );
    }
}

/// RD7: a batch names each session once, by its `meta` key, for a run of
/// its operations, and the store time only when it changes; the script
/// derives the rest. 40 sessions racing appends, claims, completions and
/// failures from 160 tasks on one instance, with the clock moving between
/// them, leave every session as sequential calls would: every event
/// processed once, counters right, no queue entry left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rd7_mixed_batches_of_many_sessions_leave_each_as_if_alone() {
    let server = RedisServer::start();
    let (a, _b, clock) = pair(&server, "mixed", |o| o).await;
    let mut admin = common::admin(&server).await;
    reset_command_calls(&mut admin).await;
    let a = Arc::new(a);
    let sessions = 40;
    let per = 4;
    let tasks: Vec<_> = (0..sessions * per)
        .map(|k| {
            let (a, clock) = (a.clone(), clock.clone());
            tokio::spawn(async move {
                let session = format!("m{}", k % sessions);
                if k % 7 == 0 {
                    clock.advance(1);
                }
                let out = a
                    .append(
                        &session,
                        vec![NewEvent::new("e", json!(k)).id(format!("e{k}"))],
                    )
                    .await
                    .unwrap();
                assert_eq!(out.events[0].event.id, format!("e{k}"), "RD7: own row");
                // Claim whatever is there and finish it: fail first
                // attempts of every third event, complete the rest.
                loop {
                    let outcome = a
                        .claim_available(ClaimRequest {
                            session: session.clone(),
                            holder: format!("w{k}"),
                            lease: Lease::Ttl(60_000),
                            exclude_indexes: vec![],
                            limit: 2,
                        })
                        .await
                        .unwrap();
                    let ClaimOutcome::Claimed { events: rows, .. } = outcome else {
                        return;
                    };
                    for row in rows {
                        let index = row.event.index;
                        if index % 3 == 0 && row.attempt_count == 1 {
                            let failed = a
                                .fail_attempt(FailRequest {
                                    session: session.clone(),
                                    index,
                                    attempt: 1,
                                    error: "once".into(),
                                    max_failures: 5,
                                    retry_at: None,
                                })
                                .await
                                .unwrap();
                            assert_eq!(failed.outcome, FailKind::Failed, "{failed:?}");
                        } else {
                            let done = a
                                .complete_attempt(CompleteRequest::new(
                                    session.clone(),
                                    index,
                                    row.attempt_count,
                                ))
                                .await
                                .unwrap();
                            assert!(
                                matches!(done, CompleteOutcome::Completed { .. }),
                                "{session} {index}: {done:?}"
                            );
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let calls = script_calls(&command_calls(&mut admin).await);
    // 160 appends and at least as many claims and completions.
    assert!(
        calls < 160,
        "RD7: some {} operations took {calls} script calls: few shared a batch",
        3 * sessions * per
    );
    // Whatever a task left claimable when it stopped looking (a failed
    // event due for its retry): finish it now.
    for s in 0..sessions {
        let session = format!("m{s}");
        while let ClaimOutcome::Claimed { events: rows, .. } = a
            .claim_available(ClaimRequest {
                session: session.clone(),
                holder: "sweeper".into(),
                lease: Lease::Ttl(60_000),
                exclude_indexes: vec![],
                limit: 100,
            })
            .await
            .unwrap()
        {
            for row in rows {
                a.complete_attempt(CompleteRequest::new(
                    session.clone(),
                    row.event.index,
                    row.attempt_count,
                ))
                .await
                .unwrap();
            }
        }
        let rows = a.read(&session, ReadRange::default()).await.unwrap();
        assert_eq!(rows.len(), per, "{session}");
        for row in &rows {
            assert!(row.processed_at.is_some(), "{session} {}", row.event.index);
            let expect = if row.event.index % 3 == 0 { 2 } else { 1 };
            assert_eq!(row.attempt_count, expect, "{session} {}", row.event.index);
        }
        let keys = a.session_keys(&session);
        for queue in [&keys.ready, &keys.timed] {
            let left: u64 = redis::cmd("ZCARD")
                .arg(queue)
                .query_async(&mut admin)
                .await
                .unwrap();
            assert_eq!(left, 0, "{queue} is empty once all is processed");
        }
    }
    let mut cursor = None;
    let mut seen = 0;
    loop {
        let mut options = ListSessionsOptions::new(16);
        options.cursor = cursor.take();
        let page = a.list_sessions(options).await.unwrap();
        for info in &page.sessions {
            assert_eq!(info.event_count, per as u64, "{}", info.session_id);
            assert_eq!(info.pending_count, 0, "{}", info.session_id);
            assert_eq!(info.failed_count, 0, "{}", info.session_id);
            seen += 1;
        }
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, sessions);
}

/// Appends, claims and completes `n` events of `session`, one at a time.
async fn cycle(store: &RedisStore, session: &str, n: usize) {
    for k in 0..n {
        store
            .append(session, vec![NewEvent::new("e", json!(k))])
            .await
            .unwrap();
        let ClaimOutcome::Claimed { events: rows, .. } = store
            .claim_available(ClaimRequest {
                session: session.into(),
                holder: "w".into(),
                lease: Lease::Ttl(60_000),
                exclude_indexes: vec![],
                limit: 1,
            })
            .await
            .unwrap()
        else {
            panic!("event {k} of {session} is not claimable");
        };
        let row = &rows[0];
        let done = store
            .complete_attempt(CompleteRequest::new(
                session,
                row.event.index,
                row.attempt_count,
            ))
            .await
            .unwrap();
        assert!(
            matches!(done, CompleteOutcome::Completed { .. }),
            "{done:?}"
        );
    }
}

/// RD1: on Redis ≥ 7 the writes run as functions of one library, loaded by
/// the first call (`FCALL`, no `EVALSHA`), and loaded again when the server
/// lost it (`FUNCTION FLUSH`).
#[tokio::test]
async fn rd1_writes_run_as_functions_of_one_library() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "functions", |o| o).await;
    let mut admin = common::admin(&server).await;
    reset_command_calls(&mut admin).await;
    cycle(&a, "s", 3).await;
    let stats = command_calls(&mut admin).await;
    assert!(stats.get("fcall").copied().unwrap_or(0) >= 9, "{stats:?}");
    assert_eq!(stats.get("evalsha"), None, "{stats:?}");
    let libraries: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(
        format!("{libraries:?}").contains("a2_"),
        "the library is on the server: {libraries:?}"
    );
    let () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .unwrap();
    cycle(&a, "s", 2).await;
    let rows = a.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(rows.len(), 5);
    assert!(rows.iter().all(|r| r.processed_at.is_some()));
}

/// RD1: where the server refuses functions (here an ACL without `FCALL`
/// and `FUNCTION`, as on Redis 6.2, where they do not exist) the same
/// operations run as scripts, and the store works the same.
#[tokio::test]
async fn rd1_writes_run_as_scripts_where_functions_are_refused() {
    let server = RedisServer::start();
    let mut admin = common::admin(&server).await;
    let () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "scripts",
            "on",
            ">secret",
            "~*",
            "&*",
            "+@all",
            "-fcall",
            "-function",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = server
        .url()
        .replacen("redis://", "redis://scripts:secret@", 1);
    let clock = Arc::new(ManualClock::new(common::START_MS));
    let store = RedisStore::connect(&url, common::options("refused", clock))
        .await
        .unwrap();
    reset_command_calls(&mut admin).await;
    cycle(&store, "s", 3).await;
    let stats = command_calls(&mut admin).await;
    assert!(stats.get("evalsha").copied().unwrap_or(0) >= 9, "{stats:?}");
    let rows = store.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.processed_at.is_some()));
}

/// AC2 under group commit: a batch adds the leases its appends take to
/// `timed` when the session's group ends, before its completions take
/// theirs out. Appends that claim race completions of earlier claimed
/// events; afterwards `timed` holds exactly the unsettled leases at their
/// expiry, and once they expire another holder claims exactly those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ac2_leases_taken_in_a_batch_reach_timed_before_its_completions() {
    let server = RedisServer::start();
    let (a, b, clock) = pair(&server, "held-leases", |o| o).await;
    let a = Arc::new(a);
    let claim = || AppendClaim::new("w", Lease::Ttl(60_000), 1);
    let first = futures::future::join_all((0..100).map(|n| {
        let a = a.clone();
        async move {
            a.append_and_claim("s", vec![NewEvent::new("e", json!(n))], claim())
                .await
                .unwrap()
        }
    }))
    .await;
    let claimed: Vec<(u64, u32)> = first
        .iter()
        .flat_map(|o| o.claimed_rows().map(|r| (r.event.index, r.attempt_count)))
        .collect();
    assert_eq!(claimed.len(), 100);
    // Completions of the first 50 race 100 more appends that claim.
    let completions = claimed[..50].iter().map(|&(index, attempt)| {
        let a = a.clone();
        tokio::spawn(async move {
            a.complete_attempt(CompleteRequest::new("s", index, attempt))
                .await
                .unwrap();
            None
        })
    });
    let appends = (100..200).map(|n| {
        let a = a.clone();
        tokio::spawn(async move {
            let outcome = a
                .append_and_claim("s", vec![NewEvent::new("e", json!(n))], claim())
                .await
                .unwrap();
            let row = outcome.claimed_rows().next().expect("claimed").clone();
            Some(row.event.index)
        })
    });
    let tasks: Vec<_> = completions.chain(appends).collect();
    let mut unsettled: Vec<u64> = claimed[50..].iter().map(|c| c.0).collect();
    for task in tasks {
        if let Some(index) = task.await.unwrap() {
            unsettled.push(index);
        }
    }
    unsettled.sort_unstable();
    let mut admin = common::admin(&server).await;
    let timed = timed_of(&mut admin, &a.session_keys("s").timed).await;
    let expiry = (common::START_MS + 60_000) as f64;
    let mut in_timed: Vec<u64> = timed
        .iter()
        .map(|(member, score)| {
            assert_eq!(*score, expiry, "event {member} leased until the expiry");
            member.parse().unwrap()
        })
        .collect();
    in_timed.sort_unstable();
    assert_eq!(
        in_timed, unsettled,
        "timed holds exactly the unsettled leases"
    );
    clock.advance(60_001);
    let mut taken = Vec::new();
    while let ClaimOutcome::Claimed { events: rows, .. } = claim_all_as(&b, "v").await {
        taken.extend(rows.iter().map(|r| r.event.index));
    }
    taken.sort_unstable();
    assert_eq!(
        taken, unsettled,
        "the expired leases, and only they, are claimed again"
    );
}
