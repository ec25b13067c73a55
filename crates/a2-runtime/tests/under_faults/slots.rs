//! Concurrency: events claimed at append (RT13), slots that free when a
//! handler returns (RT14), and shutdown of waiting events (RT6, RT13).

use super::*;

/// RT13: events appended through the app are claimed by the append itself
/// and run without a claim: those past the concurrency limit wait in the
/// drain, their leases renewed, and run as slots free up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt13_appended_events_run_without_a_claim() {
    let (store, faults) = faulty(Faults::default());
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let app = {
        let ran = ran.clone();
        builder(&store)
            .concurrency(2)
            .handler("t", move |ctx: Context, _: Value| {
                let ran = ran.clone();
                async move {
                    // Long enough for several renewals (every 10 ms).
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    ran.lock().unwrap().push(ctx.index());
                    Ok::<(), HandlerError>(())
                }
            })
            .build()
            .unwrap()
    };
    for n in 0..3 {
        app.append("s", vec![NewEvent::new("t", json!(n))])
            .await
            .unwrap();
    }
    within("the first three to run", app.idle()).await;
    // Two run, two wait for a slot: all four claimed by the append.
    let out = app
        .append("s", (0..4).map(|n| NewEvent::new("t", json!(n))).collect())
        .await
        .unwrap();
    assert_eq!(out.claimed, [4, 5, 6, 7], "AC2: the append claimed");
    within("every event to run", app.idle()).await;
    let mut ran = ran.lock().unwrap().clone();
    ran.sort_unstable();
    assert_eq!(ran, (1..=7).collect::<Vec<u64>>(), "each ran once");
    let rows = all(&store, "s").await;
    assert!(rows.iter().all(|r| r.processed_by_attempt == Some(1)));
    assert_eq!(app.stats().completed, 7);
    assert_eq!(
        faults.claims.load(Ordering::SeqCst),
        0,
        "RT13: no claim round trip, not even after the completions"
    );
}

/// RT14: a handler's place in the concurrency limit frees when the
/// handler returns, and recording outcomes has five times as many places
/// of its own. While the store holds every completion back, with a limit of
/// two: handlers run and return, two at a time, until their outcomes take
/// all ten recording places; the next two keep their slots waiting for a
/// place, so no thirteenth handler starts. Once the store answers,
/// everything completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt14_outcomes_are_recorded_beside_the_next_handlers_within_a_bound() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (store, faults) = faulty(Faults {
        completion_gate: Some(gate.clone()),
        ..Faults::default()
    });
    let started = Arc::new(AtomicU32::new(0));
    let app = {
        let started = started.clone();
        builder(&store)
            .concurrency(2)
            .handler("t", move |_ctx: Context, _: Value| {
                let started = started.clone();
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), HandlerError>(())
                }
            })
            .build()
            .unwrap()
    };
    app.append("s", (0..16).map(|n| NewEvent::new("t", json!(n))).collect())
        .await
        .unwrap();
    within(
        "twelve handlers to start and ten completions to wait",
        async {
            while started.load(Ordering::SeqCst) < 12 || faults.held.load(Ordering::SeqCst) < 10 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        },
    )
    .await;
    // The drain renews its leases every 10 ms, in the loop that starts a
    // waiting event once a slot frees (the start comes after the renewal
    // in its biased select): two more renewals, each after the twelve
    // handlers returned, give a (wrongly) freed slot its turn to start a
    // thirteenth handler.
    let renews = faults.renews.load(Ordering::SeqCst);
    within("two more renewals", async {
        while faults.renews.load(Ordering::SeqCst) < renews + 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert_eq!(
        started.load(Ordering::SeqCst),
        12,
        "RT14: at most ten outcomes being recorded"
    );
    assert_eq!(faults.held.load(Ordering::SeqCst), 10);
    gate.add_permits(16);
    within("every event to complete", app.idle()).await;
    assert_eq!(started.load(Ordering::SeqCst), 16, "each ran once");
    assert_eq!(app.stats().completed, 16);
    let rows = all(&store, "s").await;
    assert!(rows.iter().all(|r| r.processed_by_attempt == Some(1)));
}

/// RT13, RT6: at shutdown, events claimed at append that still wait for a
/// slot are released at once, like the running ones past the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt13_waiting_events_are_released_at_shutdown() {
    let store = memory();
    let started = Arc::new(tokio::sync::Notify::new());
    let app = {
        let started = started.clone();
        builder(&store)
            .concurrency(1)
            .handler("stuck", move |_ctx: Context, _: Value| {
                let started = started.clone();
                async move {
                    started.notify_one();
                    std::future::pending::<()>().await;
                    Ok::<(), HandlerError>(())
                }
            })
            .build()
            .unwrap()
    };
    let out = app
        .append(
            "s",
            (0..6).map(|n| NewEvent::new("stuck", json!(n))).collect(),
        )
        .await
        .unwrap();
    assert_eq!(
        out.claimed,
        [1, 2, 3, 4, 5],
        "one slot and four places to wait"
    );
    within("the first to start", started.notified()).await;
    let report = within("shutdown", app.shutdown(Duration::from_millis(50))).await;
    assert!(!report.finished_in_time);
    let rows = all(&store, "s").await;
    for r in &rows {
        assert!(
            r.is_pending() && r.claim_holder.is_none(),
            "released: {r:?}"
        );
    }
    assert_eq!(
        rows.iter().map(|r| r.attempt_count).collect::<Vec<_>>(),
        [1, 1, 1, 1, 1, 0],
        "the sixth was never claimed"
    );
}

