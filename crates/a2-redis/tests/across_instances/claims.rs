//! Claims across instances (C6) and a claim that meets a hole (E1).

use super::*;

/// C6: two instances claiming the same session concurrently never hand out
/// the same (index, attempt) twice.
#[tokio::test]
async fn c6_claims_race_across_instances_without_double_hand_out() {
    let server = RedisServer::start();
    let (a, b, _clock) = pair(&server, "race", |o| o).await;
    let events = (0..200).map(|n| NewEvent::new("job", json!(n))).collect();
    a.append("jobs", events).await.unwrap();
    let stores = [Arc::new(a), Arc::new(b)];
    let mut tasks = Vec::new();
    for (k, store) in stores.iter().cycle().take(8).enumerate() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let outcome = store
                    .claim_available(ClaimRequest {
                        session: "jobs".into(),
                        holder: format!("w{k}"),
                        lease: Lease::Ttl(60_000),
                        exclude_indexes: vec![],
                        limit: 3,
                    })
                    .await
                    .unwrap();
                match outcome {
                    ClaimOutcome::Claimed { events: rows, .. } => {
                        got.extend(rows.iter().map(|r| (r.event.index, r.attempt_count)))
                    }
                    _ => return got,
                }
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let distinct: HashSet<_> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "an attempt was handed out twice");
    assert_eq!(all.len(), 200, "every event was claimed once");
}

/// E1 on Redis, where a processing record lives apart from its log entry:
/// a claim that would hand out an event whose log entry is gone fails with
/// `Corrupted` naming the index, and writes nothing. (The reads of a
/// damaged log are the conformance case `e1_a_damaged_log_is_corrupted_on_every_read`.)
#[tokio::test]
async fn e1_a_claim_that_meets_a_hole_is_corrupted() {
    let server = RedisServer::start();
    let (a, _b, _clock) = pair(&server, "hole", |o| o).await;
    let events: Vec<_> = (1..=4).map(|i| NewEvent::new("e", json!(i))).collect();
    a.append("s", events).await.unwrap();
    a2_redis::testing::delete_log_entry(&server.url(), &a.session_keys("s").log, 2).await;
    let claim = ClaimRequest {
        session: "s".into(),
        holder: "w".into(),
        lease: Lease::Ttl(1000),
        exclude_indexes: vec![],
        limit: 10,
    };
    match a.claim_available(claim).await {
        Err(Error::Corrupted { index, .. }) => assert_eq!(index, Some(2)),
        other => panic!("expected Corrupted, got {other:?}"),
    }
    // Nothing was written: index 1, which the claim met first, is unclaimed.
    let range = ReadRange {
        after_index: 0,
        through_index: Some(1),
    };
    let rows = a.read("s", range).await.unwrap();
    assert_eq!(rows[0].attempt_count, 0, "the failed claim leased nothing");
}
