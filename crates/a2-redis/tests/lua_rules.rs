//! The Lua helpers that decide rules inside the scripts
//! (`lua/rules.lua`) are held to the Rust rules' decision tables
//! (`a2_core::rules::tables`), row by row, on a real `redis-server`: a
//! rule changed on one side and not the other fails here, not only in
//! the slower conformance and differential tests.

use a2_core::rules::Record;
use a2_core::rules::append::Found;
use a2_core::rules::renew::Renewal;
use a2_core::rules::tables;
use a2_redis::testing::RedisServer;
use serde_json::{Map, Value, json};

const RULES: &str = include_str!("../lua/rules.lua");

/// A record as the scripts store it (`helpers.lua`, decoded by
/// `src/codec.rs`): absent keys are `nil`/0, times are strings.
fn lua_record(record: &Record<'_>) -> Value {
    let mut r = Map::new();
    if record.attempt_count > 0 {
        r.insert("a".into(), json!(record.attempt_count));
    }
    if let Some(holder) = record.claim_holder {
        r.insert("h".into(), json!(holder));
    }
    let times = [
        ("x", record.claim_expires_at),
        ("p", record.processed_at),
        ("d", record.failed_at),
        ("c", record.cancelled_at),
        ("r", record.retry_at),
    ];
    for (key, time) in times {
        if let Some(time) = time {
            r.insert(key.into(), json!(time.to_string()));
        }
    }
    if let Some(attempt) = record.processed_by_attempt {
        r.insert("pa".into(), json!(attempt));
    }
    if record.failure_count > 0 {
        r.insert("n".into(), json!(record.failure_count));
    }
    if let Some(attempt) = record.last_failed_attempt {
        r.insert("la".into(), json!(attempt));
    }
    if !record.returned_event_ids.is_empty() {
        let ids = serde_json::to_string(record.returned_event_ids).unwrap();
        r.insert("ret".into(), json!(ids));
    }
    Value::Object(r)
}

/// Runs `call` (a Lua expression over `ARGV`) after the rules, with `args`.
async fn eval(
    conn: &mut redis::aio::MultiplexedConnection,
    call: &str,
    args: &[String],
) -> redis::Value {
    let script = redis::Script::new(&format!("{RULES}\nreturn {call}"));
    let mut invocation = script.prepare_invoke();
    for arg in args {
        invocation.arg(arg);
    }
    invocation.invoke_async(conn).await.unwrap()
}

fn text(value: &redis::Value) -> String {
    match value {
        redis::Value::BulkString(bytes) => String::from_utf8(bytes.clone()).unwrap(),
        redis::Value::SimpleString(s) => s.clone(),
        other => panic!("not a string reply: {other:?}"),
    }
}

fn number(value: &redis::Value) -> Option<i64> {
    match value {
        redis::Value::Int(n) => Some(*n),
        redis::Value::Nil => None,
        other => panic!("not a number reply: {other:?}"),
    }
}

fn optional(n: Option<i64>) -> String {
    n.map(|n| n.to_string()).unwrap_or_default()
}

async fn connection(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test]
async fn renew_decision_follows_the_rn1_rn2_rn3_table() {
    let server = RedisServer::start();
    let mut conn = connection(&server).await;
    let rows = tables::renew();
    assert!(rows.len() >= 10, "a table worth the name");
    for (record, attempt, holder, now, expires, expected) in rows {
        let args = [
            lua_record(&record).to_string(),
            attempt.to_string(),
            holder.to_owned(),
            now.to_string(),
            expires.to_string(),
        ];
        let call = "renew_decision(cjson.decode(ARGV[1]), tonumber(ARGV[2]), ARGV[3], \
                    tonumber(ARGV[4]), tonumber(ARGV[5]))";
        let got = text(&eval(&mut conn, call, &args).await);
        let want = match expected {
            Renewal::Superseded => "superseded",
            Renewal::Renew => "renew",
            Renewal::Neither => "neither",
        };
        assert_eq!(
            got, want,
            "{record:?} attempt {attempt} {holder} at {now} until {expires}"
        );
    }
}

#[tokio::test]
async fn classify_follows_the_a5_a6_table() {
    let server = RedisServer::start();
    let mut conn = connection(&server).await;
    for (found, len, expected) in tables::classify() {
        let args = [found.to_string(), len.to_string()];
        let call = "classify(tonumber(ARGV[1]), tonumber(ARGV[2]))";
        let got = text(&eval(&mut conn, call, &args).await);
        let want = match expected {
            Found::None => "none",
            Found::All => "all",
            Found::Some => "some",
        };
        assert_eq!(got, want, "{found} of {len}");
    }
}

#[tokio::test]
async fn deadline_of_follows_the_ex1_table() {
    let server = RedisServer::start();
    let mut conn = connection(&server).await;
    for (ttl, expires_at, updated_at, expected) in tables::deadline() {
        let args = [
            ttl.map(|t| t.to_string()).unwrap_or_default(),
            optional(expires_at),
            updated_at.to_string(),
        ];
        let call = "deadline_of(tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]))";
        let got = number(&eval(&mut conn, call, &args).await);
        assert_eq!(
            got, expected,
            "ttl {ttl:?} expires_at {expires_at:?} updated {updated_at}"
        );
    }
}

#[tokio::test]
async fn has_expired_follows_the_ex3_table() {
    let server = RedisServer::start();
    let mut conn = connection(&server).await;
    for (deadline, now, expected) in tables::expired() {
        let args = [optional(deadline), now.to_string()];
        // Lua's false comes back as nil, true as 1.
        let call = "has_expired(tonumber(ARGV[1]), tonumber(ARGV[2]))";
        let got = number(&eval(&mut conn, call, &args).await) == Some(1);
        assert_eq!(got, expected, "deadline {deadline:?} now {now}");
    }
}

#[tokio::test]
async fn waits_until_and_claimable_follow_the_c2_c3_c5_table() {
    let server = RedisServer::start();
    let mut conn = connection(&server).await;
    for (record, now, until, expected) in tables::claim() {
        let args = [lua_record(&record).to_string(), now.to_string()];
        let call = "waits_until(cjson.decode(ARGV[1]))";
        let got = number(&eval(&mut conn, call, &args).await);
        assert_eq!(got, until, "waits_until {record:?}");
        // Lua's false comes back as nil, true as 1.
        let call = "claimable(cjson.decode(ARGV[1]), tonumber(ARGV[2]))";
        let got = number(&eval(&mut conn, call, &args).await) == Some(1);
        assert_eq!(got, expected, "claimable {record:?} at {now}");
    }
}
