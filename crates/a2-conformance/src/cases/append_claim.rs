//! SPEC §3 `append_and_claim`: AC1, AC2, AC3, AC4, AC5 (its atomicity against racing
//! claimers, C6, is in [`super::races`]).

use std::time::Duration;

use a2_core::{AppendClaim, AppendOutcome, ClaimOutcome, ErrorCode, Lease, NewEvent, Store};

use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

/// `append_and_claim` with a ttl lease, panicking on an error.
pub(crate) async fn append_claimed(
    store: &dyn Store,
    session: &str,
    events: Vec<NewEvent>,
    holder: &str,
    ttl: u64,
    limit: usize,
) -> AppendOutcome {
    let claim = AppendClaim::new(holder, Lease::Ttl(ttl), limit);
    match store.append_and_claim(session, events, claim).await {
        Ok(outcome) => outcome,
        Err(err) => panic!("append_and_claim to {session:?} failed: {err}"),
    }
}

/// AC1, AC2: the appended events that are ready at once are claimed, in
/// index order, as C2 claims them; a lane event behind a pending one, a
/// settled event and the session's earlier events are not. The rows
/// returned and read agree, the counters count the attempts, a claim finds
/// the rest, and a claimed event completes like any other.
pub async fn ac2_claims_the_appended_events_that_are_ready(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("early"), ev("in-l").lane("l")]).await;
    fx.clock.advance(10);
    let now = START_MS + 10;
    let out = append_claimed(
        s,
        "s",
        vec![
            ev("free"),
            ev("behind").lane("l"),
            ev("heads-m").lane("m"),
            ev("done").settled(),
            ev("free-too"),
            ev("second-in-m").lane("m"),
        ],
        "w1",
        1_000,
        10,
    )
    .await;
    assert_eq!(out.claimed, [3, 5, 7], "AC2: the ready appended events");
    assert_eq!(indexes(&out.events), [3, 4, 5, 6, 7, 8], "AC1: every row");
    assert!(out.has_pending, "A10");
    for row in &out.events {
        let claimed = out.claimed.contains(&row.event.index);
        if claimed {
            assert_eq!(row.attempt_count, 1, "AC2: attempt 1");
            assert_eq!(row.first_claimed_at, Some(now), "AC2: first_claimed_at");
            assert_eq!(row.last_claimed_at, Some(now), "AC2: last_claimed_at");
            assert_eq!(row.claim_holder.as_deref(), Some("w1"), "AC2: holder");
            assert_eq!(row.claim_expires_at, Some(now + 1_000), "AC2: now + ttl");
        } else {
            assert_eq!(row.attempt_count, 0, "AC2: {} not claimed", row.event.index);
            assert_eq!(row.claim_holder, None);
        }
    }
    assert_eq!(
        indexes(&out.claimed_rows().cloned().collect::<Vec<_>>()),
        [3, 5, 7]
    );
    let stored = read_all(s, "s").await;
    assert_eq!(
        stored[2..].to_vec(),
        out.events,
        "AC2: read shows the claims"
    );
    assert_eq!(
        counters(s, "s").await,
        (8, 7, 0, 3, 0),
        "AC2: three attempts counted"
    );
    let rest = claimed(fx.peer.as_ref(), "s", "w2", 1_000, 10).await;
    assert_eq!(
        indexes(&rest),
        [1, 2],
        "AC2: earlier events are left to claim; claimed ones are leased"
    );
    completed(s, "s", 3, 1, vec![]).await;
    completed(s, "s", 5, 1, vec![]).await;
    assert_eq!(
        indexes(&claimed(s, "s", "w2", 1_000, 10).await),
        [8],
        "CO2: completing the lane head claimed at append frees the next"
    );
}

/// AC2: at most `limit` are claimed, the first in index order; a claim takes
/// the rest.
pub async fn ac2_limit_takes_the_first_ready_events(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let events = (1..=5).map(|i| ev(&format!("t{i}"))).collect();
    let out = append_claimed(s, "s", events, "w", TTL, 2).await;
    assert_eq!(out.claimed, [1, 2], "AC2: up to limit, in index order");
    assert_eq!(indexes(&claimed(s, "s", "w", TTL, 10).await), [3, 4, 5]);
}

