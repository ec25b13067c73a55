//! SPEC §6 shared readers: ST7. The feeds of one session in one store
//! instance (its followers) share one reader of the log: a wake-up costs
//! one read, not one per follower; a follower that is not polled never
//! holds back the others; followers opened and dropped in any number leave
//! nothing behind.

use std::time::Duration;

use a2_core::{EventStream, NewEvent, Store};
use futures::StreamExt;
use serde_json::json;

use crate::support::*;
use crate::{SetupFn, fixture};

/// Waits (at most [`WAIT`]) until `done` holds of the store's feed counters.
async fn until(store: &dyn Store, what: &str, done: impl Fn(&dyn Store) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done(store) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {WAIT:?} (feeds: {:?})",
            store.feed_stats()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until the instance has no feed, no reader and no follower left.
async fn until_nothing_is_left(store: &dyn Store, session: &str, what: &str) {
    until(store, what, |store| {
        let stats = store.feed_stats();
        stats.followers == 0 && stats.readers == 0 && store.session_followers(session) == 0
    })
    .await;
}

/// ST7: ten followers of one session cost one read of the log per append
/// (a store with one read per follower would make ten), and the instance
/// counts them; once dropped, nothing of them is left.
pub async fn st7_shared_reader_one_read_per_wake_up_whatever_the_followers(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 3).await;
    let mut feeds: Vec<EventStream> = (0..10).map(|_| s.stream("s", 0)).collect();
    for feed in feeds.iter_mut() {
        assert_eq!(next_indexes(feed, 3, "ST7 catch-up").await, [1, 2, 3]);
    }
    assert_eq!(s.session_followers("s"), 10, "ST7: followers of s");
    assert_eq!(s.session_followers("other"), 0, "ST7: followers of other");
    let before = s.feed_stats();
    assert_eq!(before.followers, 10, "ST7: open feeds");
    assert_eq!(before.readers, 1, "ST7: one reader for the session");
    let appends = 40;
    for index in 4..4 + appends {
        append(s, "s", vec![ev("live")]).await;
        for feed in feeds.iter_mut() {
            assert_eq!(next_indexes(feed, 1, "ST7 live").await, [index]);
        }
    }
    let after = s.feed_stats();
    let reads = after.reads - before.reads;
    // A store that polls (Redis over REST without push) also reads when a
    // poll sees the session changed, besides what this instance's own
    // appends deliver, so its count depends on how the appends fall
    // between polls (47 for 40 once, on a loaded machine). One read per
    // follower would still make ten per append.
    let allowed = if s.pushes_wakeups() {
        appends + appends / 10 + 2
    } else {
        2 * appends
    };
    assert!(
        reads <= allowed,
        "ST7: {reads} reads of the log for {appends} appends followed by 10 feeds (at most {allowed})"
    );
    assert_eq!(
        after.deliveries - before.deliveries,
        10 * appends,
        "ST7: every delivery counted"
    );
    drop(feeds);
    until_nothing_is_left(s, "s", "ST7: the dropped feeds leave nothing").await;
}

