//! SPEC §6 live feeds: ST1, ST2, ST3, ST4, ST5. A feed is awaited item by item with a
//! timeout (ten seconds); exactly-once delivery is checked by appending one more
//! event and requiring it to be the very next item.

use a2_core::{ErrorCode, EventStream, NewEvent, Store};
use futures::StreamExt;
use serde_json::json;

use crate::support::*;
use crate::{SetupFn, fixture};

/// Appends one event and requires it to be the next item of every feed:
/// nothing was delivered twice or out of order before it.
async fn expect_next_is_fresh(
    store: &dyn Store,
    session: &str,
    feeds: &mut [EventStream],
    index: u64,
    what: &str,
) {
    let rows = append(store, session, vec![ev("fresh")]).await;
    assert_eq!(indexes(&rows), [index]);
    for (i, feed) in feeds.iter_mut().enumerate() {
        assert_eq!(
            next_indexes(feed, 1, what).await,
            [index],
            "{what}: feed {i} delivered extra events"
        );
    }
}

/// ST1: a feed yields the events after `after_index` (catch-up), then those
/// appended later by either handle (live), in order, each exactly once.
pub async fn st1_catch_up_then_live_exactly_once(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let rows = append_n(s, "s", 5).await;
    let mut feed = s.stream("s", 2);
    let first = match next_item(&mut feed, "ST1 catch-up").await {
        Ok(event) => event,
        Err(err) => panic!("ST1: {err}"),
    };
    assert_eq!(first, rows[2].event, "ST1: the stored event");
    assert_eq!(next_indexes(&mut feed, 2, "ST1 catch-up").await, [4, 5]);
    append(s, "s", vec![ev("six"), ev("seven")]).await;
    append(fx.peer.as_ref(), "s", vec![ev("eight")]).await;
    append(s, "other", vec![ev("elsewhere")]).await;
    assert_eq!(
        next_indexes(&mut feed, 3, "ST1 live").await,
        [6, 7, 8],
        "ST1: live, from both handles"
    );
    let mut feeds = vec![feed];
    expect_next_is_fresh(fx.peer.as_ref(), "s", &mut feeds, 9, "ST1").await;
    // A feed from the frontier of an empty session waits for the first event.
    let mut empty = vec![s.stream("new", 0)];
    expect_next_is_fresh(s, "new", &mut empty, 1, "ST1 empty session").await;
    // A feed from beyond the frontier yields only what comes after its start.
    let mut ahead = s.stream("s", 11);
    append_n(fx.peer.as_ref(), "s", 3).await;
    assert_eq!(
        next_indexes(&mut ahead, 1, "ST1 ahead").await,
        [12],
        "ST1: index > after_index"
    );
    let mut feeds = vec![ahead];
    expect_next_is_fresh(s, "s", &mut feeds, 13, "ST1 ahead").await;
}

/// ST1, A7, CO2: a feed delivers each event as stored, with its lane and
/// its cause — caught up from the log, and live from either handle (on
/// Redis, the events a wake-up carries) — so a chat following it can group
/// messages and link a reply to what it answers.
pub async fn st1_feeds_carry_each_events_lane_and_cause(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let mut live = s.stream("s", 0);
    let ask = NewEvent::new("ask", json!({"text": "hi"})).lane("chat");
    append(s, "s", vec![ask]).await;
    let rows = claimed(s, "s", "w", TTL, 1).await;
    let progress = NewEvent::new("typing", json!({})).caused_by(a2_core::Cause::new(1, 1));
    append(fx.peer.as_ref(), "s", vec![progress.lane("ui")]).await;
    let reply = NewEvent::new("answer", json!({"text": "hello"})).lane("chat");
    completed(fx.peer.as_ref(), "s", 1, rows[0].attempt_count, vec![reply]).await;
    let stored = read_all(s, "s").await;
    assert_eq!(stored.len(), 3);
    assert_eq!(
        (stored[1].event.lane.as_deref(), stored[1].event.cause),
        (Some("ui"), Some(a2_core::Cause::new(1, 1))),
        "A7: the progress event as stored"
    );
    assert_eq!(
        (stored[2].event.lane.as_deref(), stored[2].event.cause),
        (Some("chat"), Some(a2_core::Cause::new(1, 1))),
        "CO2: the reply as stored"
    );
    let mut caught_up = s.stream("s", 0);
    for (what, feed) in [("live", &mut live), ("caught up", &mut caught_up)] {
        for row in &stored {
            match next_item(feed, "ST1 lane and cause").await {
                Ok(event) => assert_eq!(event, row.event, "ST1: {what}, the event as stored"),
                Err(err) => panic!("ST1: {what}: {err}"),
            }
        }
    }
}

