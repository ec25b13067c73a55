//! Runtime behaviour (SPEC §9) on the in-memory store. Time that matters to
//! the store (leases, retry times) is a `ManualClock` the tests move; waits
//! are for conditions, with a timeout.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2_core::{
    ClaimOutcome, ClaimRequest, Lease, ManualClock, MemoryStore, NewEvent, Store, StoreOptions,
};
use a2_runtime::{App, Backoff, HandlerError, Outcome, event};
use serde_json::{Value, json};
use tokio::sync::Notify;

mod common;

use common::{T0, all, builder, row, wait_until, within};

fn store_with(clock: &Arc<ManualClock>) -> Arc<dyn Store> {
    Arc::new(MemoryStore::new(
        StoreOptions::default().with_clock(clock.clone()),
    ))
}

fn setup() -> (Arc<ManualClock>, Arc<dyn Store>) {
    let clock = Arc::new(ManualClock::new(T0));
    let store = store_with(&clock);
    (clock, store)
}

fn msg(t: &str, payload: Value) -> NewEvent {
    NewEvent::new(t, payload)
}

/// RT3 + §1 lanes: events of one lane are handled one after another in
/// index order, while lanes run concurrently; every event is processed and
/// its returned event appended with the attempt as cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt3_lanes_keep_index_order_while_lanes_run_concurrently() {
    let (_clock, store) = setup();
    let seen: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let in_flight = Arc::new(AtomicU32::new(0));
    let max_in_flight = Arc::new(AtomicU32::new(0));
    let app = {
        let seen = seen.clone();
        let (in_flight, max_in_flight) = (in_flight.clone(), max_in_flight.clone());
        builder(&store)
            .concurrency(8)
            .handler("work", move |ctx, _: Value| {
                let seen = seen.clone();
                let (in_flight, max_in_flight) = (in_flight.clone(), max_in_flight.clone());
                async move {
                    let lane = ctx.lane().unwrap_or_default().to_owned();
                    seen.lock().unwrap().push((lane, ctx.index()));
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    max_in_flight.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(0..4))).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    Ok(event("done", json!({ "of": ctx.index() }))?.settled())
                }
            })
            .build()
            .unwrap()
    };
    let batch: Vec<NewEvent> = (0..60)
        .map(|i| msg("work", json!(i)).lane(format!("lane-{}", i % 4)))
        .collect();
    app.append("s", batch).await.unwrap();
    within("drain", app.idle()).await;

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 60, "each event handled once");
    for lane in 0..4 {
        let name = format!("lane-{lane}");
        let order: Vec<u64> = seen
            .iter()
            .filter(|(l, _)| *l == name)
            .map(|(_, i)| *i)
            .collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "lane {name} ran out of order");
    }
    assert!(
        max_in_flight.load(Ordering::SeqCst) <= 8,
        "concurrency limit kept"
    );
    let rows = all(&store, "s").await;
    assert_eq!(rows.len(), 120);
    for r in rows.iter().filter(|r| r.event.event_type == "work") {
        assert_eq!(r.processed_by_attempt, Some(1));
        assert_eq!(r.returned_event_ids.len(), 1);
        let done = rows
            .iter()
            .find(|d| d.event.id == r.returned_event_ids[0])
            .unwrap();
        assert_eq!(
            done.event.cause.map(|c| (c.index, c.attempt)),
            Some((r.index(), 1))
        );
    }
    let stats = app.stats();
    assert_eq!((stats.claimed, stats.completed, stats.failed), (60, 60, 0));
}

/// RT3 + F6: a failing handler is retried from the backoff's `retry_at`,
/// computed from the store clock; the event is not claimed before then.
#[tokio::test]
async fn rt3_retries_wait_for_exponential_backoff_on_the_store_clock() {
    let (clock, store) = setup();
    let app = builder(&store)
        .backoff(
            Backoff::exponential(Duration::from_secs(1), Duration::from_secs(10)).with_jitter(0.0),
        )
        .max_failures(5)
        .handler("flaky", |ctx, _: Value| async move {
            if ctx.attempt() < 3 {
                return Err(HandlerError::new(format!(
                    "attempt {} failed",
                    ctx.attempt()
                )));
            }
            Ok(())
        })
        .build()
        .unwrap();
    app.append("s", vec![msg("flaky", json!({}))])
        .await
        .unwrap();

    wait_until("first failure", || async {
        row(&store, "s", 1).await.failure_count == 1
    })
    .await;
    let r = row(&store, "s", 1).await;
    assert_eq!(r.retry_at, Some(T0 + 1_000));
    assert_eq!(r.last_error.as_deref(), Some("attempt 1 failed"));

    clock.advance(999);
    // The drain keeps asking (Busy, polled at least every poll interval);
    // a claim that started after the clock moved finds nothing yet.
    let asked = app.stats().claim_calls;
    wait_until("two more claims", || async {
        app.stats().claim_calls >= asked + 2
    })
    .await;
    assert_eq!(row(&store, "s", 1).await.attempt_count, 1);

    clock.advance(1);
    wait_until("second failure", || async {
        row(&store, "s", 1).await.failure_count == 2
    })
    .await;
    assert_eq!(row(&store, "s", 1).await.retry_at, Some(T0 + 1_000 + 2_000));

    clock.advance(2_000);
    wait_until("processed", || async {
        row(&store, "s", 1).await.processed_at.is_some()
    })
    .await;
    let r = row(&store, "s", 1).await;
    assert_eq!((r.processed_by_attempt, r.failure_count), (Some(3), 2));
    within("idle", app.idle()).await;
    let stats = app.stats();
    assert_eq!((stats.claimed, stats.failed, stats.completed), (3, 2, 1));
}

