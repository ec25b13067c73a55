//! SPEC §3 `pending_sessions`: PS1.

use std::time::Duration;

use futures::StreamExt;

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

/// PS2: `pending_wakeups` on one handle, live once the call returned,
/// names the very first session whose pending count rises from zero
/// through the other handle (another process, on stores with an
/// independent peer), once per rise; settled events are no work. A store
/// without push says so in its capabilities, and its stream yields
/// nothing.
pub async fn ps2_wakeups_name_sessions_that_gain_work(setup: SetupFn) {
    let fx = fixture(setup).await;
    let mut wakeups = live_wakeups(fx.peer.as_ref()).await;
    let s = fx.store.as_ref();
    if !fx.caps.pending_wakeups {
        append(s, "quiet", vec![ev("a")]).await;
        let woken = tokio::time::timeout(Duration::from_millis(200), wakeups.next()).await;
        assert!(
            woken.is_err(),
            "PS2: a store without push yields no wake-up"
        );
        return;
    }
    // Live when the call returned: the first rise is heard, with no try
    // before it.
    append(s, "gains", vec![ev("a")]).await;
    assert_eq!(
        next_wakeup_within(&mut wakeups, WAIT).await.as_deref(),
        Some("gains"),
        "PS2: the first session to gain work after the subscription"
    );
    // Settled events are no work, and a session that has pending work
    // already does not rise from zero: neither is announced.
    append(s, "settled-only", vec![ev("c").settled()]).await;
    append(s, "fresh", vec![ev("d")]).await;
    append(s, "fresh", vec![ev("e")]).await;
    assert_eq!(
        next_wakeup_within(&mut wakeups, WAIT).await.as_deref(),
        Some("fresh"),
        "PS2: a session that gains work; settled events are none"
    );
    assert_eq!(
        next_wakeup(&mut wakeups).await,
        None,
        "PS2: one wake-up per rise"
    );
}

/// PS2: work appended to a session whose pending events are none of them
/// claimable (leased, delayed, behind a lane head) is announced, though its
/// pending count did not rise from zero, and so are released leases (RL1);
/// an append to a session with claimable work already is not (a worker
/// there finds it), and neither is one that claims all it appends (AC5).
/// A store without push yields nothing.
pub async fn ps2_claimable_work_in_a_busy_session_and_releases_are_announced(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let mut wakeups = live_wakeups(fx.peer.as_ref()).await;
    assert_eq!(
        fx.peer.pushes_wakeups(),
        fx.caps.pending_wakeups,
        "PS2: the store says whether it pushes"
    );
    if !fx.caps.pending_wakeups {
        return;
    }
    // Busy: its one pending event is leased; a delayed one waits.
    append(
        s,
        "busy",
        vec![ev("a"), ev("later").delay(Duration::from_secs(60))],
    )
    .await;
    claimed(s, "busy", "w", 60_000, 10).await;
    while next_wakeup(&mut wakeups).await.is_some() {}
    append(s, "busy", vec![ev("b")]).await;
    assert_eq!(
        next_wakeup(&mut wakeups).await.as_deref(),
        Some("busy"),
        "PS2: claimable work in a session where nothing was claimable"
    );
    // Claimable work there already (#3 unclaimed): nothing to announce.
    append(s, "busy", vec![ev("c")]).await;
    // A release makes the leased event claimable: announced.
    let released = s
        .release_claims(a2_core::ReleaseRequest {
            session: "busy".into(),
            holder: "w".into(),
            claims: vec![at(1, 1)],
        })
        .await
        .unwrap();
    assert_eq!(released, vec![1]);
    assert_eq!(
        next_wakeup(&mut wakeups).await.as_deref(),
        Some("busy"),
        "PS2: a release is announced, the append to a session with claimable work was not"
    );
    assert_eq!(next_wakeup(&mut wakeups).await, None, "PS2: nothing more");
}