/// AC1: a lease that is no lease (ttl 0, an expiry not after now) is
/// `InvalidArgument`, and nothing is written.
pub async fn ac1_bad_lease_writes_nothing(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    for lease in [Lease::Ttl(0), Lease::ExpiresAt(START_MS)] {
        let claim = AppendClaim::new("w", lease, 5);
        let err = s
            .append_and_claim("s", vec![ev("a")], claim)
            .await
            .expect_err("AC1: a bad lease fails");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "AC1: {lease:?}");
    }
    assert!(read_all(s, "s").await.is_empty(), "AC1: nothing written");
    let claim = AppendClaim::new("w", Lease::ExpiresAt(START_MS + 500), 5);
    let out = s
        .append_and_claim("s", vec![ev("a")], claim)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        out.events[0].claim_expires_at,
        Some(START_MS + 500),
        "AC2: an absolute expiry is stored as is"
    );
}

/// AC3: a retry claims nothing and returns the rows as stored; an empty
/// batch claims nothing.
pub async fn ac3_retry_and_empty_batch_claim_nothing(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let first = append_claimed(s, "s", vec![ev_id("a"), ev_id("b")], "w1", TTL, 5).await;
    assert_eq!(first.claimed, [1, 2]);
    fx.clock.advance(10_001);
    let again = append_claimed(s, "s", vec![ev_id("a"), ev_id("b")], "w2", TTL, 5).await;
    assert!(again.claimed.is_empty(), "AC3: a retry claims nothing");
    assert_eq!(again.events, first.events, "AC3, A5: the rows as stored");
    let empty = append_claimed(s, "s", vec![], "w2", TTL, 5).await;
    assert!(empty.claimed.is_empty() && empty.events.is_empty(), "AC3");
    assert!(empty.has_pending, "A2");
    assert_eq!(counters(s, "s").await.3, 2, "AC3: no attempt counted");
}

/// AC4: limit 0 is a plain append.
pub async fn ac4_limit_zero_is_a_plain_append(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let out = append_claimed(s, "s", vec![ev("a"), ev("b")], "w", TTL, 0).await;
    assert!(out.claimed.is_empty(), "AC4");
    assert!(out.events.iter().all(|r| r.attempt_count == 0));
    assert_eq!(indexes(&claimed(s, "s", "w", TTL, 5).await), [1, 2]);
}

/// AC5, PS2: an append whose every pending event is claimed is announced to
/// nobody; one that leaves some unclaimed is, like a plain append.
pub async fn ac5_work_claimed_at_append_is_not_announced(setup: SetupFn) {
    let fx = fixture(setup).await;
    if !fx.caps.pending_wakeups {
        return;
    }
    let mut wakeups = live_wakeups(fx.peer.as_ref()).await;
    let s = fx.store.as_ref();
    append_claimed(s, "all-claimed", vec![ev("a"), ev("b")], "w", TTL, 5).await;
    append_claimed(s, "one-left", vec![ev("a"), ev("b")], "w", TTL, 1).await;
    append_claimed(
        s,
        "behind-lane",
        vec![ev("a").lane("l"), ev("b").lane("l")],
        "w",
        TTL,
        5,
    )
    .await;
    append(s, "marker", vec![ev("a")]).await;
    // Sessions of other partitions are announced on other channels, which
    // a transport may deliver in any order (REST follows each channel on
    // its own stream): wait for every expected announcement, then for a
    // quiet moment, in which a late one of "all-claimed" would show.
    let mut woken = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let expected = ["one-left", "behind-lane", "marker"];
    while !expected.iter().all(|e| woken.iter().any(|w| w == e)) {
        assert!(
            std::time::Instant::now() < deadline,
            "AC5: a session that kept unclaimed work was never announced: {woken:?}"
        );
        if let Some(w) = next_wakeup(&mut wakeups).await {
            woken.push(w);
        }
    }
    while let Some(w) = next_wakeup(&mut wakeups).await {
        woken.push(w);
    }
    assert!(
        !woken.iter().any(|w| w == "all-claimed"),
        "AC5: all of its work was claimed: {woken:?}"
    );
    // The session is still pending work (PS1), for when the lease runs out.
    assert!(
        all_pending(s).await.contains(&"all-claimed".to_owned()),
        "PS1"
    );
    assert!(matches!(
        claim(s, "all-claimed", "w2", TTL, 5).await,
        ClaimOutcome::Busy { .. }
    ));
}