/// RT3 + F6: after `max_failures` the event is dead-lettered, which blocks
/// the rest of its lane, and the drain settles.
#[tokio::test]
async fn rt3_dead_letters_after_max_failures_and_blocks_the_lane() {
    let (_clock, store) = setup();
    let reports = Arc::new(Mutex::new(Vec::new()));
    let app = {
        let reports = reports.clone();
        builder(&store)
            .max_failures(3)
            .handler("job", |_ctx, p: Value| async move {
                if p["poison"] == true {
                    return Err("poisoned input".into());
                }
                Ok(())
            })
            .on_attempt(move |r| reports.lock().unwrap().push(r.outcome.clone()))
            .build()
            .unwrap()
    };
    app.append(
        "s",
        vec![
            msg("job", json!({"poison": true})).lane("l"),
            msg("job", json!({})).lane("l"),
            msg("job", json!({})).lane("other"),
        ],
    )
    .await
    .unwrap();
    within("idle", app.idle()).await;

    let rows = all(&store, "s").await;
    assert!(rows[0].failed_at.is_some());
    assert_eq!(rows[0].failure_count, 3);
    assert_eq!(rows[0].last_error.as_deref(), Some("poisoned input"));
    assert!(
        rows[1].is_pending() && rows[1].attempt_count == 0,
        "lane blocked"
    );
    assert!(rows[2].processed_at.is_some(), "other lane unaffected");
    let stats = app.stats();
    assert_eq!(
        (stats.failed, stats.dead_lettered, stats.completed),
        (2, 1, 1)
    );
    let reports = reports.lock().unwrap();
    assert!(
        reports
            .iter()
            .any(|o| matches!(o, Outcome::DeadLettered { failures: 3, .. }))
    );
}

/// RT3: a panic in a handler is an error like any other.
#[tokio::test]
async fn rt3_a_panic_fails_the_attempt_with_its_message() {
    let (_clock, store) = setup();
    let app = builder(&store)
        .handler("job", |ctx, _: Value| async move {
            if ctx.attempt() == 1 {
                panic!("kaboom");
            }
            Ok(())
        })
        .build()
        .unwrap();
    app.append("s", vec![msg("job", json!(null))])
        .await
        .unwrap();
    within("idle", app.idle()).await;
    let r = row(&store, "s", 1).await;
    assert_eq!(r.processed_by_attempt, Some(2));
    assert_eq!(r.last_error.as_deref(), Some("handler panicked: kaboom"));
}

/// Typed payloads: a payload that does not decode fails the attempt.
#[tokio::test]
async fn typed_payload_that_does_not_decode_fails_the_attempt() {
    #[derive(serde::Deserialize)]
    struct Order {
        #[allow(dead_code)]
        qty: u32,
    }
    let (_clock, store) = setup();
    let app = builder(&store)
        .max_failures(1)
        .handler("order", |_ctx, _o: Order| async move { Ok(()) })
        .build()
        .unwrap();
    app.append("s", vec![msg("order", json!({"qty": "many"}))])
        .await
        .unwrap();
    within("idle", app.idle()).await;
    let r = row(&store, "s", 1).await;
    assert!(r.failed_at.is_some());
    assert!(r.last_error.unwrap().contains("does not decode"));
}

/// RT1: without a handler or fallback an event is completed with no
/// output; a fallback sees every type without a handler.
#[tokio::test]
async fn fallback_handles_unregistered_types() {
    let (_clock, store) = setup();
    let plain = builder(&store).build().unwrap();
    plain
        .append("a", vec![msg("anything", json!(1))])
        .await
        .unwrap();
    within("idle", plain.idle()).await;
    assert_eq!(row(&store, "a", 1).await.processed_by_attempt, Some(1));

    let app = builder(&store)
        .handler("known", |_ctx, _: Value| async move { Ok(()) })
        .fallback(|ctx, _: Value| async move {
            Ok(event("seen", json!({ "type": ctx.event_type() }))?.settled())
        })
        .build()
        .unwrap();
    app.append("b", vec![msg("known", json!(1)), msg("other", json!(2))])
        .await
        .unwrap();
    within("idle", app.idle()).await;
    let rows = all(&store, "b").await;
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[2].event.payload, json!({"type": "other"}));
    assert_eq!(rows[2].event.cause.map(|c| c.index), Some(2));
}

/// Adds a permit when dropped: held by a handler's future, it shows the
/// future was dropped (the attempt cancelled).
struct DropFlag(Arc<tokio::sync::Semaphore>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.add_permits(1);
    }
}

