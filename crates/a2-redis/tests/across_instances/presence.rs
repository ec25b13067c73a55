//! Presence across instances and reconnects, and how long the server keeps
//! it (P4, P5).

use super::*;

/// P4: `presence_subscribe` returns once the server has the channel
/// subscription, and a patch applied by one instance then reaches the
/// other's subscriber.
#[tokio::test]
async fn p4_presence_patches_cross_instances() {
    let server = RedisServer::start();
    let (a, b, clock) = pair(&server, "presence", |o| o).await;
    let mut admin = common::admin(&server).await;
    let mut sub = a.presence_subscribe("room").await.unwrap();
    let channel = a.session_keys("room").presence_channel;
    assert_eq!(
        numsub(&mut admin, &channel).await,
        1,
        "subscribed on return"
    );
    let meta = PresenceMeta {
        seen: 7,
        at: clock.now_ms(),
        ttl_ms: 10_000,
    };
    let values = BTreeMap::from([("typing".to_owned(), Some(json!(true)))]);
    let applied = b
        .presence_set("room", "ann", values, meta)
        .await
        .unwrap()
        .expect("applied");
    let received = tokio::time::timeout(WAIT, sub.next())
        .await
        .expect("a patch")
        .expect("open")
        .expect("no error");
    assert_eq!(received, applied);
}

/// P4: a subscription made just after the push connection was cut is live
/// when `presence_subscribe` returns all the same: its sync waits for the
/// connection to come back and subscribe. The other instance then writes
/// two patches of one participant; heard live they arrive as themselves, in
/// order (a recovery re-read would have merged them into one).
#[tokio::test]
async fn p4_subscribing_while_the_push_connection_is_cut_is_live_on_return() {
    let server = RedisServer::start();
    let (a, b, clock) = pair(&server, "presence-cut", |o| o).await;
    let mut admin = common::admin(&server).await;
    // Keeps a's push connection open between rounds.
    let _held = a.presence_subscribe("held").await.unwrap();
    for round in 0..5_i64 {
        let killed = common::kill_push_connections(&mut admin).await;
        assert_eq!(killed, 1, "round {round}: a's push connection");
        let mut sub = a.presence_subscribe("room").await.unwrap();
        let participant = format!("p{round}");
        let mut applied = Vec::new();
        for (k, field) in ["first", "second"].into_iter().enumerate() {
            let meta = PresenceMeta {
                seen: round,
                at: clock.now_ms() + k as i64,
                ttl_ms: 60_000,
            };
            let values = BTreeMap::from([(field.to_owned(), Some(json!(round)))]);
            let patch = b
                .presence_set("room", &participant, values, meta)
                .await
                .unwrap()
                .expect("applied");
            applied.push(patch);
        }
        for expected in applied {
            let received = tokio::time::timeout(WAIT, sub.next())
                .await
                .expect("a patch")
                .expect("open")
                .expect("no error");
            assert_eq!(received, expected, "round {round}");
        }
    }
}

/// P4: after its connection comes back, a presence subscription re-reads
/// the namespace and emits what changed meanwhile (here: a change that
/// was never published, as if its message was lost while disconnected).
#[tokio::test]
async fn p4_presence_recovers_after_a_reconnect() {
    let server = RedisServer::start();
    let (a, _b, clock) = pair(&server, "presence-recovery", |o| o).await;
    let mut admin = common::admin(&server).await;
    let mut sub = a.presence_subscribe("room").await.unwrap();
    let meta = PresenceMeta {
        seen: 1,
        at: clock.now_ms(),
        ttl_ms: 60_000,
    };
    let ann = BTreeMap::from([("typing".to_owned(), Some(json!(true)))]);
    let first = a.presence_set("room", "ann", ann, meta).await.unwrap();
    let received = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(Some(received), first);
    // A second subscription joins the channel the first one holds, so the
    // server sends it no confirmation of its own.
    let mut late = a.presence_subscribe("room").await.unwrap();
    let again = BTreeMap::from([("typing".to_owned(), Some(json!(false)))]);
    let second = a.presence_set("room", "ann", again, meta).await.unwrap();
    for sub in [&mut sub, &mut late] {
        let received = tokio::time::timeout(WAIT, sub.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(Some(received), second);
    }

    // Bob appears without a message: written straight into the hash.
    let entry = format!(
        "{}|{}|{}",
        clock.now_ms(),
        clock.now_ms() + 60_000,
        json!({"participant": "bob", "field": "cursor", "value": 3, "seen": 2})
    );
    let _: i64 = redis::cmd("HSET")
        .arg(a.session_keys("room").presence)
        .arg("bob:cursor")
        .arg(entry)
        .query_async(&mut admin)
        .await
        .unwrap();
    let killed = common::kill_push_connections(&mut admin).await;
    assert_eq!(killed, 1);
    for sub in [&mut sub, &mut late] {
        let recovered = tokio::time::timeout(WAIT, sub.next())
            .await
            .expect("a recovery patch")
            .expect("open")
            .expect("no error");
        assert_eq!(
            recovered,
            PresencePatch {
                participant: "bob".into(),
                values: BTreeMap::from([("cursor".to_owned(), Some(json!(3)))]),
                seen: 2,
                at: clock.now_ms(),
            }
        );
    }
}

/// P5: the presence hash of a namespace expires on the server (an hour
/// after its longest-lived entry would), so an abandoned namespace does not
/// stay forever; a longer ttl extends it, a shorter one never shortens it.
#[tokio::test]
async fn p5_presence_hash_expires_on_the_server() {
    let server = RedisServer::start();
    let (a, _b, clock) = pair(&server, "presence-expiry", |o| o).await;
    let mut admin = common::admin(&server).await;
    let key = a.session_keys("room").presence;
    let set = |ttl_ms: u64| {
        let a = &a;
        let clock = clock.clone();
        async move {
            a.presence_set(
                "room",
                "ann",
                BTreeMap::from([("typing".to_owned(), Some(json!(true)))]),
                PresenceMeta {
                    seen: 1,
                    at: clock.now_ms(),
                    ttl_ms,
                },
            )
            .await
            .unwrap()
        }
    };
    let pttl = |admin: &mut redis::aio::MultiplexedConnection| {
        let key = key.clone();
        let mut admin = admin.clone();
        async move {
            let left: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut admin)
                .await
                .unwrap();
            left
        }
    };
    set(10_000).await;
    let first = pttl(&mut admin).await;
    assert!(first > 3_600_000 && first <= 3_610_000, "P5: {first} ms");
    clock.advance(1);
    set(7_200_000).await;
    let longer = pttl(&mut admin).await;
    assert!(
        longer > 10_000_000 && longer <= 10_800_000,
        "P5: extended to {longer} ms"
    );
    clock.advance(1);
    set(1_000).await;
    let kept = pttl(&mut admin).await;
    assert!(
        kept > 10_000_000,
        "P5: a shorter ttl never shortens it ({kept} ms)"
    );
    assert_eq!(
        a.presence_read("room").await.unwrap().len(),
        1,
        "P2 unchanged"
    );
}
