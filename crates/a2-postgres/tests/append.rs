//! Appends on a real Postgres (Debian's, started by the tests): in the
//! store's own transactions, from many tasks and store instances at once,
//! and inside the application's transaction — committed, rolled back,
//! refused, and cut short by a process killed before its commit.

use std::time::Duration;

use a2_core::{AppendOptions, ErrorCode, NewEvent, ReadRange, StoreOptions};
use a2_postgres::testing::shared;
use a2_postgres::{PostgresOptions, PostgresStore};
use serde_json::json;
use tokio_postgres::NoTls;

mod common;

use common::{client, listen, within};

/// A store in a schema of its own on the shared server.
async fn store(schema: &str) -> PostgresStore {
    common::store_on(schema, None).await
}

fn ev(kind: &str, n: i64) -> NewEvent {
    NewEvent::new(kind, json!({ "n": n }))
}

#[tokio::test]
async fn a1_a5_a6_appends_read_back_and_replay() {
    let store = store("t_append_basics").await;
    let out = store
        .append(
            "s",
            vec![ev("a", 1), ev("b", 2).settled(), ev("c", 3).lane("l")],
        )
        .await
        .unwrap();
    assert_eq!(
        out.events.iter().map(|e| e.event.index).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(out.has_pending);
    let read = store.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(read, out.events, "A1: the rows as stored");
    assert_eq!(read[1].processed_at, Some(read[1].event.created_at), "A8");
    // A5: the same batch again (same ids) is a replay.
    let mut again: Vec<NewEvent> = out
        .events
        .iter()
        .map(|e| {
            let mut n = NewEvent::new(e.event.event_type.clone(), e.event.payload.clone());
            n.id = Some(e.event.id.clone());
            n
        })
        .collect();
    again[1].settled = true;
    again[2].lane = Some("l".into());
    let replay = store.append("s", again.clone()).await.unwrap();
    assert_eq!(replay.events, out.events, "A5: the stored rows");
    // A6: part of the batch known, part new.
    again.push(ev("d", 4));
    let partial = store.append("s", again).await.unwrap_err();
    assert_eq!(
        partial.code(),
        ErrorCode::PartialDuplicateBatch,
        "{partial}"
    );
    assert_eq!(
        store.read("s", ReadRange::default()).await.unwrap().len(),
        3
    );
    // A13: at the frontier expected only.
    let moved = store
        .append_with("s", vec![ev("e", 5)], AppendOptions::new().if_frontier(2))
        .await
        .unwrap_err();
    assert_eq!(moved.code(), ErrorCode::FrontierMoved, "{moved}");
    // R1 across pages.
    let many: Vec<NewEvent> = (0..2_500).map(|n| ev("m", n)).collect();
    store.append("big", many).await.unwrap();
    let all = store.read("big", ReadRange::default()).await.unwrap();
    assert_eq!(all.len(), 2_500);
    assert!(all.iter().zip(1..).all(|(e, i)| e.event.index == i));
}

/// A1, C6 across processes' worth of store instances: many tasks append to
/// one session through four instances at once; the log is dense, every
/// event is there once, each batch contiguous.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_through_many_instances_keep_the_log_dense() {
    let stores: Vec<PostgresStore> =
        futures::future::join_all((0..4).map(|_| store("t_append_race"))).await;
    let tasks = (0..32).map(|t| {
        let store = stores[t % stores.len()].clone();
        tokio::spawn(async move {
            let mut indexes = Vec::new();
            for k in 0..10 {
                let out = store
                    .append("race", vec![ev("x", t as i64 * 100 + k), ev("y", k)])
                    .await
                    .unwrap();
                assert_eq!(out.events[1].event.index, out.events[0].event.index + 1);
                indexes.extend(out.events.iter().map(|e| e.event.index));
            }
            indexes
        })
    });
    let mut all: Vec<u64> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .flat_map(|r| r.unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (1..=640).collect::<Vec<_>>(), "every index once");
    let read = stores[0].read("race", ReadRange::default()).await.unwrap();
    assert_eq!(read.len(), 640);
}

