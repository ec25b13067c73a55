//! Forks on one server (FK1, FK2, FK6): a fork far behind the frontier is
//! copied page by page, one near it from the source's dumps; both give
//! the same rows, and neither leaves hidden keys behind.

use super::*;

/// FK6: a session of 10 020 events (some in a lane, some leased, one
/// dead-lettered) forked at 12 — more than 10 000 events after the index,
/// so page by page — and at 10 015, from dumps: each fork holds the
/// source's rows with leases released, is listed with its counters, runs
/// its own work, and no hidden key is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fk6_forks_far_from_and_near_the_frontier_copy_the_same_rows() {
    let server = RedisServer::start();
    let (store, peer, _clock) = pair(&server, "fork", |o| o).await;
    let mut events: Vec<NewEvent> = (0..20)
        .map(|n| {
            let event = NewEvent::new("job", json!(n));
            if n % 3 == 0 { event.lane("q") } else { event }
        })
        .collect();
    events.extend((20..10_020).map(|n| NewEvent::new("note", json!(n)).settled()));
    for batch in events.chunks(2_000) {
        store.append("s", batch.to_vec()).await.unwrap();
    }
    let claim = |limit| ClaimRequest {
        session: "s".into(),
        holder: "w".into(),
        lease: Lease::Ttl(600_000),
        exclude_indexes: vec![],
        limit,
    };
    let ClaimOutcome::Claimed { events: rows, .. } = store.claim_available(claim(6)).await.unwrap()
    else {
        panic!("nothing claimed");
    };
    let request = |index| FailRequest {
        session: "s".into(),
        index,
        attempt: 1,
        error: "no".into(),
        max_failures: 1,
        retry_at: None,
    };
    store
        .fail_attempt(request(rows[0].event.index))
        .await
        .unwrap();
    let source = store.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(source.len(), 10_020);
    for (at, target) in [(12, "far"), (10_015, "near")] {
        let outcome = store.fork("s", at, target).await.unwrap();
        assert_eq!(outcome, ForkOutcome::Forked { first_index: 1 });
        let copy = peer.read(target, ReadRange::default()).await.unwrap();
        assert!(
            copy == a2_conformance::forked_rows(&source[..at as usize], target),
            "FK1: {target}"
        );
        let listed = peer
            .list_sessions(ListSessionsOptions::new(10).prefix(Some(target.to_owned())))
            .await
            .unwrap();
        let summary = &listed.sessions[0];
        let pending = copy.iter().filter(|r| r.is_pending()).count() as u64;
        let attempts: u64 = copy.iter().map(|r| u64::from(r.attempt_count)).sum();
        assert_eq!(
            (
                summary.pending_count,
                summary.failed_count,
                summary.attempt_count
            ),
            (pending, 1, attempts),
            "FK2: {target}'s counters"
        );
        // Its pending work is its own: every pending event is claimable in
        // order, as its lane allows.
        let ClaimOutcome::Claimed { events: mine, .. } = peer
            .claim_available(ClaimRequest {
                session: target.into(),
                ..claim(100)
            })
            .await
            .unwrap()
        else {
            panic!("{target}: nothing to claim");
        };
        let ready: Vec<u64> = copy
            .iter()
            .filter(|r| r.is_pending())
            .filter(|r| match &r.event.lane {
                None => true,
                Some(_) => {
                    let head = copy
                        .iter()
                        .find(|o| o.event.lane == r.event.lane && o.processed_at.is_none())
                        .map(|o| o.event.index);
                    head == Some(r.event.index)
                }
            })
            .map(|r| r.event.index)
            .collect();
        let got: Vec<u64> = mine.iter().map(|r| r.event.index).collect();
        assert_eq!(got, ready, "FK2: {target}'s ready events");
    }
    let mut admin = common::admin(&server).await;
    let hidden: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*::fork:*", store.prefix()))
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(hidden.is_empty(), "FK6: staged keys left: {hidden:?}");
}
