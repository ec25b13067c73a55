//! Store faults the runtime survives: a corrupted session is not claimed
//! forever (RT11); writes retried after a lost acknowledgement are replays,
//! by ids derived from the attempt (RT10).

use super::*;

/// RT11: a session whose claim fails with `Corrupted` is not claimed again
/// and again: its drain ends (the app goes idle) and the worker's scan
/// skips it, until `drain` names it explicitly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt11_a_corrupted_session_is_not_claimed_forever() {
    let (store, faults) = faulty(Faults {
        corrupted_claims: true,
        ..Faults::default()
    });
    let app = builder(&store).build().unwrap();
    // Appended by another process: this one has to claim it (an append
    // through the app would claim it at append, RT13).
    store
        .append("s", vec![NewEvent::new("t", json!(1))])
        .await
        .unwrap();
    app.drain("s");
    within("the drain to give up", app.idle()).await;
    assert_eq!(faults.claims.load(Ordering::SeqCst), 1, "RT11: one claim");
    assert_eq!(app.scan_pending().await.unwrap(), 1, "still pending");
    // A drain the scan started (wrongly) counts as active before
    // `scan_pending` returns and claims before it ends, so once the app is
    // idle again it would have claimed.
    within("idle", app.idle()).await;
    assert_eq!(
        faults.claims.load(Ordering::SeqCst),
        1,
        "RT11: the worker's scan skips a corrupted session"
    );
    app.drain("s");
    within("idle", app.idle()).await;
    assert_eq!(faults.claims.load(Ordering::SeqCst), 2, "drain tries again");
}

/// RT10, CO3: a completion whose acknowledgement was lost is tried again
/// with the same derived ids and is a replay: the attempt completes, the
/// returned events exist once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt10_a_retried_completion_is_a_replay() {
    let (store, faults) = faulty(Faults {
        lost_completions: AtomicU32::new(1),
        ..Faults::default()
    });
    let app = builder(&store)
        .handler("q", |_ctx, _: Value| async move {
            Ok(vec![
                event("a", json!(1))?.settled(),
                event("b", json!(2))?.settled(),
            ])
        })
        .build()
        .unwrap();
    app.append("s", vec![NewEvent::new("q", json!(null))])
        .await
        .unwrap();
    within("idle", app.idle()).await;
    assert_eq!(
        faults.lost_completions.load(Ordering::SeqCst),
        0,
        "fault used"
    );
    let stats = app.stats();
    assert_eq!(
        (stats.completed, stats.store_errors),
        (1, 0),
        "RT10: {stats:?}"
    );
    let rows = all(&store, "s").await;
    let types: Vec<&str> = rows.iter().map(|r| r.event.event_type.as_str()).collect();
    assert_eq!(types, ["q", "a", "b"], "RT10: returned events once");
    assert_eq!(rows[0].processed_by_attempt, Some(1));
}

/// RT10, A5: a progress append whose acknowledgement was lost is tried
/// again and is a replay: the handler sees it succeed, the log holds it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt10_a_retried_progress_append_is_a_replay() {
    let (store, faults) = faulty(Faults {
        lost_progress: AtomicU32::new(1),
        ..Faults::default()
    });
    let app = builder(&store)
        .max_failures(1)
        .handler("q", |ctx, _: Value| async move {
            let row = ctx.progress("delta", json!({ "text": "hel" })).await?;
            ctx.progress("delta", json!({ "text": "lo" })).await?;
            Ok(event("done", json!(row.event.index))?.settled())
        })
        .build()
        .unwrap();
    app.append("s", vec![NewEvent::new("q", json!(null))])
        .await
        .unwrap();
    within("idle", app.idle()).await;
    assert_eq!(faults.lost_progress.load(Ordering::SeqCst), 0, "fault used");
    let rows = all(&store, "s").await;
    let types: Vec<&str> = rows.iter().map(|r| r.event.event_type.as_str()).collect();
    assert_eq!(
        types,
        ["q", "delta", "delta", "done"],
        "RT10: no duplicate, no failure"
    );
    assert!(rows[0].processed_at.is_some());
}

/// RT10: the ids of what an attempt writes derive from session, index,
/// attempt and position: the same run on two stores gives the same ids, a
/// second attempt other ids, and ids a handler sets stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt10_ids_derive_from_session_index_attempt_and_position() {
    async fn run() -> Vec<StoredEvent> {
        let store = memory();
        let calls = Arc::new(AtomicU32::new(0));
        let app = builder(&store)
            .handler("q", move |ctx, _: Value| {
                let calls = calls.clone();
                async move {
                    ctx.progress("delta", json!(ctx.attempt())).await?;
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        return Err(HandlerError::new("first attempt fails"));
                    }
                    Ok(vec![
                        event("a", json!(1))?.settled(),
                        event("b", json!(2))?.settled().id("mine"),
                    ])
                }
            })
            .build()
            .unwrap();
        app.append("s", vec![NewEvent::new("q", json!(null)).id("q1")])
            .await
            .unwrap();
        within("idle", app.idle()).await;
        all(&store, "s").await
    }
    let first = run().await;
    let second = run().await;
    let ids = |rows: &[StoredEvent]| rows.iter().map(|r| r.event.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&first), ids(&second), "RT10: deterministic");
    let types: Vec<&str> = first.iter().map(|r| r.event.event_type.as_str()).collect();
    assert_eq!(types, ["q", "delta", "delta", "a", "b"]);
    assert_ne!(first[1].event.id, first[2].event.id, "RT10: per attempt");
    assert_eq!(first[4].event.id, "mine", "a handler's own id stays");
    assert!(
        first[1..4]
            .iter()
            .all(|r| r.event.id.len() == 32 && r.event.id.bytes().all(|b| b.is_ascii_hexdigit())),
        "RT10: 32 hex digits"
    );
}