/// The application's order and the event that starts its agent commit
/// together; the commit wakes followers; a rollback leaves neither the
/// rows nor a wake-up.
#[tokio::test]
async fn append_in_commits_and_rolls_back_with_the_applications_postgres_transaction() {
    let store = store("t_append_in").await;
    let mut app = client().await;
    app.batch_execute("CREATE TABLE IF NOT EXISTS t_append_in_orders (id bigint PRIMARY KEY)")
        .await
        .unwrap();
    let (_listener, mut notices) = listen("t_append_in.events").await;

    // Rolled back: nothing, and no notice.
    let mut tx = app.transaction().await.unwrap();
    tx.execute("INSERT INTO t_append_in_orders VALUES (1)", &[])
        .await
        .unwrap();
    let out = store
        .append_in(&mut tx, "order-1", vec![ev("order.placed", 1)])
        .await
        .unwrap();
    assert_eq!(out.events[0].event.index, 1);
    tx.rollback().await.unwrap();
    assert!(
        store
            .read("order-1", ReadRange::default())
            .await
            .unwrap()
            .is_empty()
    );

    // Committed: both, and the notice — the first one heard, so the rolled
    // back append sent none.
    let mut tx = app.transaction().await.unwrap();
    tx.execute("INSERT INTO t_append_in_orders VALUES (2)", &[])
        .await
        .unwrap();
    store
        .append_in(&mut tx, "order-2", vec![ev("order.placed", 2)])
        .await
        .unwrap();
    // Not visible to others before the commit.
    assert!(
        store
            .read("order-2", ReadRange::default())
            .await
            .unwrap()
            .is_empty()
    );
    tx.commit().await.unwrap();
    let heard = within("the commit's notice", notices.recv()).await.unwrap();
    let heard: serde_json::Value = serde_json::from_str(&heard).unwrap();
    assert_eq!(heard["s"], "order-2", "the rolled-back append sent nothing");
    assert_eq!(
        store
            .read("order-2", ReadRange::default())
            .await
            .unwrap()
            .len(),
        1
    );
    let orders: Vec<i64> = app
        .query("SELECT id FROM t_append_in_orders ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(orders, [2]);
}

/// A follower in another store instance (another process's pool and
/// listener) and a worker's wake-up stream hear an append made in the
/// application's transaction at its commit, and never one rolled back: the
/// first event the follower gets, and the first wake-up, are the committed
/// ones, though the rolled-back append came first.
#[tokio::test]
async fn followers_and_workers_hear_an_append_in_a_postgres_transaction_only_at_its_commit() {
    use a2_core::Store;
    use futures::StreamExt;

    let store = store("t_append_in_heard").await;
    let other = store_in("t_append_in_heard").await;
    let mut feed = other.stream("chat", 0);
    let mut wakeups = other.pending_wakeups().await.unwrap();
    let mut app = client().await;

    let mut tx = app.transaction().await.unwrap();
    let gone = NewEvent::new("message", json!({ "n": 1 })).id("gone");
    store.append_in(&mut tx, "chat", vec![gone]).await.unwrap();
    store
        .append_in(&mut tx, "draft", vec![ev("message", 1)])
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let mut tx = app.transaction().await.unwrap();
    let kept = NewEvent::new("message", json!({ "n": 2 })).id("kept");
    store.append_in(&mut tx, "chat", vec![kept]).await.unwrap();
    // Before the commit the other instance reads nothing.
    assert!(
        other
            .read("chat", ReadRange::default())
            .await
            .unwrap()
            .is_empty()
    );
    tx.commit().await.unwrap();

    let first = within("the committed event", feed.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((first.index, first.id.as_str()), (1, "kept"));
    let woken = within("the commit's wake-up", wakeups.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(woken, "chat", "the rolled-back append to draft woke nobody");
}

/// A second store instance on `schema`, as another process has.
async fn store_in(schema: &str) -> PostgresStore {
    common::store_on(schema, None).await
}

/// A refused append inside the application's transaction is undone alone:
/// the application's own statements still commit.
#[tokio::test]
async fn a_refused_append_in_leaves_the_applications_postgres_transaction_usable() {
    let store = store("t_append_in_refused").await;
    store
        .append_with("closed", vec![ev("a", 1)], AppendOptions::new().close())
        .await
        .unwrap();
    let mut app = client().await;
    app.batch_execute(
        "CREATE TABLE IF NOT EXISTS t_append_in_refused_notes (id bigint PRIMARY KEY)",
    )
    .await
    .unwrap();
    let mut tx = app.transaction().await.unwrap();
    tx.execute("INSERT INTO t_append_in_refused_notes VALUES (7)", &[])
        .await
        .unwrap();
    let refused = store
        .append_in(&mut tx, "closed", vec![ev("late", 2)])
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::SessionClosed, "{refused}");
    // Bad input is refused before any statement.
    let bad = store
        .append_in(&mut tx, "", vec![ev("x", 1)])
        .await
        .unwrap_err();
    assert_eq!(bad.code(), ErrorCode::InvalidArgument, "{bad}");
    tx.execute("INSERT INTO t_append_in_refused_notes VALUES (8)", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let notes: i64 = app
        .query_one("SELECT count(*) FROM t_append_in_refused_notes", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(notes, 2);
    assert_eq!(
        store
            .read("closed", ReadRange::default())
            .await
            .unwrap()
            .len(),
        1
    );
}

/// The child of [`a_process_killed_before_its_postgres_transaction_commits_leaves_nothing`]:
/// appends inside a transaction, says so, and waits to be killed.
#[tokio::test]
async fn child_appends_and_waits_to_be_killed() {
    let Ok(url) = std::env::var("A2_PG_CHILD_URL") else {
        return;
    };
    let store = PostgresStore::connect(
        &format!("{url}&a2_schema=t_append_crash"),
        PostgresOptions::default(),
        StoreOptions::default(),
    )
    .await
    .unwrap();
    let (mut app, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(connection);
    let mut tx = app.transaction().await.unwrap();
    tx.execute("INSERT INTO t_append_crash_orders VALUES (1)", &[])
        .await
        .unwrap();
    store
        .append_in(&mut tx, "order-1", vec![ev("order.placed", 1)])
        .await
        .unwrap();
    println!("appended, not committed");
    futures::future::pending::<()>().await;
}

/// A crash between the statements and the commit: the process is killed
/// once its append ran in its open transaction; nothing of it stays, and
/// the session's lock is gone with it (a later append goes through).
#[tokio::test]
async fn a_process_killed_before_its_postgres_transaction_commits_leaves_nothing() {
    use std::io::BufRead;
    let store = store("t_append_crash").await;
    let app = client().await;
    app.batch_execute("CREATE TABLE IF NOT EXISTS t_append_crash_orders (id bigint PRIMARY KEY)")
        .await
        .unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_appends_and_waits_to_be_killed",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("A2_PG_CHILD_URL", shared().url())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let said = tokio::task::spawn_blocking(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(|l| l.ok())
            .any(|l| l.contains("appended, not committed"))
    });
    assert!(within("the child's append", said).await.unwrap());
    child.kill().unwrap();
    child.wait().unwrap();
    // The server ends the dead client's transaction; the next append to
    // the session waits for that, then goes through on a clean log.
    let out = within(
        "an append after the crash",
        store.append("order-1", vec![ev("order.placed", 1)]),
    )
    .await
    .unwrap();
    assert_eq!(
        out.events[0].event.index, 1,
        "nothing of the killed append stayed"
    );
    let orders: i64 = app
        .query_one("SELECT count(*) FROM t_append_crash_orders", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(orders, 0);
}

/// A schema holding someone else's tables is refused, untouched.
#[tokio::test]
async fn a_schema_that_is_not_a2s_is_refused() {
    let app = client().await;
    app.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS t_not_a2; CREATE TABLE IF NOT EXISTS t_not_a2.things (id int)",
    )
    .await
    .unwrap();
    let url = format!("{}&a2_schema=t_not_a2", shared().url());
    let refused = PostgresStore::connect(&url, PostgresOptions::default(), StoreOptions::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::InvalidArgument, "{refused}");
    assert!(refused.to_string().contains("not a2's"), "{refused}");
    let tables: i64 = app
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 't_not_a2'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 1);
}

/// AC2, DL1, DL2, A8 in the layout: an append that claims leases the ready
/// events up to its limit (not the delayed one, not the one behind its
/// lane's head); the ready set holds the lane-less, the lane heads and the
/// delayed event (at its due time), never the settled one or a follower.
#[tokio::test]
async fn ac2_dl1_dl2_what_an_append_writes_where() {
    use a2_core::{AppendClaim, Lease};
    let store = store("t_append_layout").await;
    let events = vec![
        ev("a", 1),
        ev("b", 2).lane("l"),
        ev("c", 3).lane("l"),
        ev("d", 4).delay(Duration::from_secs(60)),
        ev("e", 5).settled(),
        ev("f", 6),
    ];
    let claim = AppendClaim::new("w", Lease::Ttl(30_000), 2);
    let out = store
        .append_with("s", events, AppendOptions::new().claim(claim))
        .await
        .unwrap();
    assert_eq!(
        out.claimed,
        [1, 2],
        "AC2: the first ready events, up to the limit"
    );
    let rows = store.read("s", ReadRange::default()).await.unwrap();
    assert_eq!(rows, out.events, "the rows as stored");
    let expires = rows[0].claim_expires_at.expect("leased");
    assert_eq!(rows[1].claim_holder.as_deref(), Some("w"));
    assert_eq!((rows[0].attempt_count, rows[2].attempt_count), (1, 0));
    let due = rows[3].retry_at.expect("DL1: a due time");
    assert!(rows[4].processed_at.is_some(), "A8");
    let app = client().await;
    let ready: Vec<(i64, i64)> = app
        .query(
            "SELECT idx, due_at FROM t_append_layout.ready ORDER BY idx",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(ready, [(1, expires), (2, expires), (4, due), (6, 0)]);
    let records: i64 = app
        .query_one("SELECT count(*) FROM t_append_layout.records", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        records, 5,
        "every unsettled event has a record, the settled one none"
    );
}
