//! SPEC §2 `read` and `read_history`: R1, R2; and E1, reads of a damaged log.

use a2_core::{
    ErrorCode, HistoryOptions, NewEvent, ReadEventsOptions, ReadRange, Store, StoredEvent,
};
use futures::StreamExt;
use serde_json::json;

use crate::support::*;
use crate::{SetupFn, fixture};

async fn range(
    store: &dyn Store,
    session: &str,
    after_index: u64,
    through_index: Option<u64>,
) -> Vec<u64> {
    match store
        .read(
            session,
            ReadRange {
                after_index,
                through_index,
            },
        )
        .await
    {
        Ok(rows) => indexes(&rows),
        Err(err) => panic!("read failed: {err}"),
    }
}

/// R1: every row with after_index < index ≤ min(through_index, frontier), in
/// index order.
pub async fn r1_reads_the_requested_range_in_order(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 10).await;
    let all: Vec<u64> = (1..=10).collect();
    assert_eq!(range(s, "s", 0, None).await, all);
    assert_eq!(range(s, "s", 3, Some(7)).await, [4, 5, 6, 7]);
    assert_eq!(
        range(s, "s", 8, Some(100)).await,
        [9, 10],
        "R1: through beyond the frontier"
    );
    assert_eq!(range(s, "s", 9, None).await, [10]);
    assert_eq!(
        range(s, "s", 10, None).await,
        Vec::<u64>::new(),
        "R1: after the frontier"
    );
    assert_eq!(range(s, "s", 50, None).await, Vec::<u64>::new());
    assert_eq!(range(s, "s", 0, Some(0)).await, Vec::<u64>::new());
    assert_eq!(range(s, "s", 5, Some(5)).await, Vec::<u64>::new());
    assert_eq!(range(s, "s", 5, Some(6)).await, [6]);
    assert_eq!(
        range(fx.peer.as_ref(), "s", 0, Some(2)).await,
        [1, 2],
        "R1: through the peer"
    );
}

/// R1: an unknown session reads as `[]`.
pub async fn r1_unknown_session_reads_as_empty(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "known", 2).await;
    assert!(read_all(s, "unknown").await.is_empty());
    assert!(
        read_all(s, "know").await.is_empty(),
        "R1: a prefix of a session is another session"
    );
    assert_eq!(range(s, "unknown", 0, Some(5)).await, Vec::<u64>::new());
}

/// R1: a range larger than any page (2 500 rows) comes back whole,
/// contiguous and in order, from any starting point.
pub async fn r1_large_range_reads_every_row(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let mut appended: Vec<StoredEvent> = Vec::new();
    for batch in 0..5 {
        let events = (0..500)
            .map(|i| NewEvent::new("bulk", json!({ "n": batch * 500 + i })))
            .collect();
        appended.extend(append(s, "s", events).await);
    }
    let rows = read_all(s, "s").await;
    assert_eq!(rows.len(), 2_500);
    assert_eq!(rows, appended, "R1: the rows as appended");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.event.index, i as u64 + 1, "R1: contiguous");
        assert_eq!(row.event.payload, json!({ "n": i }));
    }
    let tail = range(s, "s", 777, Some(2_222)).await;
    assert_eq!(tail, (778..=2_222).collect::<Vec<u64>>());
}