/// RT3 + RN1: when another worker takes over an expired lease, the renewal
/// reports it and the running handler is cancelled: dropped, and its
/// context's signal fires for work it spawned.
#[tokio::test]
async fn rt3_a_handler_whose_lease_is_lost_is_cancelled() {
    let (clock, store) = setup();
    let started = Arc::new(Notify::new());
    let dropped = Arc::new(tokio::sync::Semaphore::new(0));
    let heard = Arc::new(Notify::new());
    let app = {
        let (started, dropped, heard) = (started.clone(), dropped.clone(), heard.clone());
        builder(&store)
            .lease_ttl(Duration::from_secs(1))
            .handler("slow", move |ctx, _: Value| {
                let (started, flag) = (started.clone(), DropFlag(dropped.clone()));
                // Work the handler spawned outlives it and hears the signal.
                let heard = heard.clone();
                tokio::spawn(async move {
                    ctx.cancelled().await;
                    heard.notify_one();
                });
                async move {
                    let _flag = flag;
                    started.notify_one();
                    std::future::pending::<()>().await;
                    Ok(())
                }
            })
            .build()
            .unwrap()
    };
    app.append("s", vec![msg("slow", json!(null))])
        .await
        .unwrap();
    within("handler start", started.notified()).await;

    clock.advance(5_000);
    let taken = store
        .claim_available(ClaimRequest {
            session: "s".into(),
            holder: "other".into(),
            lease: Lease::Ttl(60_000),
            exclude_indexes: vec![],
            limit: 10,
        })
        .await
        .unwrap();
    assert!(matches!(&taken, ClaimOutcome::Claimed { events: e, .. } if e[0].attempt_count == 2));
    within("cancellation", dropped.acquire())
        .await
        .unwrap()
        .forget();
    within("the spawned work hears the signal", heard.notified()).await;
    wait_until("lost counted", || async { app.stats().lost == 1 }).await;
    let r = row(&store, "s", 1).await;
    assert_eq!(r.claim_holder.as_deref(), Some("other"));
    assert!(r.is_pending());
}

/// RT3 + CO5: a result that arrives after a newer attempt took over is
/// discarded; its returned events are never appended.
#[tokio::test]
async fn rt3_a_late_result_is_discarded() {
    let (clock, store) = setup();
    let started = Arc::new(Notify::new());
    let go = Arc::new(Notify::new());
    let app = {
        let (started, go) = (started.clone(), go.clone());
        builder(&store)
            // No renewal during this test (the renew interval is real time,
            // the lease store time): the result races the takeover.
            .lease_ttl(Duration::from_secs(7_200))
            .renew_interval(Duration::from_secs(3_600))
            .handler("slow", move |_ctx, _: Value| {
                let (started, go) = (started.clone(), go.clone());
                async move {
                    started.notify_one();
                    go.notified().await;
                    Ok(event("late", json!(null))?.settled())
                }
            })
            .build()
            .unwrap()
    };
    app.append("s", vec![msg("slow", json!(null))])
        .await
        .unwrap();
    within("handler start", started.notified()).await;
    clock.advance(7_300_000);
    let taken = store
        .claim_available(ClaimRequest {
            session: "s".into(),
            holder: "other".into(),
            lease: Lease::Ttl(60_000),
            exclude_indexes: vec![],
            limit: 10,
        })
        .await
        .unwrap();
    assert!(matches!(taken, ClaimOutcome::Claimed { events: _, .. }));
    go.notify_one();
    wait_until("superseded", || async { app.stats().superseded == 1 }).await;
    let rows = all(&store, "s").await;
    assert_eq!(rows.len(), 1, "the late event was not appended");
    assert!(rows[0].is_pending());
    assert_eq!(rows[0].attempt_count, 2);
}

/// RT6 + RL1: shutdown stops claiming, lets a quick handler finish, and
/// releases the leases of handlers still running at the deadline, so another
/// worker claims them at once (without the clock moving). Those handlers
/// are dropped, and their contexts' signal fires for work they spawned.
#[tokio::test]
async fn rt6_shutdown_waits_then_releases_leases_of_the_rest() {
    let (_clock, store) = setup();
    let started = Arc::new(tokio::sync::Semaphore::new(0));
    let heard = Arc::new(tokio::sync::Semaphore::new(0));
    let dropped = Arc::new(tokio::sync::Semaphore::new(0));
    let app = {
        let (started, heard, dropped) = (started.clone(), heard.clone(), dropped.clone());
        builder(&store)
            .concurrency(4)
            .handler("stuck", move |ctx, _: Value| {
                let (started, heard) = (started.clone(), heard.clone());
                let gone = DropFlag(dropped.clone());
                // Work the handler spawned hears the signal when the
                // deadline passes.
                tokio::spawn(async move {
                    ctx.cancelled().await;
                    heard.add_permits(1);
                });
                async move {
                    let _gone = gone;
                    started.add_permits(1);
                    std::future::pending::<()>().await;
                    Ok(())
                }
            })
            .handler("quick", |_ctx, _: Value| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(())
            })
            .build()
            .unwrap()
    };
    app.append(
        "s",
        vec![
            msg("stuck", json!(1)),
            msg("stuck", json!(2)),
            msg("quick", json!(3)),
        ],
    )
    .await
    .unwrap();
    within("both started", started.acquire_many(2))
        .await
        .unwrap()
        .forget();

    let report = within("shutdown", app.shutdown(Duration::from_millis(300))).await;
    assert!(!report.finished_in_time);
    assert_eq!(report.released, 2);
    within(
        "both stuck handlers' spawned work hears the signal",
        heard.acquire_many(2),
    )
    .await
    .unwrap()
    .forget();
    within("both stuck handlers are dropped", dropped.acquire_many(2))
        .await
        .unwrap()
        .forget();
    let rows = all(&store, "s").await;
    assert!(rows[2].processed_at.is_some(), "the quick handler finished");
    for r in &rows[..2] {
        assert!(r.is_pending() && r.claim_holder.is_none() && r.attempt_count == 1);
    }
    // Another worker takes them over at once: a new attempt each.
    let taken = store
        .claim_available(ClaimRequest {
            session: "s".into(),
            holder: "next".into(),
            lease: Lease::Ttl(1_000),
            exclude_indexes: vec![],
            limit: 10,
        })
        .await
        .unwrap();
    let ClaimOutcome::Claimed { events, .. } = taken else {
        panic!("not claimable: {taken:?}")
    };
    assert_eq!(
        events.iter().map(|e| e.attempt_count).collect::<Vec<_>>(),
        [2, 2]
    );
    // Appends after shutdown are stored, not drained.
    app.append("s", vec![msg("quick", json!(4))]).await.unwrap();
    assert_eq!(row(&store, "s", 4).await.attempt_count, 0);
}

