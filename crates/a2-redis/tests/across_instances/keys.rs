//! The keys on the server are the documented layout (RD3, RD4).

use super::*;

/// RD3, RD4: the keys a session uses are the ones docs/redis-layout.md
/// lists, under the store's prefix, with the percent-encoded session id as
/// the hash tag.
#[tokio::test]
async fn rd4_keys_match_the_documented_layout() {
    let server = RedisServer::start();
    let (a, _b, clock) = pair(&server, "layout", |o| o).await;
    let mut admin = common::admin(&server).await;
    a.append(
        "user:42",
        vec![
            NewEvent::new("e", json!(1)).lane("l"),
            NewEvent::new("e", json!(2)).lane("l"),
            NewEvent::new("e", json!(3)),
        ],
    )
    .await
    .unwrap();
    a.claim_available(ClaimRequest {
        session: "user:42".into(),
        holder: "w".into(),
        lease: Lease::Ttl(1000),
        exclude_indexes: vec![],
        limit: 1,
    })
    .await
    .unwrap();
    a.put_snapshots(
        "user:42",
        vec![SnapshotWrite {
            reducer: "r".into(),
            index: 1,
            state: json!({}),
        }],
    )
    .await
    .unwrap();
    a.presence_set(
        "user:42",
        "ann",
        BTreeMap::from([("typing".to_owned(), Some(json!(true)))]),
        PresenceMeta {
            seen: 0,
            at: clock.now_ms(),
            ttl_ms: 1000,
        },
    )
    .await
    .unwrap();
    let prefix = prefix_of(&a);
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut admin)
        .await
        .unwrap();
    keys.sort();
    let session = a.session_keys("user:42");
    // The partition tag comes first, then the encoded id; the session's
    // ready set is empty (its only entry was claimed), so it does not
    // exist, and the lane-less event 3 waits past the claim cursor, in no
    // queue at all.
    assert!(
        session.log.ends_with(":user%3A42:log")
            && session.log.starts_with(&format!("{prefix}:{{p")),
        "{}",
        session.log
    );
    let mut expected: Vec<String> = vec![
        session.log.clone(),
        session.meta.clone(),
        session.timed.clone(),
        session.lanes.clone(),
        session.snapshots.clone(),
        session.presence.clone(),
        session.sessions.clone(),
        session.pending.clone(),
        format!("{prefix}:config"),
    ];
    expected.sort();
    assert_eq!(keys, expected);
    let lanes: Vec<String> = redis::cmd("ZRANGE")
        .arg(&session.lanes)
        .arg(0)
        .arg(-1)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(lanes, ["l:00000000000000000001", "l:00000000000000000002"]);
    let meta: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(&session.meta)
        .arg(&[
            "event_count",
            "pending_count",
            "attempt_count",
            "cursor",
            "#e1",
            "#e3",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    let meta: Vec<_> = meta.iter().map(|v| v.as_deref()).collect();
    // The claim passed lane events 1 and 2 in the log: the cursor stops
    // before event 3, the first lane-less event it did not hand out.
    assert_eq!(
        meta,
        [
            Some("3"),
            Some("3"),
            Some("1"),
            Some("2"),
            Some("1"),
            Some("3")
        ]
    );
    let record: String = redis::cmd("HGET")
        .arg(&session.meta)
        .arg("1")
        .query_async(&mut admin)
        .await
        .unwrap();
    let record: serde_json::Value = serde_json::from_str(&record).unwrap();
    assert_eq!(record["a"], json!(1));
    assert_eq!(record["h"], json!("w"));
    assert_eq!(record["l"], json!("l"));
    let timed = timed_of(&mut admin, &session.timed).await;
    assert_eq!(timed, [("1".to_owned(), (clock.now_ms() + 1000) as f64)]);
    let config: Vec<String> = redis::cmd("HMGET")
        .arg(format!("{prefix}:config"))
        .arg(&["layout", "partitions"])
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(config, ["2".to_owned(), a.partitions().to_string()]);
}

/// RD3: a batch script keeps the key names of the sessions it has seen
/// (`NAMES_KEPT` of them, then it starts over), and a kept name is only
/// ever its own session's. Two stores of different prefixes on one server
/// write sessions of the same names from 64 tasks, twice around more
/// sessions than are kept: each session's log holds its own events, and
/// its lease set the leases of its own claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rd3_kept_key_names_stay_their_own_session_s() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(common::START_MS));
    let a = Arc::new(common::open(&server, common::options("names-a", clock.clone())).await);
    let b = Arc::new(common::open(&server, common::options("names-b", clock)).await);
    let sessions = NAMES_KEPT + 100;
    for round in 0..2 {
        let mut tasks = Vec::new();
        for t in 0..64 {
            let (a, b) = (a.clone(), b.clone());
            tasks.push(tokio::spawn(async move {
                for s in (t..sessions).step_by(64) {
                    let session = format!("s{s}");
                    a.append_and_claim(
                        &session,
                        vec![NewEvent::new("a", json!([s, round]))],
                        AppendClaim::new("w", Lease::Ttl(60_000), 1),
                    )
                    .await
                    .unwrap();
                    b.append(&session, vec![NewEvent::new("b", json!([s, round]))])
                        .await
                        .unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    }
    let mut admin = common::admin(&server).await;
    for s in 0..sessions {
        let session = format!("s{s}");
        for (store, kind) in [(&a, "a"), (&b, "b")] {
            let log = log_of(store, &session).await;
            let seen: Vec<_> = log
                .iter()
                .map(|e| (e.event_type.clone(), e.payload.clone()))
                .collect();
            assert_eq!(
                seen,
                [
                    (kind.to_owned(), json!([s, 0])),
                    (kind.to_owned(), json!([s, 1]))
                ],
                "{kind}'s {session}"
            );
        }
        let leased: Vec<_> = timed_of(&mut admin, &a.session_keys(&session).timed)
            .await
            .into_iter()
            .map(|(member, _)| member)
            .collect();
        assert_eq!(leased, ["1", "2"], "a's leases of {session}");
        assert!(
            timed_of(&mut admin, &b.session_keys(&session).timed)
                .await
                .is_empty()
        );
    }
}
