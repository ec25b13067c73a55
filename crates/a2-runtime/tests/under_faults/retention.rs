//! What retention asks of the store (RT16): a session held at an unsettled
//! event is not trimmed again at every step while the event stays.

use std::sync::atomic::AtomicBool;

use super::*;

/// RT16: keep-last retention trims up to a dead letter once, then asks the
/// store nothing more for that session until the letter settles (one
/// event read per step instead of two refused and empty trims); revived
/// and processed, the letter no longer holds the log, and the next step
/// trims past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt16_a_session_held_at_a_dead_letter_is_not_trimmed_at_every_step() {
    let (store, faults) = faulty(Faults::default());
    let poisoned = Arc::new(AtomicBool::new(true));
    let app = {
        let poisoned = poisoned.clone();
        builder(&store)
            .max_failures(1)
            .handler("job", |_, _: Value| async { Ok::<(), HandlerError>(()) })
            .handler("poison", move |_, _: Value| {
                let poisoned = poisoned.clone();
                async move {
                    if poisoned.load(Ordering::SeqCst) {
                        return Err(HandlerError::new("poisoned"));
                    }
                    Ok(())
                }
            })
            .retention(a2_runtime::Retention::keep_last(10))
            .build()
            .unwrap()
    };
    let summary = |store: Arc<dyn Store>| async move {
        let listed = store
            .list_sessions(ListSessionsOptions::new(10))
            .await
            .unwrap();
        let s = &listed.sessions[0];
        (s.event_count, s.pending_count, s.first_index)
    };
    let jobs = |from: u64| {
        (from..from + 64)
            .map(|n| NewEvent::new("job", json!(n)))
            .collect()
    };
    app.append("s", jobs(0)).await.unwrap();
    app.append("s", vec![NewEvent::new("poison", json!("bad"))])
        .await
        .unwrap();
    for step in 1..=30 {
        app.append("s", jobs(step * 64)).await.unwrap();
        let events = 65 + step * 64;
        common::wait_until("the step's jobs to be processed", || {
            let store = store.clone();
            async move {
                let (count, pending, _) = summary(store).await;
                count == events && pending == 0
            }
        })
        .await;
    }
    within("the drains to finish", app.idle()).await;
    assert_eq!(
        summary(store.clone()).await.2,
        65,
        "RT16: trimmed up to the letter"
    );
    let trims = faults.trims.load(Ordering::SeqCst);
    // A trim or two before the letter holds the log (64 events a step,
    // the letter at 65), the refusal and the trim up to it, and on a busy
    // machine a step whose trim overlapped the previous one's: a handful
    // over 30 steps. (Each step asked twice while held, 60 calls, before
    // retention kept the event it stopped at.)
    assert!(
        trims <= 10,
        "RT16: {trims} trims while the session was held at its dead letter"
    );
    poisoned.store(false, Ordering::SeqCst);
    assert!(store.revive("s", 65).await.unwrap().is_revived());
    app.drain("s");
    common::wait_until("the revived letter to be processed", || {
        let store = store.clone();
        async move {
            let range = ReadRange {
                after_index: 64,
                through_index: Some(65),
            };
            match store.read("s", range).await {
                Ok(rows) => rows[0].processed_at.is_some(),
                // Trimmed already (a step of the jobs came first).
                Err(Error::Trimmed { .. }) => true,
                Err(error) => panic!("{error}"),
            }
        }
    })
    .await;
    for step in 31..=32 {
        app.append("s", jobs(step * 64)).await.unwrap();
    }
    common::wait_until("RT16: the revived letter no longer holds the log", || {
        let store = store.clone();
        async move {
            let (count, _, first) = summary(store).await;
            count == 65 + 32 * 64 && first > 65
        }
    })
    .await;
    app.shutdown(Duration::from_secs(5)).await;
}