/// RT6: a shutdown whose handlers finish in time releases nothing.
#[tokio::test]
async fn rt6_shutdown_in_time_completes_running_handlers() {
    let (_clock, store) = setup();
    let started = Arc::new(Notify::new());
    let app = {
        let started = started.clone();
        builder(&store)
            .handler("job", move |_ctx, _: Value| {
                let started = started.clone();
                async move {
                    started.notify_one();
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    Ok(())
                }
            })
            .build()
            .unwrap()
    };
    app.append("s", vec![msg("job", json!(1))]).await.unwrap();
    within("start", started.notified()).await;
    let report = app.shutdown(Duration::from_secs(5)).await;
    assert!(report.finished_in_time);
    assert_eq!(report.released, 0);
    assert_eq!(row(&store, "s", 1).await.processed_by_attempt, Some(1));
}

/// RT2 + C5: a worker finds sessions with pending events and takes over
/// the work of a crashed process once its leases expire.
#[tokio::test]
async fn rt2_worker_takes_over_a_crashed_process_after_lease_expiry() {
    let (clock, store) = setup();
    store
        .append(
            "s",
            vec![
                msg("job", json!(1)).lane("l"),
                msg("job", json!(2)).lane("l"),
            ],
        )
        .await
        .unwrap();
    // A process that claimed and died.
    let claimed = store
        .claim_available(ClaimRequest {
            session: "s".into(),
            holder: "crashed".into(),
            lease: Lease::Ttl(2_000),
            exclude_indexes: vec![],
            limit: 10,
        })
        .await
        .unwrap();
    assert!(matches!(claimed, ClaimOutcome::Claimed { events: ref e, .. } if e.len() == 1));

    let app = builder(&store)
        .handler("job", |_ctx, _: Value| async move { Ok(()) })
        .build()
        .unwrap();
    let worker = tokio::spawn({
        let app = app.clone();
        async move { app.run_worker().await }
    });
    // Before the lease runs out the work stays with the crashed holder:
    // the worker's scan found the session and its drain asked twice
    // (Busy until the lease's expiry, polled every poll interval).
    wait_until("the worker's drain to ask twice", || async {
        app.stats().claim_calls >= 2
    })
    .await;
    assert_eq!(
        row(&store, "s", 1).await.claim_holder.as_deref(),
        Some("crashed")
    );

    clock.advance(2_000);
    wait_until("both processed", || async {
        all(&store, "s")
            .await
            .iter()
            .all(|r| r.processed_at.is_some())
    })
    .await;
    assert_eq!(row(&store, "s", 1).await.processed_by_attempt, Some(2));
    assert_eq!(row(&store, "s", 2).await.processed_by_attempt, Some(1));
    app.shutdown(Duration::from_secs(1)).await;
    within("worker exit", worker).await.unwrap().unwrap();
}

/// RT4 + A7: progress events are caused by the running attempt and settled;
/// a handler reads reducer state and sets presence.
#[tokio::test]
async fn rt4_context_streams_progress_reads_state_and_sets_presence() {
    let (_clock, store) = setup();
    let app = builder(&store)
        .reducer("count", 0u64, |n: &mut u64, e| {
            if e.event_type == "user.message" {
                *n += 1;
            }
        })
        .handler("user.message", |ctx, _: Value| async move {
            for word in ["one ", "two ", "three"] {
                ctx.progress("reply.delta", json!({ "text": word })).await?;
            }
            let count: u64 = ctx.state("count").await?;
            ctx.set_presence(
                "bot",
                BTreeMap::from([("typing".to_owned(), Some(json!(false)))]),
            )
            .await?;
            Ok(event("reply", json!({ "messages_so_far": count }))?.settled())
        })
        .build()
        .unwrap();
    app.append("s", vec![msg("user.message", json!({"text": "hi"}))])
        .await
        .unwrap();
    within("idle", app.idle()).await;

    let rows = all(&store, "s").await;
    let types: Vec<&str> = rows.iter().map(|r| r.event.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "user.message",
            "reply.delta",
            "reply.delta",
            "reply.delta",
            "reply"
        ]
    );
    for r in &rows[1..] {
        assert_eq!(r.event.cause.map(|c| (c.index, c.attempt)), Some((1, 1)));
        assert!(r.processed_at.is_some() && r.attempt_count == 0, "settled");
    }
    assert_eq!(rows[4].event.payload["messages_so_far"], 1);
    assert_eq!(rows[0].returned_event_ids, [rows[4].event.id.clone()]);
    let presence = store.presence_read("s").await.unwrap();
    assert_eq!(presence.len(), 1);
    assert_eq!(
        (presence[0].participant.as_str(), presence[0].field.as_str()),
        ("bot", "typing")
    );
}

