//! docs/sqlite-layout.md against a real database: every table and index it
//! names exists, the queries that make operations cheap use the indexes it
//! says, and each of its `sqlite3` recipes runs and finds the data.

use std::collections::BTreeMap;

use a2_core::*;
use a2_sqlite::{SqliteOptions, SqliteStore};
use serde_json::json;

const LAYOUT: &str = include_str!("../../../docs/sqlite-layout.md");

/// A database with one session `bob` that has a lane, a dead letter, a
/// claimed event, a snapshot and presence.
async fn scenario(path: &std::path::Path) {
    let store = SqliteStore::open(path, SqliteOptions::default()).unwrap();
    store
        .append(
            "bob",
            vec![
                NewEvent::new("user.message", json!({ "text": "hi" }))
                    .lane("chat")
                    .id("m1"),
                NewEvent::new("user.message", json!({ "text": "again" })).lane("chat"),
                NewEvent::new("job", json!({})),
                NewEvent::new("job", json!({})),
            ],
        )
        .await
        .unwrap();
    let ClaimOutcome::Claimed { events: rows, .. } = store
        .claim_available(ClaimRequest {
            session: "bob".into(),
            holder: "w1".into(),
            lease: Lease::Ttl(60_000),
            exclude_indexes: vec![],
            limit: 2,
        })
        .await
        .unwrap()
    else {
        panic!("claimed");
    };
    let first = &rows[0];
    let failed = store
        .fail_attempt(FailRequest {
            session: "bob".into(),
            index: first.event.index,
            attempt: first.attempt_count,
            error: "poisoned".into(),
            max_failures: 1,
            retry_at: None,
        })
        .await
        .unwrap();
    assert_eq!(failed.outcome, FailKind::DeadLettered);
    store
        .put_snapshots(
            "bob",
            vec![SnapshotWrite {
                reducer: "transcript".into(),
                index: 2,
                state: json!([]),
            }],
        )
        .await
        .unwrap();
    let meta = PresenceMeta {
        seen: 1,
        at: 1,
        ttl_ms: 600_000,
    };
    let values = BTreeMap::from([("typing".to_owned(), Some(json!(true)))]);
    store
        .presence_set("bob", "ann", values, meta)
        .await
        .unwrap();
    store.close().await;
}

