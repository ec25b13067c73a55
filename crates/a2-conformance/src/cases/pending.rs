//! SPEC §3 `pending_sessions`: PS1.

use crate::support::*;
use crate::{SetupFn, fixture};

/// PS1: exactly the sessions with pending events (leased or blocked ones
/// count; settled, processed and dead-lettered ones do not), through either
/// handle.
pub async fn ps1_pending_sessions_lists_sessions_with_pending_events(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    assert!(all_pending(s).await.is_empty(), "PS1: an empty store");
    append(s, "waiting", vec![ev("a")]).await;
    append(s, "settled", vec![ev("a").settled()]).await;
    append(s, "leased", vec![ev("a")]).await;
    claimed(s, "leased", "w", TTL, 1).await;
    append(s, "done", vec![ev("a")]).await;
    claimed(s, "done", "w", TTL, 1).await;
    completed(s, "done", 1, 1, vec![ev("r").settled()]).await;
    append(s, "dead", vec![ev("a")]).await;
    claimed(s, "dead", "w", TTL, 1).await;
    failed(s, "dead", 1, 1, 1, None).await;
    append(s, "blocked", vec![ev("a").lane("l"), ev("b").lane("l")]).await;
    claimed(s, "blocked", "w", TTL, 1).await;
    failed(s, "blocked", 1, 1, 1, None).await;
    append(s, "retrying", vec![ev("a")]).await;
    claimed(s, "retrying", "w", TTL, 1).await;
    failed(s, "retrying", 1, 1, 3, Some(crate::START_MS + 60_000)).await;
    let expected = ["blocked", "leased", "retrying", "waiting"];
    assert_eq!(all_pending(s).await, expected, "PS1");
    assert_eq!(
        all_pending(fx.peer.as_ref()).await,
        expected,
        "PS1: through the peer"
    );
    completed(s, "leased", 1, 1, vec![]).await;
    assert_eq!(
        all_pending(s).await,
        ["blocked", "retrying", "waiting"],
        "PS1: processed leaves the list"
    );
    append(s, "done", vec![ev("again")]).await;
    assert_eq!(
        all_pending(s).await,
        ["blocked", "done", "retrying", "waiting"],
        "PS1: a new pending event"
    );
}

/// PS1: pages in byte order, each at most `limit` long, chained by cursors,
/// together listing every pending session once.
pub async fn ps1_pending_sessions_pages_in_byte_order(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let mut names: Vec<String> = (0..25).map(|i| format!("s{i}")).collect();
    names.extend(["B".into(), "a".into(), "é".into(), "~".into(), "a b".into()]);
    for name in &names {
        append(s, name, vec![ev("a")]).await;
    }
    append(s, "quiet", vec![ev("a").settled()]).await;
    names.sort();
    for limit in [1, 3, 7, 100] {
        let pages = pending_pages(s, limit).await;
        let listed: Vec<String> = pages.concat();
        assert_eq!(listed, names, "PS1: byte order, each once (limit {limit})");
    }
}