/// RT5 + S2: state is the snapshot plus the fold of newer events; a fold
/// over at least `snapshot_every` events writes the snapshot back.
#[tokio::test]
async fn rt5_state_folds_from_the_snapshot_and_writes_it_back() {
    let (_clock, store) = setup();
    let app = builder(&store)
        .snapshot_every(5)
        .reducer("sum", 0i64, |sum: &mut i64, e| {
            *sum += e.payload.as_i64().unwrap_or(0)
        })
        .reducer("raw", json!([]), |list: &mut Value, e| {
            if let Some(items) = list.as_array_mut() {
                items.push(e.payload.clone());
            }
        })
        .build()
        .unwrap();
    let settled = |n: i64| msg("n", json!(n)).settled();
    app.append("s", (1..=12).map(settled).collect())
        .await
        .unwrap();

    assert_eq!(app.state::<i64>("s", "sum").await.unwrap(), 78);
    let snaps = store.list_snapshots("s").await.unwrap();
    assert_eq!(
        snaps
            .iter()
            .map(|s| (s.reducer.as_str(), s.index))
            .collect::<Vec<_>>(),
        [("sum", 12)]
    );

    app.append("s", (13..=15).map(settled).collect())
        .await
        .unwrap();
    assert_eq!(app.state::<i64>("s", "sum").await.unwrap(), 120);
    // Three events folded: below the threshold, the snapshot stays.
    let read = store.read_state("s", "sum").await.unwrap();
    assert_eq!(
        read.snapshot.map(|s| (s.index, s.state)),
        Some((12, json!(78)))
    );
    assert_eq!(read.events.len(), 3);

    let raw = app.state_json("s", "raw").await.unwrap();
    assert_eq!(raw.as_array().map(Vec::len), Some(15));
    assert!(app.state::<i64>("s", "missing").await.is_err());
}

/// RT3: claimed events run concurrently up to the limit: two handlers that
/// each wait for the other can only finish when both run at once; a third
/// waits for a free slot.
#[tokio::test]
async fn rt3_claimed_events_run_concurrently_up_to_the_limit() {
    let (_clock, store) = setup();
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let in_flight = Arc::new(AtomicU32::new(0));
    let max_in_flight = Arc::new(AtomicU32::new(0));
    let app = {
        let (in_flight, max_in_flight) = (in_flight.clone(), max_in_flight.clone());
        builder(&store)
            .concurrency(2)
            .handler("pair", move |ctx, _: Value| {
                let barrier = barrier.clone();
                let (in_flight, max_in_flight) = (in_flight.clone(), max_in_flight.clone());
                async move {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    max_in_flight.fetch_max(now, Ordering::SeqCst);
                    if ctx.index() <= 2 {
                        barrier.wait().await;
                    }
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }
            })
            .build()
            .unwrap()
    };
    let batch = (0..3).map(|i| msg("pair", json!(i))).collect();
    app.append("s", batch).await.unwrap();
    within("all three processed", app.idle()).await;
    assert!(
        all(&store, "s")
            .await
            .iter()
            .all(|r| r.processed_by_attempt == Some(1))
    );
    assert_eq!(max_in_flight.load(Ordering::SeqCst), 2);
}

/// RT2: an append to a session whose drain is busy running a handler is
/// picked up by that drain at once, not after the handler finishes.
#[tokio::test]
async fn rt2_an_append_reaches_a_running_drain() {
    let (_clock, store) = setup();
    let second_started = Arc::new(Notify::new());
    let first_started = Arc::new(Notify::new());
    let app = {
        let (first, second) = (first_started.clone(), second_started.clone());
        builder(&store)
            .handler("first", move |_ctx, _: Value| {
                let (first, second) = (first.clone(), second.clone());
                async move {
                    first.notify_one();
                    // Finishes only once the later event is running.
                    second.notified().await;
                    Ok(())
                }
            })
            .handler("second", move |_ctx, _: Value| {
                let second = second_started.clone();
                async move {
                    second.notify_one();
                    Ok(())
                }
            })
            .build()
            .unwrap()
    };
    app.append("s", vec![msg("first", json!(1))]).await.unwrap();
    within("first start", first_started.notified()).await;
    app.append("s", vec![msg("second", json!(2))])
        .await
        .unwrap();
    within("both processed", app.idle()).await;
    let rows = all(&store, "s").await;
    assert!(rows.iter().all(|r| r.processed_by_attempt == Some(1)));
}

/// A panicking observer does not wedge the drain: the attempt's outcome was
/// already recorded, and the next events are still processed.
#[tokio::test]
async fn a_panicking_observer_does_not_stop_the_drain() {
    let (_clock, store) = setup();
    let app = builder(&store)
        .handler("job", |_ctx, _: Value| async move { Ok(()) })
        .on_attempt(|r| {
            if r.index == 1 {
                panic!("observer bug");
            }
        })
        .build()
        .unwrap();
    let batch = (0..3).map(|i| msg("job", json!(i)).lane("l")).collect();
    app.append("s", batch).await.unwrap();
    within("idle", app.idle()).await;
    assert!(
        all(&store, "s")
            .await
            .iter()
            .all(|r| r.processed_by_attempt == Some(1))
    );
}

