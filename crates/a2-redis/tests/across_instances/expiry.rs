//! Expiry on the server (EX5): an expiring session's keys carry a
//! server-side expiry, so its memory is freed with no a2 process running,
//! and later writes drop its id from the partition's sets.

use super::*;

/// The `PTTL` of `key` (ms), -2 when it does not exist.
async fn pttl(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(admin)
        .await
        .unwrap()
}

/// The score of `member` in the sorted set `key`.
async fn score(
    admin: &mut redis::aio::MultiplexedConnection,
    key: &str,
    member: &str,
) -> Option<i64> {
    redis::cmd("ZSCORE")
        .arg(key)
        .arg(member)
        .query_async::<Option<f64>>(admin)
        .await
        .unwrap()
        .map(|s| s as i64)
}

/// EX5: the keys of a session with a ttl expire on the server one grace
/// after its deadline, with every store closed; the partition's sets keep
/// its id only until a later write of the partition passes by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex5_an_expired_sessions_keys_expire_on_the_server_and_leave_the_partition() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(common::START_MS));
    let options = common::options("expiry", clock.clone()).partitions(1);
    let store = common::open(&server, options.clone()).await;
    let mut admin = common::admin(&server).await;
    let events = vec![NewEvent::new("e", json!(1)), NewEvent::new("e", json!(2))];
    store
        .append_with(
            "short",
            events,
            AppendOptions::new().expiry(Expiry::ttl(300)),
        )
        .await
        .unwrap();
    store
        .put_snapshots(
            "short",
            vec![SnapshotWrite {
                reducer: "r".into(),
                index: 1,
                state: json!(1),
            }],
        )
        .await
        .unwrap();
    let keys = store.session_keys("short");
    for key in [&keys.log, &keys.meta, &keys.snapshots] {
        let left = pttl(&mut admin, key).await;
        assert!(
            (1..=1_300).contains(&left),
            "{key} expires one grace after the deadline: {left}"
        );
    }
    assert_eq!(
        score(&mut admin, &keys.expiring, "short").await,
        Some(common::START_MS + 300 + 1_000),
        "listed in the partition's expiring set"
    );
    // A session without expiry is left alone.
    store
        .append("kept", vec![NewEvent::new("e", json!(1))])
        .await
        .unwrap();
    assert_eq!(pttl(&mut admin, &store.session_keys("kept").meta).await, -1);
    store.close().await;

    // No a2 process runs now: the server frees the keys by itself.
    let deadline = Instant::now() + WAIT;
    loop {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(&keys.log)
            .arg(&keys.meta)
            .arg(&keys.snapshots)
            .query_async(&mut admin)
            .await
            .unwrap();
        if exists == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the keys outlived their expiry");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        score(&mut admin, &keys.sessions, "short").await.is_some(),
        "the id stays listed until a write passes by"
    );

    // The next write of the partition (by a session that expires too)
    // drops the expired id from the partition's sets.
    clock.advance(2_000);
    let store = common::open(&server, options).await;
    let listed = store
        .list_sessions(ListSessionsOptions::new(10))
        .await
        .unwrap();
    let ids: Vec<&str> = listed
        .sessions
        .iter()
        .map(|s| s.session_id.as_str())
        .collect();
    assert_eq!(ids, ["kept"], "an expired session is never listed (EX3)");
    store
        .append_with(
            "other",
            vec![NewEvent::new("e", json!(1))],
            AppendOptions::new().expiry(Expiry::ttl(60_000)),
        )
        .await
        .unwrap();
    assert_eq!(score(&mut admin, &keys.sessions, "short").await, None);
    assert_eq!(score(&mut admin, &keys.expiring, "short").await, None);
    assert!(score(&mut admin, &keys.expiring, "other").await.is_some());
}

/// EX1, EX5: a close and a trim are activity: they move a sliding deadline
/// and the keys' expiry on the server with it (a session closed or trimmed
/// near its deadline is not freed under its readers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex1_a_close_and_a_trim_move_the_keys_expiry() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(common::START_MS));
    let options = common::options("touch", clock.clone()).partitions(1);
    let store = common::open(&server, options).await;
    let mut admin = common::admin(&server).await;
    for session in ["closed", "trimmed"] {
        let events = vec![
            NewEvent::new("e", json!(1)).settled(),
            NewEvent::new("e", json!(2)),
        ];
        store
            .append_with(
                session,
                events,
                AppendOptions::new().expiry(Expiry::ttl(10_000)),
            )
            .await
            .unwrap();
    }
    // 8 s later by the store's clock the keys have about 3 s left (the
    // server's clock has not moved: its expiry is set back by hand)…
    clock.advance(8_000);
    for session in ["closed", "trimmed"] {
        let _: i64 = redis::cmd("PEXPIRE")
            .arg(&store.session_keys(session).meta)
            .arg(3_000)
            .query_async(&mut admin)
            .await
            .unwrap();
    }
    store.close_session("closed").await.unwrap();
    store.trim("trimmed", 1).await.unwrap();
    // …unless the close and the trim moved them: 10 s and a grace again.
    for session in ["closed", "trimmed"] {
        let left = pttl(&mut admin, &store.session_keys(session).meta).await;
        assert!(
            (9_000..=11_000).contains(&left),
            "{session}: the keys expire a ttl and a grace after the write, not {left} ms"
        );
    }
    store.close().await;
}