/// ST7, ST4: five followers take 1 500 events (three times the shared
/// buffer) while a sixth is not polled at all; the sixth then yields all of
/// them, in order, and all six deliver the next event exactly once.
pub async fn st7_shared_reader_a_slow_follower_beside_fast_ones(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let mut fast: Vec<EventStream> = (0..5).map(|_| s.stream("s", 0)).collect();
    let mut slow = s.stream("s", 0);
    append(s, "s", vec![ev("first")]).await;
    for feed in fast.iter_mut().chain(std::iter::once(&mut slow)) {
        assert_eq!(next_indexes(feed, 1, "ST7 first").await, [1]);
    }
    let filler = "x".repeat(200);
    for batch in 0..30 {
        let handle = if batch % 2 == 0 { &fx.store } else { &fx.peer };
        let events = (0..50)
            .map(|i| NewEvent::new("bulk", json!({ "n": batch * 50 + i, "filler": filler })))
            .collect();
        append(handle.as_ref(), "s", events).await;
    }
    let expected: Vec<u64> = (2..=1_501).collect();
    for (i, feed) in fast.iter_mut().enumerate() {
        let got = next_indexes(feed, expected.len(), "ST7 fast").await;
        assert_eq!(
            got, expected,
            "ST7: fast follower {i}, beside one not polled"
        );
    }
    for (n, index) in expected.iter().enumerate() {
        let event = match next_item(&mut slow, "ST7 slow").await {
            Ok(event) => event,
            Err(err) => panic!("ST7: the slow follower failed at {index}: {err}"),
        };
        assert_eq!(event.index, *index, "ST7: the slow follower, in order");
        assert_eq!(event.payload["n"], json!(n), "ST7: the stored event");
    }
    let rows = append(fx.peer.as_ref(), "s", vec![ev("fresh")]).await;
    assert_eq!(indexes(&rows), [1_502]);
    for feed in fast.iter_mut().chain(std::iter::once(&mut slow)) {
        assert_eq!(
            next_indexes(feed, 1, "ST7 after").await,
            [1_502],
            "ST7: nothing delivered twice"
        );
    }
    drop(fast);
    drop(slow);
    until_nothing_is_left(s, "s", "ST7: the dropped feeds leave nothing").await;
}

/// ST7, ST3: while a writer appends 2 200 events, 2 000 followers are opened
/// (from 0, or just behind the live position) and dropped after a few
/// events, some in the middle of a batch; each delivers exactly the events
/// after its start, a long-lived follower delivers every event, and once
/// all are dropped nothing of them is left.
pub async fn st7_shared_reader_followers_opened_and_dropped_during_appends(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let writer = {
        let peer = fx.store.clone();
        tokio::spawn(async move {
            for batch in 0..1_100 {
                let events = vec![ev(&format!("a{batch}")), ev(&format!("b{batch}"))];
                if let Err(err) = peer.append("s", events).await {
                    panic!("ST7: append {batch}: {err}");
                }
            }
        })
    };
    let mut long_lived = s.stream("s", 0);
    for round in 0..2_000u64 {
        let position = next_indexes(&mut long_lived, 1, "ST7 long-lived").await[0];
        assert_eq!(position, round + 1, "ST7: the long-lived follower");
        let after = if round % 5 == 0 {
            0
        } else {
            position.saturating_sub(3)
        };
        let take = (position - after).min(3) as usize;
        let mut feed = s.stream("s", after);
        let got = next_indexes(&mut feed, take, "ST7 short-lived").await;
        let want: Vec<u64> = (after + 1..=after + take as u64).collect();
        assert_eq!(got, want, "ST7: a follower opened at {after}");
    }
    writer.await.expect("the writer");
    let rest = next_indexes(&mut long_lived, 200, "ST7 long-lived").await;
    assert_eq!(
        rest,
        (2_001..=2_200).collect::<Vec<u64>>(),
        "ST7: the long-lived follower"
    );
    assert_eq!(s.session_followers("s"), 1, "ST7: one follower left");
    drop(long_lived);
    until_nothing_is_left(s, "s", "ST7: 2 000 dropped followers leave nothing").await;
}

/// How many sessions and feeds [`st7_thousands_of_feeds_polled_from_one_task_all_deliver`]
/// drives from one task.
const ONE_TASK_SESSIONS: usize = 200;
const ONE_TASK_FEEDS_PER_SESSION: usize = 10;

/// Each of `feeds` delivers the events `indexes`, all polled together.
async fn deliver(
    feeds: &mut [(String, EventStream)],
    indexes: std::ops::RangeInclusive<u64>,
) -> usize {
    let each = feeds.iter_mut().map(|(session, feed)| {
        let indexes = indexes.clone();
        async move {
            for index in indexes {
                match feed.next().await {
                    Some(Ok(event)) if event.index == index => {}
                    other => panic!("ST1: feed of {session:?} at {index}: {other:?}"),
                }
            }
        }
    });
    futures::future::join_all(each).await.len()
}