/// A handler that fails while `broken` is set, and records what it handled.
fn flaky(store: &Arc<dyn Store>, broken: &Arc<AtomicBool>, seen: &Arc<Mutex<Vec<u64>>>) -> App {
    let (broken, seen) = (broken.clone(), seen.clone());
    builder(store)
        .max_failures(2)
        .handler("job", move |ctx, _: Value| {
            let (broken, seen) = (broken.clone(), seen.clone());
            async move {
                if broken.load(Ordering::SeqCst) {
                    return Err("the service it calls is down".into());
                }
                seen.lock().unwrap().push(ctx.index());
                Ok(())
            }
        })
        .build()
        .unwrap()
}

/// Appends a poisoned lane head and one event behind it, and lets `app`
/// dead-letter the head.
async fn dead_head(app: &App, store: &Arc<dyn Store>) {
    app.append(
        "s",
        vec![
            msg("job", json!(1)).lane("l"),
            msg("job", json!(2)).lane("l"),
        ],
    )
    .await
    .unwrap();
    within("idle", app.idle()).await;
    let head = row(store, "s", 1).await;
    assert_eq!((head.failure_count, head.attempt_count), (2, 2));
    assert!(head.failed_at.is_some(), "dead-lettered");
    assert!(row(store, "s", 2).await.is_pending(), "its lane is blocked");
}

/// RV2, PS2, RT2: a dead letter revived by another process (an operator's
/// `a2 revive`) is taken up by a running worker through its wake-up alone
/// (its listing interval is an hour), succeeds now that the handler works,
/// and its lane follows in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rv2_a_revived_dead_letter_is_processed_by_a_running_worker() {
    let (_clock, store) = setup();
    let broken = Arc::new(AtomicBool::new(true));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = flaky(&store, &broken, &seen);
    dead_head(&app, &store).await;

    broken.store(false, Ordering::SeqCst);
    let handled: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let worker = {
        let (broken, handled) = (broken.clone(), handled.clone());
        let app = builder(&store)
            .poll_interval(Duration::from_secs(3_600))
            .handler("job", move |ctx, _: Value| {
                let (broken, handled) = (broken.clone(), handled.clone());
                async move {
                    assert!(!broken.load(Ordering::SeqCst));
                    let session = ctx.session().to_owned();
                    handled.lock().unwrap().push((session, ctx.index()));
                    Ok(())
                }
            })
            .build()
            .unwrap();
        Arc::new(app)
    };
    let running = {
        let worker = worker.clone();
        tokio::spawn(async move { worker.run_worker().await })
    };
    // Once a probe is handled, the worker loop runs and listens for
    // wake-ups (it subscribes before its first listing).
    store
        .append("probe", vec![msg("job", json!(0))])
        .await
        .unwrap();
    wait_until("the probe is handled", || async {
        row(&store, "probe", 1).await.processed_at.is_some()
    })
    .await;

    let revived = store.revive("s", 1).await.unwrap();
    assert!(revived.is_revived(), "{revived:?}");
    wait_until("the lane is drained", || async {
        all(&store, "s")
            .await
            .iter()
            .all(|r| r.processed_at.is_some())
    })
    .await;
    let head = row(&store, "s", 1).await;
    assert_eq!(
        (
            head.processed_by_attempt,
            head.failure_count,
            head.failed_at
        ),
        (Some(3), 0, None),
        "processed by the attempt after the dead one"
    );
    let handled = handled.lock().unwrap().clone();
    let expected = [("probe", 1), ("s", 1), ("s", 2)].map(|(s, i)| (s.to_owned(), i));
    assert_eq!(handled, expected, "the probe, then the lane in order");
    assert!(seen.lock().unwrap().is_empty(), "only the worker ran them");
    within("shutdown", worker.shutdown(Duration::from_secs(1))).await;
    within("the worker loop ends", running)
        .await
        .unwrap()
        .unwrap();
}

/// RV2, RT2: `App::revive` drains the session in this process at once; a
/// second revive is `NotDeadLettered` and runs nothing again.
#[tokio::test]
async fn rv2_app_revive_drains_the_session_in_process() {
    let (_clock, store) = setup();
    let broken = Arc::new(AtomicBool::new(true));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = flaky(&store, &broken, &seen);
    dead_head(&app, &store).await;
    broken.store(false, Ordering::SeqCst);
    let revived = app.revive("s", 1).await.unwrap();
    assert!(revived.is_revived(), "{revived:?}");
    within("idle", app.idle()).await;
    assert_eq!(*seen.lock().unwrap(), [1, 2]);
    assert!(
        all(&store, "s")
            .await
            .iter()
            .all(|r| r.processed_at.is_some())
    );
    let again = app.revive("s", 1).await.unwrap();
    assert!(!again.is_revived(), "RV3: {again:?}");
    within("idle", app.idle()).await;
    assert_eq!(*seen.lock().unwrap(), [1, 2], "nothing ran again");
}

