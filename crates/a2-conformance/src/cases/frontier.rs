//! SPEC §2 A13: an append at the frontier the caller expects — optimistic
//! concurrency for writers that decide on what they read.

use std::collections::BTreeMap;

use a2_core::{AppendOptions, ErrorCode, Expiry, NewEvent, Store};
use futures::future::join_all;

use super::races::handle;
use crate::support::*;
use crate::{SetupFn, fixture};

async fn at(
    s: &dyn Store,
    session: &str,
    frontier: u64,
    events: Vec<NewEvent>,
) -> a2_core::Result<Vec<u64>> {
    s.append_with(session, events, AppendOptions::new().if_frontier(frontier))
        .await
        .map(|o| o.events.iter().map(|r| r.event.index).collect())
}

/// A13: at the expected frontier the append is an append; at another one
/// it is `FrontierMoved` naming the frontier, and nothing is written — also
/// for a session without events (frontier 0).
pub async fn a13_an_append_at_another_frontier_writes_nothing(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    assert_eq!(
        at(s, "s", 0, vec![ev_id("a"), ev_id("b")]).await.unwrap(),
        [1, 2]
    );
    assert_eq!(at(s, "s", 2, vec![ev_id("c")]).await.unwrap(), [3]);
    let before = world(s, &["s", "t"]).await;
    for (session, expected, frontier) in [("s", 2, 3), ("s", 4, 3), ("s", 0, 3), ("t", 1, 0)] {
        let error = at(s, session, expected, vec![ev_id("x")])
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::FrontierMoved, "A13: {error}");
        match error {
            a2_core::Error::FrontierMoved {
                expected: e,
                frontier: f,
                ..
            } => assert_eq!((e, f), (expected, frontier), "A13: the error names both"),
            other => panic!("A13: {other}"),
        }
    }
    assert_eq!(world(s, &["s", "t"]).await, before, "A13: nothing written");
    assert!(
        !ErrorCode::FrontierMoved.is_retryable(),
        "A13: decide again, not retry"
    );
    // Through the peer, with an expiry in the same step (EX2).
    let options = AppendOptions::new()
        .if_frontier(3)
        .expiry(Expiry::ttl(60_000));
    let rows = fx
        .peer
        .append_with("s", vec![ev_id("d")], options)
        .await
        .unwrap();
    assert_eq!(rows.events[0].event.index, 4);
}

/// A13 after A5 and CL2: a replay is answered with its rows whatever the
/// frontier; a closed session is `SessionClosed`; an empty batch is A2's.
pub async fn a13_replays_closed_sessions_and_empty_batches_come_first(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let first = at(s, "s", 0, vec![ev_id("a")]).await.unwrap();
    at(s, "s", 1, vec![ev_id("b")]).await.unwrap();
    // The replay of the first append still names frontier 0.
    assert_eq!(
        at(s, "s", 0, vec![ev_id("a")]).await.unwrap(),
        first,
        "A5 first"
    );
    assert_eq!(
        at(s, "s", 7, Vec::new()).await.unwrap(),
        Vec::<u64>::new(),
        "A2 first"
    );
    s.close_session("s").await.unwrap();
    let error = at(s, "s", 0, vec![ev_id("c")]).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::SessionClosed, "CL2 first: {error}");
}

/// A13: writers that each read the frontier and append at it, racing on
/// one session through two store handles: every append that succeeds
/// found exactly the frontier it expected, the log stays dense, and each
/// refused writer learns the frontier that beat it.
pub async fn a13_racing_writers_at_one_frontier_win_one_at_a_time(setup: SetupFn) {
    let fx = fixture(setup).await;
    let tasks: Vec<_> = (0..6)
        .map(|t| {
            let store = handle(&fx, t);
            tokio::spawn(async move {
                let mut won = Vec::new();
                let mut frontier = 0;
                let mut tries = 0;
                while won.len() < 20 {
                    tries += 1;
                    assert!(tries < 10_000, "A13: a writer never got through");
                    let id = format!("t{t}-{}", won.len());
                    match at(store.as_ref(), "s", frontier, vec![ev_id(&id)]).await {
                        Ok(indexes) => {
                            assert_eq!(
                                indexes,
                                [frontier + 1],
                                "A13: right after the expected frontier"
                            );
                            won.push((frontier + 1, id));
                            frontier += 1;
                        }
                        Err(a2_core::Error::FrontierMoved { frontier: now, .. }) => {
                            assert!(now > frontier, "A13: the frontier only moves on");
                            frontier = now;
                        }
                        Err(other) => panic!("{other}"),
                    }
                }
                won
            })
        })
        .collect();
    let mut seen = BTreeMap::new();
    for won in join_all(tasks).await {
        for (index, id) in won.unwrap() {
            assert!(
                seen.insert(index, id).is_none(),
                "A13: index {index} won twice"
            );
        }
    }
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        (1..=120).collect::<Vec<u64>>()
    );
    let rows = read_all(fx.store.as_ref(), "s").await;
    for row in &rows {
        assert_eq!(
            seen.get(&row.event.index),
            Some(&row.event.id),
            "A13: stored as won"
        );
    }
}
