//! Cancels and delayed events in the runtime (RT17, RT18): handlers told at
//! once and dropped after the grace, waiting events dropped unrun, delayed
//! events run at their due time, across store instances.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2_core::{CancelOutcome, MemoryStore, NewEvent, Store, StoreOptions};
use a2_runtime::Outcome;
use serde_json::{Value, json};
use tokio::sync::Notify;

mod common;

use common::{all, builder, wait_until, within};

fn msg(t: &str) -> NewEvent {
    NewEvent::new(t, json!({}))
}

/// `builder` with a handler of "remind" that counts its calls; the count.
fn counting(builder: a2_runtime::AppBuilder) -> (a2_runtime::App, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let app = builder
        .handler("remind", {
            let calls = calls.clone();
            move |_ctx, _: Value| {
                let calls = calls.clone();
                async move {
                    calls.fetch_add(1, Ordering::Relaxed);
                    Ok(Vec::<NewEvent>::new())
                }
            }
        })
        .build()
        .unwrap();
    (app, calls)
}

/// RT17: a cancel made through the store (not this application) reaches
/// the running handler through `cancellations()`: its context fires, the
/// handler returns, and the attempt ends as `Cancelled` with nothing
/// recorded (CN2): no returned event, the row as the cancel left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt17_a_running_handler_hears_a_cancel_made_elsewhere_and_records_nothing() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let started = Arc::new(Notify::new());
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let app = builder(&store)
        .cancel_grace(Duration::from_secs(60))
        .on_attempt({
            let outcomes = outcomes.clone();
            move |report| outcomes.lock().unwrap().push(report.outcome.clone())
        })
        .handler("generate", {
            let started = started.clone();
            move |ctx, _: Value| {
                let started = started.clone();
                async move {
                    started.notify_one();
                    ctx.cancelled().await;
                    assert!(ctx.is_cancelled());
                    Ok(vec![msg("reply")])
                }
            }
        })
        .build()
        .unwrap();
    app.append("chat", vec![msg("generate")]).await.unwrap();
    within("the handler starts", started.notified()).await;
    let outcome = store.cancel("chat", 1, Some("stop".into())).await.unwrap();
    assert!(matches!(outcome, CancelOutcome::Cancelled(_)));
    within("idle", app.idle()).await;
    assert_eq!(*outcomes.lock().unwrap(), vec![Outcome::Cancelled]);
    assert_eq!(app.stats().cancelled, 1);
    let rows = all(&store, "chat").await;
    assert_eq!(rows.len(), 1, "RT17: nothing returned is appended");
    assert_eq!(rows[0].cancel_reason.as_deref(), Some("stop"));
    app.shutdown(Duration::from_secs(5)).await;
}

/// RT17: a handler that ignores the signal is dropped once the grace has
/// passed; the attempt is `Cancelled` all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt17_a_handler_that_ignores_the_signal_is_dropped_after_the_grace() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let started = Arc::new(Notify::new());
    let app = builder(&store)
        .cancel_grace(Duration::from_millis(50))
        .handler("stubborn", {
            let started = started.clone();
            move |_ctx, _: Value| {
                let started = started.clone();
                async move {
                    started.notify_one();
                    futures::future::pending::<()>().await;
                    Ok(Vec::<NewEvent>::new())
                }
            }
        })
        .build()
        .unwrap();
    app.append("s", vec![msg("stubborn")]).await.unwrap();
    within("the handler starts", started.notified()).await;
    let outcome = app.cancel("s", 1, None).await.unwrap();
    assert!(outcome.is_cancelled());
    within("dropped after the grace", app.idle()).await;
    assert_eq!(app.stats().cancelled, 1);
    app.shutdown(Duration::from_secs(5)).await;
}

/// RT17: an event claimed with others but still waiting for a slot (RT13)
/// is dropped without running when it is cancelled; the lane it headed
/// moves on (CN1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt17_a_waiting_event_is_dropped_without_running() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let release = Arc::new(Notify::new());
    let ran = Arc::new(Mutex::new(Vec::new()));
    let app = builder(&store)
        .concurrency(1)
        .handler("step", {
            let (release, ran) = (release.clone(), ran.clone());
            move |ctx, _: Value| {
                let (release, ran) = (release.clone(), ran.clone());
                async move {
                    ran.lock().unwrap().push(ctx.index());
                    if ctx.index() == 1 {
                        release.notified().await;
                    }
                    Ok(Vec::<NewEvent>::new())
                }
            }
        })
        .build()
        .unwrap();
    app.append("s", vec![msg("step"), msg("step"), msg("step")])
        .await
        .unwrap();
    wait_until("the first runs", || async {
        !ran.lock().unwrap().is_empty()
    })
    .await;
    let outcome = app.cancel("s", 2, None).await.unwrap();
    assert!(outcome.is_cancelled());
    release.notify_one();
    within("idle", app.idle()).await;
    assert_eq!(*ran.lock().unwrap(), vec![1, 3], "RT17: #2 never ran");
    let rows = all(&store, "s").await;
    assert!(rows[1].cancelled_at.is_some() && rows[2].processed_by_attempt == Some(1));
    app.shutdown(Duration::from_secs(5)).await;
}