/// RT15, CL3: the session is closed while a handler runs (the user closed
/// the chat as the agent finished its reply): the handler's progress
/// append fails with `SessionClosed`, its returned events are dropped, and
/// the event settles instead of being retried forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt15_a_handler_that_outlives_the_close_of_its_session_settles_its_event() {
    let (_clock, store) = setup();
    let started = Arc::new(Notify::new());
    let closed = Arc::new(Notify::new());
    let progress = Arc::new(Mutex::new(None));
    let app = builder(&store)
        .handler("ask", {
            let (started, closed, progress) = (started.clone(), closed.clone(), progress.clone());
            move |ctx, _: Value| {
                let (started, closed, progress) =
                    (started.clone(), closed.clone(), progress.clone());
                async move {
                    started.notify_one();
                    closed.notified().await;
                    let late = ctx.append(vec![msg("token", json!("…"))]).await;
                    *progress.lock().unwrap() = Some(late.map_err(|e| e.code()));
                    Ok(vec![msg("reply", json!("done"))])
                }
            }
        })
        .build()
        .unwrap();
    app.append("chat", vec![msg("ask", json!("hi"))])
        .await
        .unwrap();
    within("the handler starts", started.notified()).await;
    store.close_session("chat").await.unwrap();
    closed.notify_one();
    within("idle", app.idle()).await;
    assert_eq!(
        *progress.lock().unwrap(),
        Some(Err(a2_core::ErrorCode::SessionClosed)),
        "RT15: the progress append is refused"
    );
    let rows = all(&store, "chat").await;
    assert_eq!(rows.len(), 1, "RT15: nothing appended after the close");
    assert_eq!(
        rows[0].processed_by_attempt,
        Some(1),
        "RT15: settled at once"
    );
    assert!(rows[0].returned_event_ids.is_empty());
    app.shutdown(Duration::from_secs(5)).await;
}

/// RT16: a worker keeps the newest `keep_last` events of the sessions it
/// drains, writing each reducer's snapshot first, so state still folds;
/// events processed longer ago than `max_age` go too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt16_retention_keeps_the_last_events_and_the_state() {
    let (clock, store) = setup();
    let app = builder(&store)
        .handler("job", |_, _: Value| async { Ok(()) })
        .reducer("count", 0u64, |n: &mut u64, _| *n += 1)
        .retention(a2_runtime::Retention::keep_last(10).max_age(Duration::from_secs(3_600)))
        .build()
        .unwrap();
    for chunk in 0..5 {
        let batch = (0..40).map(|n| msg("job", json!(chunk * 40 + n))).collect();
        app.append("chat", batch).await.unwrap();
        within("idle", app.idle()).await;
    }
    // Trims come every 64 completions, in tasks of their own: at most
    // 10 + 64 events stay.
    wait_until("RT16: the newest 10 kept, give or take a step", || {
        let store = store.clone();
        async move {
            let listed = store
                .list_sessions(a2_core::ListSessionsOptions::new(10))
                .await
                .unwrap();
            let chat = &listed.sessions[0];
            chat.event_count == 200 && chat.event_count - chat.first_index < 10 + 64
        }
    })
    .await;
    let count: u64 = app.state("chat", "count").await.unwrap();
    assert_eq!(count, 200, "RT16: the state still counts every event");
    // An hour later, what was processed before goes; new work is kept.
    clock.advance(3_600_001);
    app.append("chat", vec![msg("job", json!("late"))])
        .await
        .unwrap();
    within("idle", app.idle()).await;
    wait_until("RT16: max_age", || {
        let store = store.clone();
        async move {
            let listed = store
                .list_sessions(a2_core::ListSessionsOptions::new(10))
                .await
                .unwrap();
            listed.sessions[0].first_index == 201
        }
    })
    .await;
    assert_eq!(app.state::<u64>("chat", "count").await.unwrap(), 201);
    for bad in [
        a2_runtime::Retention::keep_last(0),
        a2_runtime::Retention::default(),
    ] {
        let built = builder(&store).retention(bad).build();
        assert_eq!(
            built.err().map(|e| e.code()),
            Some(a2_core::ErrorCode::InvalidArgument)
        );
    }
    app.shutdown(Duration::from_secs(5)).await;
}