/// Opens [`ONE_TASK_FEEDS_PER_SESSION`] feeds of each session (which holds
/// `from` events) and drives them all from the future it returns: each
/// delivers events `1..=from`, then `writer` appends one event to every
/// session while no feed is polled, and each delivers it — all the
/// wake-ups land between two polls of the task, so one poll of it finds
/// every session's feed ready. Yields how many feeds delivered everything.
fn one_task_feeds(
    store: &std::sync::Arc<dyn Store>,
    writer: std::sync::Arc<dyn Store>,
    sessions: &[String],
    from: u64,
) -> impl std::future::Future<Output = usize> + Send + 'static {
    let mut feeds: Vec<(String, EventStream)> = sessions
        .iter()
        .flat_map(|session| {
            (0..ONE_TASK_FEEDS_PER_SESSION).map(|_| (session.clone(), store.stream(session, 0)))
        })
        .collect();
    let sessions = sessions.to_vec();
    async move {
        deliver(&mut feeds, 1..=from).await;
        for session in &sessions {
            if let Err(err) = writer.append(session, vec![ev("live")]).await {
                panic!("append to {session:?}: {err}");
            }
        }
        deliver(&mut feeds, from + 1..=from + 1).await
    }
}

/// ST1, ST7: 2 000 feeds over 200 sessions, all polled from one task —
/// the body of `block_on` (as `#[tokio::main]` runs a program that merges
/// many sessions' feeds with `join_all` or a `StreamMap`), then a spawned
/// task — each deliver their session's events, catch-up and live, within
/// the deadline. A feed must make progress, or yield, whatever task polls
/// it and however many feeds share the task: tokio's cooperative budget
/// answers a feed that polls after the task spent it with `Pending` and an
/// immediate wake-up, which a feed must not take for news and poll again
/// inside the same poll (it would spin at 100% CPU forever).
pub async fn st7_thousands_of_feeds_polled_from_one_task_all_deliver(setup: SetupFn) {
    let fx = fixture(setup).await;
    let sessions: Vec<String> = (0..ONE_TASK_SESSIONS)
        .map(|n| format!("many-{n}"))
        .collect();
    for session in &sessions {
        append_n(fx.store.as_ref(), session, 3).await;
    }
    let total = ONE_TASK_SESSIONS * ONE_TASK_FEEDS_PER_SESSION;
    let deadline = Duration::from_secs(60);

    // From the body of a `block_on`, on a thread of its own so that a feed
    // spinning inside one poll cannot stop this case from failing.
    let (tx, rx) = std::sync::mpsc::channel();
    let drive = one_task_feeds(&fx.store, fx.peer.clone(), &sessions, 3);
    let handle = tokio::runtime::Handle::current();
    std::thread::spawn(move || {
        let delivered = handle.block_on(drive);
        let _ = tx.send(delivered);
    });
    let delivered = tokio::task::spawn_blocking(move || rx.recv_timeout(deadline))
        .await
        .expect("the waiting thread");
    assert_eq!(
        delivered,
        Ok(total),
        "ST7: {total} feeds polled from the body of block_on deliver within {deadline:?}"
    );

    // From one spawned task.
    let drive = tokio::spawn(one_task_feeds(&fx.store, fx.peer.clone(), &sessions, 4));
    let delivered = tokio::time::timeout(deadline, drive).await;
    assert!(
        matches!(delivered, Ok(Ok(n)) if n == total),
        "ST7: {total} feeds polled from one spawned task deliver within {deadline:?}: {delivered:?}"
    );
    until_nothing_is_left(fx.store.as_ref(), "many-0", "ST7: the feeds leave nothing").await;
}
