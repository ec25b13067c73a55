//! Trims across instances (TR1, E1): the Redis store reads a trim's event
//! ids before its script runs, and the script checks them against the id
//! index: ids another writer overtook (a trim, a clear) write nothing and
//! are read again; a hole in the log is `Corrupted`.

use super::*;

/// Settled events with ids `{tag}{n}` for each `n`.
fn notes(tag: &str, ns: impl IntoIterator<Item = u32>) -> Vec<NewEvent> {
    ns.into_iter()
        .map(|n| {
            NewEvent::new("note", json!(n))
                .id(format!("{tag}{n}"))
                .settled()
        })
        .collect()
}

/// The ids `e1 … e{n}`, as a read of the log before anything moved.
fn ids(n: u32) -> Vec<String> {
    (1..=n).map(|k| format!("e{k}")).collect()
}

/// The session's first retained index and the ids of its events.
async fn retained(store: &RedisStore, session: &str) -> (u64, Vec<String>) {
    let page = store
        .read_history(session, HistoryOptions::new(100))
        .await
        .unwrap();
    let ids = page.events.iter().map(|r| r.event.id.clone()).collect();
    (page.first_index, ids)
}

/// TR1: ids read before another instance trimmed name events that are
/// gone: the script writes nothing; the ids as they are now trim.
#[tokio::test]
async fn tr1_ids_read_before_another_trim_write_nothing() {
    let server = RedisServer::start();
    let (a, b, _clock) = pair(&server, "trim-overtaken", |o| o).await;
    a.append("s", notes("e", 1..=10)).await.unwrap();
    let read = ids(10);
    assert_eq!(b.trim("s", 4).await.unwrap().first_index, 5);
    assert_eq!(a.trim_with_ids("s", 8, &read[..8]).await.unwrap(), None);
    let (first, kept) = retained(&a, "s").await;
    assert_eq!((first, kept.len()), (5, 6), "nothing written");
    let now = a.trim_with_ids("s", 8, &read[4..8]).await.unwrap();
    assert_eq!(now.map(|o| o.first_index), Some(9));
    assert_eq!(a.trim("s", 10).await.unwrap().first_index, 11);
}

/// TR1: ids read before the session was cleared and written again name
/// other events (or events at other indexes) now: the script writes
/// nothing, and the new events stay with their ids.
#[tokio::test]
async fn tr1_ids_read_before_a_clear_write_nothing() {
    let server = RedisServer::start();
    let (a, b, _clock) = pair(&server, "trim-cleared", |o| o).await;
    a.append("s", notes("e", 1..=6)).await.unwrap();
    let read = ids(6);
    b.clear("s").await.unwrap();
    // The same ids, two of them swapped: each id is known, at another index.
    b.append("s", notes("e", [2, 1, 3, 4, 5, 6])).await.unwrap();
    assert_eq!(a.trim_with_ids("s", 4, &read[..4]).await.unwrap(), None);
    b.clear("s").await.unwrap();
    b.append("s", notes("x", 1..=6)).await.unwrap();
    assert_eq!(a.trim_with_ids("s", 4, &read[..4]).await.unwrap(), None);
    let (first, kept) = retained(&a, "s").await;
    assert_eq!(first, 1, "nothing written");
    assert_eq!(kept, ["x1", "x2", "x3", "x4", "x5", "x6"]);
    // The store's own trim reads the ids as they are.
    assert_eq!(a.trim("s", 4).await.unwrap().first_index, 5);
    let again = a.append("s", notes("x", [5])).await.unwrap();
    assert_eq!(
        again.events[0].event.index, 5,
        "A5: a retained id still replays"
    );
}

/// TR1 under races: instances trimming one session at once, to points
/// that overtake each other, while it grows. Each trim answers a first
/// index past its point or is refused as retryable, and at the end the id
/// index knows exactly the retained events (TR4): no trimmed event's id
/// stays behind, no retained one went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tr1_trims_racing_across_instances_keep_the_id_index_exact() {
    let server = RedisServer::start();
    let (a, b, _clock) = pair(&server, "trim-race", |o| o).await;
    let (a, b) = (Arc::new(a), Arc::new(b));
    a.append("s", notes("e", 1..=400)).await.unwrap();
    let mut tasks = Vec::new();
    for k in 0..8u32 {
        let store = if k % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            for step in 1..=20u32 {
                if k == 0 {
                    let n = 400 + step;
                    store.append("s", notes("e", [n])).await.unwrap();
                }
                let through = u64::from((step * 18 + k * 3).min(400));
                match store.trim("s", through).await {
                    Ok(outcome) => assert!(outcome.first_index > through),
                    Err(e) => assert!(e.is_retryable(), "{e}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let (first, kept) = retained(&a, "s").await;
    assert!(first > 300, "trimmed through {}", first - 1);
    let expected: Vec<String> = (first..=420).map(|n| format!("e{n}")).collect();
    assert_eq!(kept, expected);
    let mut admin = common::admin(&server).await;
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(&a.session_keys("s").meta)
        .query_async(&mut admin)
        .await
        .unwrap();
    let mut known: Vec<String> = fields
        .iter()
        .filter_map(|f| f.strip_prefix('#').map(str::to_owned))
        .collect();
    known.sort();
    let mut expected = expected;
    expected.sort();
    assert_eq!(known, expected, "the id index is the retained events'");
}

/// E1: a trim that meets a hole in the log is `Corrupted`, naming the
/// index, and writes nothing.
#[tokio::test]
async fn e1_a_trim_that_meets_a_hole_is_corrupted() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "trim-hole", |o| o).await;
    a.append("s", notes("e", 1..=4)).await.unwrap();
    a2_redis::testing::delete_log_entry(&server.url(), &a.session_keys("s").log, 2).await;
    match a.trim("s", 4).await {
        Err(Error::Corrupted { index, .. }) => assert_eq!(index, Some(2)),
        other => panic!("expected Corrupted, got {other:?}"),
    }
    assert_eq!(
        a.trim("s", 1).await.unwrap().first_index,
        2,
        "nothing written"
    );
}
