//! A few end-to-end checks of the Redis store on a real server.

mod common;

use std::sync::Arc;
use std::time::Duration;

use a2_core::*;
use a2_redis::testing;
use futures::StreamExt;
use serde_json::json;

#[tokio::test]
async fn append_claim_complete_and_read() {
    let clock = Arc::new(ManualClock::new(common::START_MS));
    let store = common::open(testing::shared(), common::options("smoke", clock.clone())).await;
    let out = store
        .append(
            "s:1{x}",
            vec![
                NewEvent::new("a", json!({"n": 1})).lane("l"),
                NewEvent::new("b", json!(2)).lane("l"),
                NewEvent::new("c", json!(null)).settled(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(out.events.len(), 3);
    assert!(out.has_pending);
    let rows = store.read("s:1{x}", ReadRange::default()).await.unwrap();
    assert_eq!(rows, out.events);

    let claimed = store
        .claim_available(ClaimRequest {
            session: "s:1{x}".into(),
            holder: "w".into(),
            lease: Lease::Ttl(1000),
            exclude_indexes: vec![],
            limit: 10,
        })
        .await
        .unwrap();
    let ClaimOutcome::Claimed {
        events: claimed, ..
    } = claimed
    else {
        panic!("{claimed:?}")
    };
    assert_eq!(claimed.len(), 1, "lane keeps b behind a");
    assert_eq!(claimed[0].attempt_count, 1);

    let done = store
        .complete_attempt(CompleteRequest {
            session: "s:1{x}".into(),
            index: 1,
            attempt: 1,
            events: vec![NewEvent::new("r", json!("x"))],
            batch_size: None,
        })
        .await
        .unwrap();
    let CompleteOutcome::Completed { events } = done else {
        panic!()
    };
    assert_eq!(events[0].event.index, 4);
    let rows = store.read("s:1{x}", ReadRange::default()).await.unwrap();
    assert_eq!(rows[0].returned_event_ids, vec![events[0].event.id.clone()]);
    assert_eq!(rows[3].event.cause, Some(Cause::new(1, 1)));

    let list = store
        .list_sessions(ListSessionsOptions::new(10))
        .await
        .unwrap();
    assert_eq!(list.sessions.len(), 1);
    assert_eq!(list.sessions[0].event_count, 4);
    assert_eq!(list.sessions[0].pending_count, 2);
}

#[tokio::test]
async fn feed_follows_appends() {
    let clock = Arc::new(ManualClock::new(common::START_MS));
    let store = common::open(testing::shared(), common::options("feed", clock)).await;
    store
        .append("f", vec![NewEvent::new("a", json!(1))])
        .await
        .unwrap();
    let mut feed = store.stream("f", 0);
    let first = tokio::time::timeout(Duration::from_secs(5), feed.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.index, 1);
    store
        .append("f", vec![NewEvent::new("b", json!(2))])
        .await
        .unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), feed.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.index, 2);
    assert_eq!(second.event_type, "b");
}
