//! SPEC §2 `read` and `read_history`: R1, R2.

use a2_core::{HistoryOptions, NewEvent, ReadRange, Store, StoredEvent};
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