/// RT18, DL1: delayed events run at their due time, not before, each once,
/// with no handler call before; an event appended behind a delayed lane
/// head waits for it (DL2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt18_delayed_events_run_at_their_due_time() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let (app, calls) = counting(builder(&store).poll_interval(Duration::from_millis(50)));
    let out = app
        .append(
            "s",
            vec![
                msg("remind").lane("L").delay(Duration::from_millis(300)),
                msg("remind").lane("L"),
                msg("remind").delay(Duration::from_millis(150)),
            ],
        )
        .await
        .unwrap();
    assert!(out.claimed.is_empty(), "DL3: nothing ready at append");
    wait_until("all three ran", || async {
        calls.load(Ordering::Relaxed) == 3
    })
    .await;
    within("idle", app.idle()).await;
    let rows = all(&store, "s").await;
    let due = |i: usize| out.events[i].retry_at.expect("a due time");
    assert!(
        rows[0].first_claimed_at.unwrap() >= due(0),
        "RT18: not before"
    );
    assert!(
        rows[2].first_claimed_at.unwrap() >= due(2),
        "RT18: not before"
    );
    assert!(
        rows[1].first_claimed_at.unwrap() >= rows[0].processed_at.unwrap(),
        "DL2: behind its delayed head"
    );
    assert!(rows.iter().all(|r| r.attempt_count == 1), "each once");
    app.shutdown(Duration::from_secs(5)).await;
}

/// RT18, PS2 on SQLite: a drain waiting for a due time sleeps until it, with
/// no claim meanwhile, though the worker lists every 50 ms: the store
/// pushes wake-ups (new work in the session is announced), so nothing is
/// read while nothing is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt18_a_drain_on_sqlite_asks_nothing_before_its_due_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a2.db");
    let store: Arc<dyn Store> =
        Arc::new(a2_sqlite::SqliteStore::open(&path, a2_sqlite::SqliteOptions::default()).unwrap());
    assert!(store.pushes_wakeups(), "PS2: SQLite pushes");
    let (app, ran) = counting(builder(&store).poll_interval(Duration::from_millis(50)));
    let worker = tokio::spawn({
        let app = app.clone();
        async move { app.run_worker().await }
    });
    app.ready().await;
    store
        .append("s", vec![msg("remind").delay(Duration::from_millis(1_500))])
        .await
        .unwrap();
    // The append is announced; the drain claims once, hears `Busy`.
    wait_until("the first claim", || async { app.stats().claim_calls >= 1 }).await;
    let asked = app.stats().claim_calls;
    wait_until("the handler ran", || async {
        ran.load(Ordering::Relaxed) == 1
    })
    .await;
    // The claim at the due time, and the drain's last (RT18) when it came
    // before this look.
    let claims = app.stats().claim_calls - asked;
    assert!(
        claims <= 2,
        "RT18: {claims} claims while the event waited 1.5 s (polling every 50 ms would be ~30)"
    );
    app.shutdown(Duration::from_secs(5)).await;
    worker.abort();
}

/// RT18, C7: a drain whose claim named when the next delayed event comes
/// due sleeps until then once its attempts are done: each delayed event
/// costs the one claim that hands it out (and the drain's first, which
/// hears `Busy`), not a second claim to learn the next due time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt18_each_delayed_event_costs_one_claim() {
    const N: u64 = 6;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let (app, ran) = counting(builder(&store));
    let events = (1..=N)
        .map(|k| msg("remind").delay(Duration::from_millis(100 * k)))
        .collect();
    app.append("s", events).await.unwrap();
    wait_until("every event ran", || async {
        u64::from(ran.load(Ordering::Relaxed)) == N
    })
    .await;
    within("idle", app.idle()).await;
    let claims = app.stats().claim_calls;
    assert!(
        claims <= N + 1,
        "C7: {claims} claims for {N} delayed events (a claim per event and the first)"
    );
    app.shutdown(Duration::from_secs(5)).await;
}

/// RT17 across store instances: the worker's application runs on one
/// SQLite store instance, the cancel comes through another instance of
/// the same file; the handler hears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt17_a_cancel_through_another_store_instance_reaches_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a2.db");
    let open = || -> Arc<dyn Store> {
        Arc::new(a2_sqlite::SqliteStore::open(&path, a2_sqlite::SqliteOptions::default()).unwrap())
    };
    let (worker_store, other) = (open(), open());
    let started = Arc::new(Notify::new());
    let app = builder(&worker_store)
        .cancel_grace(Duration::from_secs(60))
        .handler("generate", {
            let started = started.clone();
            move |ctx, _: Value| {
                let started = started.clone();
                async move {
                    started.notify_one();
                    ctx.cancelled().await;
                    Ok(Vec::<NewEvent>::new())
                }
            }
        })
        .build()
        .unwrap();
    app.append("chat", vec![msg("generate")]).await.unwrap();
    within("the handler starts", started.notified()).await;
    assert!(other.cancel("chat", 1, None).await.unwrap().is_cancelled());
    within("idle", app.idle()).await;
    assert_eq!(app.stats().cancelled, 1);
    app.shutdown(Duration::from_secs(5)).await;
    other.close().await;
    worker_store.close().await;
}