/// RT16, TR2: keep-last retention alone (no `max_age`) trims up to an
/// unsettled event instead of putting the whole trim off: 1 000 settled
/// events, then `stuck` (a dead letter, or an event delayed for days,
/// which leaves `stuck_pending` events pending), then 2 000 processed jobs
/// with `keep_last(50)` leave the log trimmed to exactly the stuck event —
/// 2 001 events kept, not 3 001.
async fn rt16_keep_last_trims_up_to(stuck: NewEvent, stuck_pending: u64) {
    let (_clock, store) = setup();
    let app = builder(&store)
        .max_failures(1)
        .handler("job", |_, _: Value| async { Ok(()) })
        .handler("poison", |_, _: Value| async {
            Err::<(), _>(HandlerError::new("poisoned"))
        })
        .reducer("count", 0u64, |n: &mut u64, _| *n += 1)
        .retention(a2_runtime::Retention::keep_last(50))
        .build()
        .unwrap();
    // Waits until the session holds `events` and only the stuck event is
    // unsettled (a drain waiting for a delayed event never goes idle).
    let settled = |events: u64, pending: u64| {
        let store = store.clone();
        async move {
            wait_until("the jobs are processed", || {
                let store = store.clone();
                async move {
                    let listed = store
                        .list_sessions(a2_core::ListSessionsOptions::new(10))
                        .await
                        .unwrap();
                    let s = &listed.sessions[0];
                    s.event_count == events && s.pending_count == pending
                }
            })
            .await;
        }
    };
    let jobs = |from: u64| (from..from + 100).map(|n| msg("job", json!(n))).collect();
    for chunk in 0..10 {
        app.append("s", jobs(chunk * 100)).await.unwrap();
        settled(chunk * 100 + 100, 0).await;
    }
    app.append("s", vec![stuck]).await.unwrap();
    settled(1_001, stuck_pending).await;
    for chunk in 10..30 {
        app.append("s", jobs(chunk * 100)).await.unwrap();
        settled(chunk * 100 + 101, stuck_pending).await;
    }
    wait_until("RT16: trimmed up to the unsettled event 1 001", || {
        let store = store.clone();
        async move {
            let listed = store
                .list_sessions(a2_core::ListSessionsOptions::new(10))
                .await
                .unwrap();
            let s = &listed.sessions[0];
            s.event_count == 3_001 && s.first_index == 1_001
        }
    })
    .await;
    let stuck = row(&store, "s", 1_001).await;
    assert!(
        stuck.processed_at.is_none(),
        "RT16: never past the unsettled event"
    );
    assert_eq!(
        app.state::<u64>("s", "count").await.unwrap(),
        3_001,
        "RT16: the state still folds every event"
    );
    app.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt16_keep_last_trims_up_to_a_dead_letter() {
    rt16_keep_last_trims_up_to(msg("poison", json!("bad")), 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt16_keep_last_trims_up_to_a_far_future_delayed_event() {
    let days = Duration::from_secs(3 * 86_400);
    rt16_keep_last_trims_up_to(msg("job", json!("later")).delay(days), 1).await;
}

/// RT19, TR3: `App::trim` writes each registered reducer's snapshot at the
/// trim point first, so its state still reads; a plain `Store::trim` past
/// the reducer's snapshot (here: none at all) leaves it `Trimmed`.
#[tokio::test]
async fn tr6_app_trim_keeps_the_reducers_readable_where_a_store_trim_does_not() {
    let (_clock, store) = setup();
    let app = builder(&store)
        .reducer("count", 0u64, |n: &mut u64, _| *n += 1)
        .build()
        .unwrap();
    let notes = |session: &str| {
        let app = app.clone();
        let session = session.to_owned();
        async move {
            let batch = (0..30).map(|n| msg("note", json!(n)).settled()).collect();
            app.append(&session, batch).await.unwrap();
        }
    };
    notes("safe").await;
    notes("unsafe").await;
    let outcome = app.trim("safe", 20).await.unwrap();
    assert_eq!(outcome.first_index, 21);
    assert_eq!(app.state::<u64>("safe", "count").await.unwrap(), 30);
    store.trim("unsafe", 20).await.unwrap();
    let error = app.state::<u64>("unsafe", "count").await.unwrap_err();
    assert_eq!(error.code(), a2_core::ErrorCode::Trimmed, "{error}");
    // A pending event in the range: refused, nothing trimmed (TR2).
    app.append("safe", vec![msg("job", json!("open"))])
        .await
        .unwrap();
    let refused = app.trim("safe", 31).await.unwrap_err();
    assert_eq!(refused.code(), a2_core::ErrorCode::InvalidArgument);
}

/// FK2 through the app: a fork's pending events are its own work. The
/// source's ask was never handled; `App::fork` copies it pending and
/// drains the fork, whose handler replies there while the source keeps
/// its ask pending and gets no reply.
#[tokio::test]
async fn fk2_app_fork_runs_the_forks_pending_events_in_the_fork() {
    let (_clock, store) = setup();
    store
        .append(
            "chat",
            vec![msg("said", json!("hi")).settled(), msg("ask", json!("q"))],
        )
        .await
        .unwrap();
    let app = builder(&store)
        .handler("ask", |_ctx, q: Value| async move {
            Ok(event("reply", json!({ "to": q }))?.settled())
        })
        .build()
        .unwrap();
    let outcome = app.fork("chat", 2, "branch").await.unwrap();
    assert_eq!(outcome, a2_core::ForkOutcome::Forked { first_index: 1 });
    within("idle", app.idle()).await;
    let branch = all(&store, "branch").await;
    assert_eq!(branch.len(), 3, "the fork's ask was handled in the fork");
    assert_eq!(branch[2].event.payload, json!({"to": "q"}));
    assert_eq!(branch[1].processed_by_attempt, Some(1));
    let chat = all(&store, "chat").await;
    assert_eq!(chat.len(), 2, "the source got no reply");
    assert!(
        chat[1].is_pending(),
        "the source's ask is still its own work"
    );
}

/// RT13 with A13 and EX2: `App::append_with` appends with its options in
/// the same store call (an expected frontier, an expiry), claims the new
/// events for this process as `App::append` does, and refuses an append
/// at another frontier with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt13_append_with_expects_a_frontier_and_still_runs_its_events() {
    let (_clock, store) = setup();
    let app = builder(&store)
        .handler("job", |_ctx, _job: Value| async move {
            Ok(event("done", json!({}))?.settled())
        })
        .build()
        .unwrap();
    let options = a2_core::AppendOptions::new()
        .if_frontier(0)
        .expiry(a2_core::Expiry::ttl(60_000));
    let first = app
        .append_with("s", vec![msg("job", json!(1))], options)
        .await
        .unwrap();
    assert_eq!(first.events[0].event.index, 1);
    wait_until("the job ran", || async { app.stats().completed == 1 }).await;
    let stale = app
        .append_with(
            "s",
            vec![msg("job", json!(2))],
            a2_core::AppendOptions::new().if_frontier(1),
        )
        .await
        .unwrap_err();
    assert_eq!(stale.code(), a2_core::ErrorCode::FrontierMoved, "{stale}");
    assert_eq!(
        all(&store, "s").await.len(),
        2,
        "the job and its result, nothing more"
    );
    let listed = store
        .list_sessions(a2_core::ListSessionsOptions::new(1))
        .await
        .unwrap();
    assert!(
        listed.sessions[0].deadline.is_some(),
        "EX2: the expiry went with it"
    );
}