/// ST1: while both handles append concurrently, a feed opened mid-way
/// delivers every event exactly once, in order, with no gap.
pub async fn st1_feed_keeps_up_with_concurrent_appends(setup: SetupFn) {
    let fx = fixture(setup).await;
    append_n(fx.store.as_ref(), "s", 10).await;
    let mut writers = Vec::new();
    for (w, handle) in [fx.store.clone(), fx.peer.clone()].into_iter().enumerate() {
        writers.push(tokio::spawn(async move {
            for i in 0..100 {
                let batch = (0..(i % 3 + 1))
                    .map(|k| ev(&format!("w{w}-{i}-{k}")))
                    .collect();
                append(handle.as_ref(), "s", batch).await;
            }
        }));
    }
    let mut feed = fx.store.stream("s", 3);
    let total = 10 + 2 * (34 + 2 * 33 + 3 * 33);
    let got = next_indexes(&mut feed, total - 3, "ST1 concurrent").await;
    assert_eq!(
        got,
        (4..=total as u64).collect::<Vec<_>>(),
        "ST1: in order, no gap, no repeat"
    );
    for writer in writers {
        if let Err(err) = writer.await {
            panic!("writer failed: {err}");
        }
    }
    let mut feeds = vec![feed];
    expect_next_is_fresh(fx.store.as_ref(), "s", &mut feeds, total as u64 + 1, "ST1").await;
}

/// ST2: a caught-up feed on one handle sees events appended through the
/// other (another process), both ways.
pub async fn st2_feed_sees_events_appended_by_the_peer(setup: SetupFn) {
    let fx = fixture(setup).await;
    let mut on_store = fx.store.stream("s", 0);
    let mut on_peer = fx.peer.stream("s", 0);
    for round in 0..3u64 {
        let rows = append(fx.peer.as_ref(), "s", vec![ev("from-peer")]).await;
        assert_eq!(indexes(&rows), [2 * round + 1]);
        assert_eq!(
            next_indexes(&mut on_store, 1, "ST2 store feed").await,
            [2 * round + 1],
            "ST2"
        );
        assert_eq!(
            next_indexes(&mut on_peer, 1, "ST2 peer feed").await,
            [2 * round + 1]
        );
        let rows = append(fx.store.as_ref(), "s", vec![ev("from-store")]).await;
        assert_eq!(indexes(&rows), [2 * round + 2]);
        assert_eq!(
            next_indexes(&mut on_peer, 1, "ST2 peer feed").await,
            [2 * round + 2],
            "ST2"
        );
        assert_eq!(
            next_indexes(&mut on_store, 1, "ST2 store feed").await,
            [2 * round + 2]
        );
    }
    let mut feeds = vec![on_store, on_peer];
    expect_next_is_fresh(fx.peer.as_ref(), "s", &mut feeds, 7, "ST2").await;
}