/// R2: history pages backwards: the newest `limit` events before the bound,
/// in index order, and whether older ones exist.
pub async fn r2_history_pages_backwards(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let page = |before_index: Option<u64>, limit: usize| async move {
        match s
            .read_history("s", HistoryOptions::new(limit).before_index(before_index))
            .await
        {
            Ok(page) => (indexes(&page.events), page.has_more),
            Err(err) => panic!("read_history failed: {err}"),
        }
    };
    assert_eq!(page(None, 3).await, (vec![], false), "R2: an empty session");
    append_n(s, "s", 10).await;
    assert_eq!(
        page(None, 3).await,
        (vec![8, 9, 10], true),
        "R2: the newest page"
    );
    assert_eq!(page(Some(8), 3).await, (vec![5, 6, 7], true));
    assert_eq!(page(Some(5), 3).await, (vec![2, 3, 4], true));
    assert_eq!(
        page(Some(2), 3).await,
        (vec![1], false),
        "R2: the oldest page"
    );
    assert_eq!(
        page(Some(4), 3).await,
        (vec![1, 2, 3], false),
        "R2: exactly the rest"
    );
    assert_eq!(page(Some(1), 3).await, (vec![], false));
    assert_eq!(page(None, 100).await, ((1..=10).collect(), false));
    assert_eq!(
        page(Some(50), 2).await,
        (vec![9, 10], true),
        "R2: a bound beyond the frontier"
    );
    let rows = read_all(s, "s").await;
    let history = s
        .read_history("s", HistoryOptions::new(2).before_index(Some(6)))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(history.events, rows[3..5].to_vec(), "R2: the stored rows");
}

/// E1: a log with an entry missing or undecodable (damaged behind the
/// store's back through the setup's [`crate::DamageFn`]) is `Corrupted`,
/// naming the broken index, on every read that covers it (`read`,
/// `read_events`, `read_history`, `read_state`), never read as if nothing
/// were missing; reads that stop short of it, and other sessions, still
/// read; a live feed yields what precedes the hole, then `Corrupted` once,
/// then ends.
pub async fn e1_a_damaged_log_is_corrupted_on_every_read(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let Some(damage) = fx.damage.clone() else {
        panic!("E1: this store's setup gives no way to damage a log (Stores::with_damage)");
    };
    append_n(s, "s", 4).await;
    append_n(s, "t", 2).await;
    damage("s".to_owned(), 2).await;
    let corrupted_at = |result: a2_core::Result<()>, what: &str| match result {
        Err(a2_core::Error::Corrupted { index, session, .. }) => {
            assert_eq!(session.as_deref(), Some("s"), "E1 {what}: the session");
            index
        }
        Err(other) => panic!("E1 {what}: expected Corrupted, got {other}"),
        Ok(()) => panic!("E1 {what}: read a damaged log as if nothing were missing"),
    };
    let read = s.read("s", ReadRange::default()).await.map(drop);
    assert_eq!(corrupted_at(read, "read"), Some(2));
    let page = s
        .read_events("s", ReadEventsOptions::new(10))
        .await
        .map(drop);
    assert_eq!(corrupted_at(page, "read_events"), Some(2));
    let history = s.read_history("s", HistoryOptions::new(10)).await.map(drop);
    assert_eq!(corrupted_at(history, "read_history"), Some(2));
    let state = s.read_state("s", "r").await.map(drop);
    assert_eq!(corrupted_at(state, "read_state"), Some(2));
    // What does not cover the hole still reads.
    assert_eq!(range(s, "s", 2, None).await, [3, 4], "E1: after the hole");
    assert_eq!(range(s, "s", 0, Some(1)).await, [1], "E1: before the hole");
    assert_eq!(
        indexes(&read_all(s, "t").await),
        [1, 2],
        "E1: another session"
    );
    // The feed may deliver index 1 or read its whole first page at once
    // and meet the hole before delivering anything; it never delivers an
    // event at or past the hole.
    let mut feed = s.stream("s", 0);
    let mut delivered = Vec::new();
    loop {
        match next_item(&mut feed, "E1 feed").await {
            Ok(event) if event.index < 2 => delivered.push(event.index),
            Ok(event) => panic!("E1: the feed yielded {} across the hole", event.index),
            Err(err) => {
                assert_eq!(err.code(), ErrorCode::Corrupted, "E1 feed: {err}");
                break;
            }
        }
    }
    assert!(
        delivered.is_empty() || delivered == [1],
        "E1 feed: {delivered:?}"
    );
    match tokio::time::timeout(WAIT, feed.next()).await {
        Ok(None) => {}
        Ok(Some(item)) => panic!("E1: the feed went on after Corrupted: {item:?}"),
        Err(_) => panic!("E1: the feed did not end after Corrupted"),
    }
}