fn names(conn: &rusqlite::Connection, kind: &str) -> Vec<String> {
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = ?1 AND name NOT LIKE 'sqlite_%'")
        .unwrap();
    stmt.query_map([kind], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn plan(conn: &rusqlite::Connection, sql: &str) -> String {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let rows: Vec<String> = stmt
        .query_map([], |row| row.get::<_, String>(3))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    rows.join("; ")
}

#[tokio::test]
async fn the_layout_doc_matches_a_real_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a2.db");
    scenario(&path).await;
    let conn =
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();

    for table in names(&conn, "table") {
        assert!(
            LAYOUT.contains(&format!("### `{table}`")),
            "table {table} is documented"
        );
    }
    for index in names(&conn, "index") {
        assert!(
            LAYOUT.contains(&format!("`{index} ")),
            "index {index} is documented"
        );
    }

    // The statements behind the cost table use the indexes it names.
    let cases = [
        (
            "SELECT idx FROM events WHERE sid = 1 AND free = 1 ORDER BY idx",
            "events_free",
        ),
        (
            "SELECT due_at, idx FROM events WHERE sid = 1 AND due_at IS NOT NULL ORDER BY due_at, idx",
            "events_due",
        ),
        (
            "SELECT 1 FROM events WHERE sid = 1 AND lane = 'chat' AND lane IS NOT NULL \
             AND processed_at IS NULL LIMIT 1",
            "events_lane",
        ),
        (
            "SELECT idx FROM events WHERE sid = 1 AND id = 'm1'",
            "events_by_id",
        ),
        (
            "SELECT name FROM sessions WHERE pending_count > 0 AND name > '' \
             AND min(coalesce(expires_at, 9223372036854775807), \
                 coalesce(updated_at + ttl_ms, 9223372036854775807)) > 5 \
             ORDER BY name LIMIT 10",
            "sessions_pending",
        ),
        (
            "SELECT name FROM sessions WHERE (ttl_ms IS NOT NULL OR expires_at IS NOT NULL) \
             AND min(coalesce(expires_at, 9223372036854775807), \
                 coalesce(updated_at + ttl_ms, 9223372036854775807)) <= 5 \
             ORDER BY min(coalesce(expires_at, 9223372036854775807), \
                 coalesce(updated_at + ttl_ms, 9223372036854775807)) LIMIT 256",
            "sessions_deadline",
        ),
        (
            "SELECT idx FROM events WHERE sid = 1 AND idx > 0 AND idx <= 10 ORDER BY idx",
            "sqlite_autoindex_events_1",
        ),
        (
            "SELECT idx, free FROM events WHERE sid = 1 AND idx >= 5 ORDER BY idx",
            "sqlite_autoindex_events_1",
        ),
    ];
    for (sql, index) in cases {
        let plan = plan(&conn, sql);
        assert!(plan.contains(index), "{sql}\nuses {plan}, not {index}");
    }

    // Every recipe runs; those about bob find him.
    let recipes = LAYOUT
        .split("```sql")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a sql block in the layout doc");
    let mut ran = 0;
    for statement in recipes.split(';') {
        let sql: String = statement
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
            .replace('…', "m1");
        if sql.trim().is_empty() {
            continue;
        }
        let mut stmt = conn.prepare(&sql).unwrap_or_else(|e| panic!("{sql}\n{e}"));
        let columns = stmt.column_count();
        let rows: usize = stmt
            .query_map([], |_| Ok(()))
            .unwrap_or_else(|e| panic!("{sql}\n{e}"))
            .count();
        if sql.contains("'bob'") || sql.contains("failed_at IS NOT NULL") {
            assert!(rows > 0, "{sql}\nfinds nothing");
        }
        assert!(columns > 0);
        ran += 1;
    }
    assert!(ran >= 10, "only {ran} recipes found");
}

/// The tail (`sessions.tail_from`, free = 2) holds only what a claim must
/// look at: appends to a session whose tail is empty start it at their
/// first free event, or leave it empty; a claim moves it past what it took.
#[tokio::test]
async fn the_tail_starts_at_the_first_free_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a2.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let tail = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row(
            "SELECT tail_from FROM sessions WHERE name = 's'",
            [],
            |row| row.get(0),
        )
        .unwrap()
    };
    let settled = |n: usize| {
        (0..n)
            .map(|_| NewEvent::new("log", json!({})).settled())
            .collect::<Vec<_>>()
    };
    store.append("s", settled(3)).await.unwrap();
    assert_eq!(tail(&conn), 4, "nothing free: the tail is empty");
    let mut events = settled(2);
    events.push(NewEvent::new("job", json!({})));
    events.extend(settled(2));
    store.append("s", events).await.unwrap();
    assert_eq!(tail(&conn), 6, "the first free event");
    store.append("s", settled(1)).await.unwrap();
    assert_eq!(tail(&conn), 6, "a tail that holds events stays");
    let claimed = store
        .claim_available(ClaimRequest {
            session: "s".into(),
            holder: "w".into(),
            lease: Lease::Ttl(60_000),
            exclude_indexes: vec![],
            limit: 10,
        })
        .await
        .unwrap();
    let ClaimOutcome::Claimed { events: rows, .. } = claimed else {
        panic!("claimed: {claimed:?}");
    };
    assert_eq!(rows.iter().map(|r| r.event.index).collect::<Vec<_>>(), [6]);
    assert_eq!(tail(&conn), 10, "past what the claim looked at");
    store.close().await;
}