/// RT13: a backlog another process appended is claimed many events at a
/// time (the prefetch fills; a claim waits for room), not one claim per
/// freed slot; every event still runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt13_a_backlog_is_claimed_many_events_at_a_time() {
    let (store, faults) = faulty(Faults::default());
    let ran = Arc::new(AtomicU32::new(0));
    let app = {
        let ran = ran.clone();
        builder(&store)
            .concurrency(4)
            .handler("t", move |_ctx: Context, _: Value| {
                let ran = ran.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), HandlerError>(())
                }
            })
            .build()
            .unwrap()
    };
    store
        .append("s", (0..60).map(|n| NewEvent::new("t", json!(n))).collect())
        .await
        .unwrap();
    app.drain("s");
    within("the backlog to run", app.idle()).await;
    assert_eq!(ran.load(Ordering::SeqCst), 60, "each ran once");
    assert!(
        all(&store, "s")
            .await
            .iter()
            .all(|r| r.processed_by_attempt == Some(1))
    );
    let claims = faults.claims.load(Ordering::SeqCst);
    assert!(
        claims <= 20,
        "RT13: {claims} claims for 60 events, four slots and four places"
    );
}

/// RT13, RT18: drains of sessions whose delayed events come due at the same
/// moment claim side by side, each holding places of the prefetch, not a
/// slot, while the store answers: with two slots (eight places), more than
/// two such claims are in flight at once (with a slot each, the third
/// waited for one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "stalls below three claims in flight on loaded CI machines (twice in four full \
            runs, never here in 185 runs); run with --ignored until the stall is found"]
async fn rt13_claims_at_a_time_hold_places_not_slots_while_the_store_answers() {
    let (store, faults) = faulty(Faults::default());
    let app = builder(&store)
        .concurrency(2)
        .handler("t", |_, _: Value| async { Ok::<(), HandlerError>(()) })
        .build()
        .unwrap();
    for s in 0..8 {
        let later = NewEvent::new("t", json!(s)).not_before(T0 + 200);
        store.append(&format!("s{s}"), vec![later]).await.unwrap();
        app.drain(&format!("s{s}"));
    }
    // Each drain's first claim (greedy: it takes a slot and every free
    // place) finds its event not due: Busy. Its claims come again at the
    // time, light: the gate holds them. Counting claims is not enough to
    // know every first claim has been answered (on a slow machine one
    // drain claims again before another first claims, and a greedy claim
    // under the gate takes every place left): wait for each session.
    common::wait_until("every drain was told Busy", || {
        let faults = faults.clone();
        async move { faults.answered.lock().unwrap().len() == 8 }
    })
    .await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *faults.claim_gate.lock().unwrap() = Some(gate.clone());
    common::wait_until("three claims in flight at once, over two slots", || {
        let faults = faults.clone();
        async move { faults.claiming.load(Ordering::SeqCst) >= 3 }
    })
    .await;
    *faults.claim_gate.lock().unwrap() = None;
    gate.add_permits(64);
    app.shutdown(Duration::from_secs(5)).await;
}

/// RT13, RT18: drains whose delayed events come due at one moment each
/// wait for a share of the prefetch big enough to hand out their session's
/// due events in one claim. Twenty-four sessions of six events due
/// together, their claims held back until three are in flight at once
/// (the default limit: sixteen slots, sixty-four places): every session
/// is drained by its first claim (`Busy`) and one more. (When a claim at a
/// time took one place and half of the free ones, the drains that came
/// last got one place each and claimed their events one by one: on Redis,
/// 100 sessions' delayed events started 300–900 ms late.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt13_drains_due_together_take_their_events_in_one_claim_each() {
    const SESSIONS: usize = 24;
    const EACH: usize = 6;
    let (store, faults, clock) = faulty_with_clock(Faults::default());
    let ran = Arc::new(AtomicU32::new(0));
    let app = {
        let ran = ran.clone();
        builder(&store)
            .handler("t", move |_, _: Value| {
                let ran = ran.clone();
                async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), HandlerError>(())
                }
            })
            .build()
            .unwrap()
    };
    for s in 0..SESSIONS {
        let later = (0..EACH)
            .map(|n| NewEvent::new("t", json!(n)).not_before(T0 + 100))
            .collect();
        store.append(&format!("s{s}"), later).await.unwrap();
        app.drain(&format!("s{s}"));
    }
    common::wait_until("every drain was told Busy", || {
        let faults = faults.clone();
        async move { faults.answered.lock().unwrap().len() == SESSIONS }
    })
    .await;
    let before = faults.claims.load(Ordering::SeqCst) as usize;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *faults.claim_gate.lock().unwrap() = Some(gate.clone());
    // The drains claim again at the due time, by the wall clock (100 ms).
    clock.advance(100);
    common::wait_until("three claims in flight at once", || {
        let faults = faults.clone();
        async move { faults.claiming.load(Ordering::SeqCst) >= 3 }
    })
    .await;
    *faults.claim_gate.lock().unwrap() = None;
    gate.add_permits(SESSIONS * EACH);
    common::wait_until("every event ran", || {
        let ran = ran.clone();
        async move { ran.load(Ordering::SeqCst) as usize == SESSIONS * EACH }
    })
    .await;
    let claims = faults.claims.load(Ordering::SeqCst) as usize - before;
    assert!(
        claims <= SESSIONS,
        "RT13: {claims} claims for {SESSIONS} sessions of {EACH} due events"
    );
    app.shutdown(Duration::from_secs(5)).await;
}