/// ST3 (observable part): many feeds on one session, on both handles, each
/// get every event in order.
pub async fn st3_many_feeds_on_one_session_all_get_everything(setup: SetupFn) {
    let fx = fixture(setup).await;
    append_n(fx.store.as_ref(), "s", 5).await;
    let mut feeds: Vec<EventStream> = (0..24)
        .map(|i| {
            if i % 2 == 0 {
                fx.store.stream("s", 0)
            } else {
                fx.peer.stream("s", 0)
            }
        })
        .collect();
    for feed in feeds.iter_mut() {
        assert_eq!(next_indexes(feed, 5, "ST3 catch-up").await, [1, 2, 3, 4, 5]);
    }
    for i in 0..10 {
        let handle = if i % 2 == 0 { &fx.store } else { &fx.peer };
        append(handle.as_ref(), "s", vec![ev("a"), ev("b"), ev("c")]).await;
    }
    for (i, feed) in feeds.iter_mut().enumerate() {
        let got = next_indexes(feed, 30, "ST3 live").await;
        assert_eq!(got, (6..=35).collect::<Vec<u64>>(), "ST3: feed {i}");
    }
    // Dropping most feeds leaves the others working; after the last one is
    // dropped, a new feed subscribes again.
    feeds.truncate(2);
    expect_next_is_fresh(fx.peer.as_ref(), "s", &mut feeds, 36, "ST3 after drops").await;
    drop(feeds);
    let mut again = vec![fx.store.stream("s", 36)];
    expect_next_is_fresh(
        fx.peer.as_ref(),
        "s",
        &mut again,
        37,
        "ST3 after the last drop",
    )
    .await;
}

/// ST4 (observable part): a feed that is not polled while 2 000 events
/// (about 600 KiB) are appended still yields all of them, in order, after.
pub async fn st4_unpolled_feed_yields_everything_afterwards(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let mut feed = s.stream("s", 0);
    let mut feeds = vec![];
    append(s, "s", vec![ev("first")]).await;
    assert_eq!(next_indexes(&mut feed, 1, "ST4 live").await, [1]);
    let filler = "x".repeat(300);
    for batch in 0..40 {
        let handle = if batch % 2 == 0 { &fx.store } else { &fx.peer };
        let events = (0..50)
            .map(|i| NewEvent::new("bulk", json!({ "n": batch * 50 + i, "filler": filler })))
            .collect();
        append(handle.as_ref(), "s", events).await;
    }
    for (expected_n, index) in (2..=2_001u64).enumerate() {
        let event = match next_item(&mut feed, "ST4 after").await {
            Ok(event) => event,
            Err(err) => panic!("ST4: failed at {index}: {err}"),
        };
        assert_eq!(event.index, index, "ST4: in order, no gap");
        assert_eq!(event.payload["n"], json!(expected_n));
    }
    feeds.push(feed);
    expect_next_is_fresh(s, "s", &mut feeds, 2_002, "ST4").await;
}

/// ST5: closing the store ends every open feed (and presence subscription)
/// with `StoreClosed`, and later calls fail with it; with an independent
/// peer, a new stream from the last delivered index continues exactly
/// through the peer.
pub async fn st5_close_ends_every_feed_with_store_closed(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 3).await;
    let mut feeds: Vec<EventStream> = vec![s.stream("s", 0), s.stream("s", 2), s.stream("t", 0)];
    assert_eq!(next_indexes(&mut feeds[0], 3, "ST5").await, [1, 2, 3]);
    assert_eq!(next_indexes(&mut feeds[1], 1, "ST5").await, [3]);
    let mut presence = super::presence::subscribe(s, "s").await;
    s.close().await;
    match next_item(&mut presence, "ST5 presence subscription").await {
        Err(err) => assert_eq!(
            err.code(),
            ErrorCode::StoreClosed,
            "ST5: presence subscription"
        ),
        Ok(patch) => panic!("ST5: a presence subscription yielded {patch:?} after close"),
    }
    for (i, feed) in feeds.iter_mut().enumerate() {
        match next_item(feed, "ST5 close").await {
            Err(err) => assert_eq!(err.code(), ErrorCode::StoreClosed, "ST5: feed {i}"),
            Ok(event) => panic!("ST5: feed {i} yielded {} after close", event.index),
        }
        match tokio::time::timeout(WAIT, feed.next()).await {
            Ok(None) => {}
            Ok(Some(item)) => panic!("ST5: feed {i} went on after its error: {item:?}"),
            Err(_) => panic!("ST5: feed {i} did not end after its error"),
        }
    }
    expect_code(
        s.append("s", vec![ev("late")]).await,
        ErrorCode::StoreClosed,
        "ST5: append after close",
    );
    let mut late = s.stream("s", 0);
    match next_item(&mut late, "ST5 stream after close").await {
        Err(err) => assert_eq!(err.code(), ErrorCode::StoreClosed),
        Ok(event) => panic!("ST5: a stream of a closed store yielded {}", event.index),
    }
    expect_code(
        s.presence_subscribe("s").await.map(|_| ()),
        ErrorCode::StoreClosed,
        "ST5: presence_subscribe after close",
    );
    if fx.caps.independent_peer {
        let p = fx.peer.as_ref();
        append(p, "s", vec![ev("four")]).await;
        let mut resumed = vec![p.stream("s", 3)];
        assert_eq!(next_indexes(&mut resumed[0], 1, "ST5 resumed").await, [4]);
        expect_next_is_fresh(p, "s", &mut resumed, 5, "ST5 resumed").await;
    }
}

