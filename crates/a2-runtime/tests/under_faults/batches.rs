//! Batch handlers (RT9).

use super::*;

/// RT9, B1: a batch handler gets the queued events of its type in batches
/// of at most its size, in index order, one call each; the returned events
/// are caused by the batch's last event with the batch size; every event
/// of a batch is processed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt9_batch_handler_answers_queued_events_in_one_call() {
    let store = memory();
    let calls: Arc<Mutex<Vec<Vec<u64>>>> = Arc::default();
    let app = {
        let calls = calls.clone();
        builder(&store)
            .concurrency(8)
            .batch_handler("msg", 5, move |ctx, texts: Vec<String>| {
                let calls = calls.clone();
                async move {
                    let indexes: Vec<u64> = ctx.batch().iter().map(|e| e.event.index).collect();
                    assert_eq!(ctx.index(), *indexes.last().unwrap());
                    calls.lock().unwrap().push(indexes);
                    Ok(event("reply", json!(texts.join(" ")))?.settled())
                }
            })
            .build()
            .unwrap()
    };
    let messages = (1..=7)
        .map(|i| NewEvent::new("msg", json!(format!("m{i}"))))
        .collect();
    app.append("s", messages).await.unwrap();
    within("idle", app.idle()).await;
    // The batches run concurrently: compare them in index order.
    let mut calls = calls.lock().unwrap().clone();
    calls.sort();
    assert_eq!(calls, [vec![1, 2, 3, 4, 5], vec![6, 7]], "RT9: batches");
    let rows = all(&store, "s").await;
    assert!(
        rows[..7].iter().all(|r| r.processed_at.is_some()),
        "RT9: all processed"
    );
    let mut replies: Vec<(Value, Option<Cause>)> = rows[7..]
        .iter()
        .map(|r| (r.event.payload.clone(), r.event.cause))
        .collect();
    replies.sort_by_key(|(_, cause)| *cause);
    assert_eq!(
        replies,
        [
            (
                json!("m1 m2 m3 m4 m5"),
                Some(Cause::new(5, 1).with_batch_size(5))
            ),
            (json!("m6 m7"), Some(Cause::new(7, 1).with_batch_size(2))),
        ],
        "RT9, B1: one reply per batch, caused by its last event"
    );
}

/// RT9, RT8: a batch whose handler fails (here: a payload that does not
/// decode) fails every attempt of the batch; they are dead-lettered like
/// any failure, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt9_a_failed_batch_fails_every_event_of_it() {
    let store = memory();
    let app = builder(&store)
        .max_failures(1)
        .batch_handler("msg", 10, |_ctx, _texts: Vec<String>| async move { Ok(()) })
        .build()
        .unwrap();
    let events = vec![
        NewEvent::new("msg", json!("fine")),
        NewEvent::new("msg", json!({ "not": "a string" })),
        NewEvent::new("other", json!(null)),
    ];
    app.append("s", events).await.unwrap();
    within("idle", app.idle()).await;
    let rows = all(&store, "s").await;
    assert!(rows[0].failed_at.is_some() && rows[1].failed_at.is_some());
    assert!(
        rows[1]
            .last_error
            .as_deref()
            .unwrap()
            .contains("does not decode"),
        "RT8: {:?}",
        rows[1].last_error
    );
    assert!(
        rows[2].processed_at.is_some(),
        "the rest of the session went on"
    );
}