/// ST5, ST1: a new stream from the last delivered index continues exactly
/// (after the old feed is dropped, on either handle).
pub async fn st5_new_stream_from_last_delivered_index_continues_exactly(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 4).await;
    let mut feed = s.stream("s", 0);
    let got = next_indexes(&mut feed, 2, "ST5").await;
    let last = got[got.len() - 1];
    drop(feed);
    append_n(fx.peer.as_ref(), "s", 3).await;
    let mut feeds = vec![fx.peer.stream("s", last)];
    assert_eq!(
        next_indexes(&mut feeds[0], 5, "ST5 resumed").await,
        [3, 4, 5, 6, 7]
    );
    expect_next_is_fresh(s, "s", &mut feeds, 8, "ST5 resumed").await;
    drop(feeds);
    let mut again = vec![s.stream("s", 8)];
    expect_next_is_fresh(
        fx.peer.as_ref(),
        "s",
        &mut again,
        9,
        "ST5 from the frontier",
    )
    .await;
}

/// ST6: a feed that delivered events of a session that is then cleared
/// ends with `SessionCleared` (at the latest when the session is appended
/// to again) and yields nothing after it, never the new log's events as if
/// they continued the old one; a new feed from 0 follows the new log.
pub async fn st6_feed_of_a_cleared_session_ends_with_session_cleared(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 3).await;
    let mut feeds: Vec<EventStream> = vec![s.stream("s", 0), fx.peer.stream("s", 1)];
    assert_eq!(next_indexes(&mut feeds[0], 3, "ST6").await, [1, 2, 3]);
    assert_eq!(next_indexes(&mut feeds[1], 2, "ST6").await, [2, 3]);
    if let Err(err) = s.clear("s").await {
        panic!("ST6: clear failed: {err}");
    }
    // The new log outgrows the old one: a feed that only compared indexes
    // would take events 4 and 5 of the new log as the old one's next.
    append_n(fx.peer.as_ref(), "s", 5).await;
    for (i, feed) in feeds.iter_mut().enumerate() {
        match next_item(feed, "ST6 after clear").await {
            Err(err) => assert_eq!(
                err.code(),
                ErrorCode::SessionCleared,
                "ST6: feed {i}: {err}"
            ),
            Ok(event) => panic!("ST6: feed {i} yielded {} after the clear", event.index),
        }
        match tokio::time::timeout(WAIT, feed.next()).await {
            Ok(None) => {}
            Ok(Some(item)) => panic!("ST6: feed {i} went on after its error: {item:?}"),
            Err(_) => panic!("ST6: feed {i} did not end after its error"),
        }
    }
    let mut fresh = vec![s.stream("s", 0)];
    assert_eq!(
        next_indexes(&mut fresh[0], 5, "ST6 new feed").await,
        [1, 2, 3, 4, 5]
    );
    expect_next_is_fresh(s, "s", &mut fresh, 6, "ST6 new feed").await;
}
