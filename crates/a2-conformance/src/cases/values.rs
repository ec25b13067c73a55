//! Values at the edges (SPEC §1 "Values"): J1 nesting, J2 exact round
//! trips, X1 limits and X2 ttls at the top of their types. What a store
//! accepts it must read back, identically on every store.

use std::collections::BTreeMap;

use a2_core::validate::{MAX_JSON_DEPTH, MAX_LIMIT, MAX_TTL_MS};
use a2_core::{
    Cause, ClaimOutcome, CompleteRequest, ErrorCode, FailRequest, HistoryOptions, Lease,
    ListSessionsOptions, NewEvent, PageRequest, ReadEventsOptions, ReadRange, SnapshotWrite,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Number, Value, json};

use super::presence::set;
use super::state::{put, snap, state};
use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

/// A value nested `depth` levels: arrays and objects alternating.
fn nested(depth: usize) -> Value {
    let mut value = json!("leaf");
    for level in 0..depth {
        value = if level % 2 == 0 {
            json!([value])
        } else {
            json!({ "k": value })
        };
    }
    value
}

/// J1: a payload, returned event, snapshot state or presence value nested
/// deeper than 64 levels is `InvalidArgument` and writes nothing; one of
/// exactly 64 levels is accepted and reads back everywhere it is read
/// (read, read_events, read_history, read_state, feeds, claims).
pub async fn j1_values_nested_deeper_than_the_limit_are_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    assert_eq!(MAX_JSON_DEPTH, 64, "J1: the documented limit");
    append(s, "s", vec![ev("a")]).await;
    let before = world(s, &["s"]).await;
    let deep = nested(MAX_JSON_DEPTH + 1);
    // A few hundred bytes only: far under the size limit.
    assert!(deep.to_string().len() < 1_000);
    expect_code(
        s.append("s", vec![ev("ok"), NewEvent::new("deep", deep.clone())])
            .await,
        ErrorCode::InvalidArgument,
        "J1: payload",
    );
    expect_code(
        s.put_snapshots("s", vec![snap("r", 1, deep.clone())]).await,
        ErrorCode::InvalidArgument,
        "J1: snapshot state",
    );
    expect_code(
        s.presence_set(
            "s",
            "ann",
            values(&[("f", deep.clone())]),
            meta(START_MS, 10_000),
        )
        .await,
        ErrorCode::InvalidArgument,
        "J1: presence value",
    );
    assert_eq!(world(s, &["s"]).await, before, "J1: nothing written");
    let row = &claimed(s, "s", "w", TTL, 1).await[0];
    expect_code(
        complete(
            s,
            "s",
            1,
            row.attempt_count,
            vec![NewEvent::new("deep", deep.clone())],
        )
        .await,
        ErrorCode::InvalidArgument,
        "J1: returned event",
    );
    let rows = read_all(s, "s").await;
    assert_eq!(rows.len(), 1, "J1: no returned event written");
    assert!(
        rows[0].is_pending(),
        "J1: the refused completion did not complete"
    );

    // Exactly the limit: accepted and read back by every read.
    let limit = nested(MAX_JSON_DEPTH);
    let rows = append(s, "t", vec![NewEvent::new("deep", limit.clone())]).await;
    assert_eq!(rows[0].event.payload, limit, "J1: 64 levels accepted");
    assert_eq!(read_all(s, "t").await[0].event.payload, limit, "J1: read");
    let page = match s.read_events("t", ReadEventsOptions::new(10)).await {
        Ok(page) => page,
        Err(err) => panic!("J1: read_events failed: {err}"),
    };
    assert_eq!(page.events[0].event.payload, limit, "J1: read_events");
    match s.read_history("t", HistoryOptions::new(10)).await {
        Ok(page) => assert_eq!(page.events[0].event.payload, limit, "J1: history"),
        Err(err) => panic!("J1: read_history failed: {err}"),
    }
    put(s, "t", vec![snap("r", 1, limit.clone())]).await;
    let read = state(s, "t", "r").await;
    assert_eq!(read.snapshot.map(|s| s.state), Some(limit.clone()));
    set(s, "t", "ann", &[("f", limit.clone())], START_MS, 10_000).await;
    match s.presence_read("t").await {
        Ok(entries) => assert_eq!(entries[0].value, limit, "J1: presence read"),
        Err(err) => panic!("J1: presence_read failed: {err}"),
    }
    let mut feed = s.stream("t", 0);
    match next_item(&mut feed, "J1 feed").await {
        Ok(event) => assert_eq!(event.payload, limit, "J1: feed"),
        Err(err) => panic!("J1: feed failed: {err}"),
    }
    let row = &claimed(s, "t", "w", TTL, 1).await[0];
    assert_eq!(row.event.payload, limit, "J1: claim");
    let returned = completed(
        s,
        "t",
        1,
        row.attempt_count,
        vec![NewEvent::new("deep", limit.clone()).settled()],
    )
    .await;
    assert_eq!(returned[0].event.payload, limit, "J1: returned event");
}

/// A JSON string with escapes, controls, non-BMP characters and the
/// characters JSON and Lua treat specially.
fn tricky_string() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        Just("\"\\/\u{0}\u{1}\u{1f}\u{7f}\u{2028}\u{2029}\u{fffe}😀\r\n\t".to_owned()),
        "[\\\\\"\u{0}-\u{1f}%a-z\u{e9}\u{1F600}]{0,12}",
    ]
}

/// A float from everywhere in the range, plus known hard cases.
fn tricky_float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
        Just(0.011_399_999_999_999_999),
        Just(5e-324),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
        Just(-0.0),
        Just(1e21),
        Just(0.1 + 0.2),
        (-1_000_000i64..1_000_000).prop_map(|n| n as f64 / 1_000.0),
    ]
}

/// Arbitrary JSON: null, booleans, integers across i64 and u64, floats,
/// strings, and arrays and objects of them, a few levels deep.
fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::Number(n.into())),
        any::<u64>().prop_map(|n| Value::Number(n.into())),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        tricky_float().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        tricky_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((tricky_string(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// `count` arbitrary values from a deterministic runner, so a failure
/// reproduces.
fn samples(count: usize) -> Vec<Value> {
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    let strategy = arbitrary_json();
    (0..count)
        .map(|_| match strategy.new_tree(&mut runner) {
            Ok(tree) => tree.current(),
            Err(reason) => panic!("J2: generating a value failed: {reason}"),
        })
        .collect()
}

/// The exact text of a value: equal texts mean equal floats bit for bit
/// (where `Value`'s `==` would call `0.0` and `-0.0` equal).
fn text(value: &Value) -> String {
    match serde_json::to_string(value) {
        Ok(text) => text,
        Err(err) => panic!("J2: a value does not serialize: {err}"),
    }
}

/// J2, A5: arbitrary JSON (floats from the whole range, integers up to
/// `u64::MAX` and down to `i64::MIN`, unicode, escapes) round-trips exactly
/// through append → read, the identical append again is a replay that
/// returns the original rows (A5), and snapshot states and presence values
/// round-trip exactly too.
pub async fn j2_arbitrary_json_round_trips_exactly(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let values_in = samples(96);
    let events: Vec<NewEvent> = values_in
        .iter()
        .enumerate()
        .map(|(i, v)| NewEvent::new("json", v.clone()).id(format!("j{i}")))
        .collect();
    let rows = append(s, "s", events.clone()).await;
    let read = read_all(fx.peer.as_ref(), "s").await;
    for (i, value) in values_in.iter().enumerate() {
        assert_eq!(
            text(&read[i].event.payload),
            text(value),
            "J2: payload {i} read back differently"
        );
        assert_eq!(text(&rows[i].event.payload), text(value), "J2: append rows");
    }
    match fx.peer.append("s", events).await {
        Ok(replay) => assert_eq!(
            replay.events, read,
            "J2, A5: the replay returns the originals"
        ),
        Err(err) => panic!("J2, A5: the identical replay was refused: {err}"),
    }
    let snapshots: Vec<SnapshotWrite> = values_in
        .iter()
        .take(24)
        .enumerate()
        .map(|(i, v)| snap(&format!("r{i}"), 1, v.clone()))
        .collect();
    put(s, "s", snapshots).await;
    for (i, value) in values_in.iter().take(24).enumerate() {
        let read = state(fx.peer.as_ref(), "s", &format!("r{i}")).await;
        let stored = read.snapshot.map(|s| s.state).unwrap_or(Value::Null);
        assert_eq!(text(&stored), text(value), "J2: snapshot state {i}");
    }
    let fields: BTreeMap<String, Option<Value>> = values_in
        .iter()
        .take(24)
        .enumerate()
        .map(|(i, v)| (format!("f{i:02}"), Some(v.clone())))
        .collect();
    if let Err(err) = s
        .presence_set("ns", "ann", fields.clone(), meta(START_MS, 60_000))
        .await
    {
        panic!("J2: presence_set failed: {err}");
    }
    let entries = match fx.peer.presence_read("ns").await {
        Ok(entries) => entries,
        Err(err) => panic!("J2: presence_read failed: {err}"),
    };
    // A presence null is a deletion, so null values are not stored.
    let expected: Vec<(String, String)> = fields
        .iter()
        .filter_map(|(f, v)| {
            v.as_ref()
                .filter(|v| !v.is_null())
                .map(|v| (f.clone(), text(v)))
        })
        .collect();
    let got: Vec<(String, String)> = entries
        .iter()
        .map(|e| (e.field.clone(), text(&e.value)))
        .collect();
    assert_eq!(got, expected, "J2: presence values");
}

/// X1: a page size or claim limit above 10 000 (up to `usize::MAX`) is
/// valid on every call that takes one and counts as 10 000.
pub async fn x1_limits_above_the_maximum_count_as_the_maximum(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    assert_eq!(MAX_LIMIT, 10_000, "X1: the documented maximum");
    let batch = |from: usize, n: usize| -> Vec<NewEvent> {
        (from..from + n)
            .map(|i| NewEvent::new("t", json!(i)))
            .collect()
    };
    append(s, "s", batch(0, 6_000)).await;
    append(s, "s", batch(6_000, 4_002)).await;
    append(s, "other", vec![ev("a")]).await;
    let huge = usize::MAX;
    match s.read_events("s", ReadEventsOptions::new(huge)).await {
        Ok(page) => {
            assert_eq!(page.events.len(), MAX_LIMIT, "X1: read_events");
            assert_eq!(page.through_index, 10_002);
        }
        Err(err) => panic!("X1: read_events with usize::MAX failed: {err}"),
    }
    match s.read_history("s", HistoryOptions::new(huge)).await {
        Ok(page) => {
            assert_eq!(page.events.len(), MAX_LIMIT, "X1: read_history");
            assert_eq!(page.events[0].event.index, 3);
            assert!(page.has_more, "X1: older events remain");
        }
        Err(err) => panic!("X1: read_history with usize::MAX failed: {err}"),
    }
    match s.list_sessions(ListSessionsOptions::new(huge)).await {
        Ok(list) => assert_eq!(list.sessions.len(), 2, "X1: list_sessions"),
        Err(err) => panic!("X1: list_sessions with usize::MAX failed: {err}"),
    }
    match s
        .pending_sessions(PageRequest {
            cursor: None,
            limit: huge,
        })
        .await
    {
        Ok(page) => assert_eq!(page.sessions, ["other", "s"], "X1: pending_sessions"),
        Err(err) => panic!("X1: pending_sessions with usize::MAX failed: {err}"),
    }
    match claim(s, "s", "w", TTL, huge).await {
        ClaimOutcome::Claimed { events: rows, .. } => {
            assert_eq!(rows.len(), MAX_LIMIT, "X1: a claim takes at most 10 000");
            assert_eq!(rows[MAX_LIMIT - 1].event.index, 10_000);
        }
        other => panic!("X1: claim with usize::MAX: {other:?}"),
    }
    assert_eq!(
        indexes(&claimed(s, "s", "w", TTL, huge).await),
        [10_001, 10_002],
        "X1: the rest on the next claim"
    );
}

/// X2, P2, C2: a ttl above 100 years (up to `u64::MAX`) is valid and counts
/// as 100 years: the entry or lease is live, never wrapped into the past.
pub async fn x2_ttls_above_the_maximum_count_as_the_maximum(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let max = i64::try_from(MAX_TTL_MS).unwrap_or(i64::MAX);
    assert!(
        s.presence_set(
            "ns",
            "ann",
            values(&[("f", json!(1))]),
            meta(START_MS, u64::MAX)
        )
        .await
        .is_ok_and(|patch| patch.is_some()),
        "X2: presence with a u64::MAX ttl applies"
    );
    match s.presence_read("ns").await {
        Ok(entries) => {
            assert_eq!(entries.len(), 1, "X2: the entry is live");
            assert_eq!(entries[0].expires_at, START_MS + max, "X2: now + 100 years");
        }
        Err(err) => panic!("X2: presence_read failed: {err}"),
    }
    append_n(s, "s", 2).await;
    let rows = claimed(s, "s", "w", u64::MAX, 1).await;
    assert_eq!(
        rows[0].claim_expires_at,
        Some(START_MS + max),
        "X2: a u64::MAX lease lasts 100 years"
    );
    fx.clock.advance(3_600_000);
    let renewed = match s
        .renew_claims(a2_core::RenewRequest {
            session: "s".into(),
            holder: "w".into(),
            claims: claims_of(&rows),
            lease: Lease::Ttl(u64::MAX),
        })
        .await
    {
        Ok(outcome) => outcome,
        Err(err) => panic!("X2: renew failed: {err}"),
    };
    assert_eq!(renewed.renewed, [1], "X2: renewed");
    assert_eq!(
        row(s, "s", 1).await.claim_expires_at,
        Some(START_MS + 3_600_000 + max)
    );
}

/// R1, R2, I2, CO1, F1, RV1, A7: indexes at the top of `u64` are ordinary
/// input. Reads after `u64::MAX` find nothing, reads through it read the
/// whole log; a completion, failure or revive of index `u64::MAX` and an
/// append whose cause names it are `InvalidArgument`. Nothing is written,
/// and the store serves the next call as before.
pub async fn x1_indexes_at_the_top_of_u64_are_ordinary_input(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 3).await;
    let top = u64::MAX;
    let read = |after_index, through_index| ReadRange {
        after_index,
        through_index,
    };
    let rows = s
        .read("s", read(top, None))
        .await
        .expect("R1: read after u64::MAX");
    assert!(rows.is_empty(), "R1: nothing after u64::MAX: {rows:?}");
    let rows = s
        .read("s", read(0, Some(top)))
        .await
        .expect("R1: read through u64::MAX");
    assert_eq!(
        indexes(&rows),
        [1, 2, 3],
        "R1: through u64::MAX is the whole log"
    );
    let page = s
        .read_events("s", ReadEventsOptions::new(10).after_index(top))
        .await
        .expect("I2: a page after u64::MAX");
    assert!(page.events.is_empty(), "I2: {page:?}");
    let history = s
        .read_history("s", HistoryOptions::new(10).before_index(Some(top)))
        .await
        .expect("R2: history before u64::MAX");
    assert_eq!(indexes(&history.events), [1, 2, 3], "R2: before u64::MAX");
    let before = world(s, &["s"]).await;
    expect_code(
        s.complete_attempt(CompleteRequest::new("s", top, 1)).await,
        ErrorCode::InvalidArgument,
        "CO1: index u64::MAX",
    );
    let fail = FailRequest {
        session: "s".into(),
        index: top,
        attempt: 1,
        error: "boom".into(),
        max_failures: 3,
        retry_at: None,
    };
    expect_code(
        s.fail_attempt(fail).await,
        ErrorCode::InvalidArgument,
        "F1: index u64::MAX",
    );
    expect_code(
        s.revive("s", top).await,
        ErrorCode::InvalidArgument,
        "RV1: index u64::MAX",
    );
    let caused = NewEvent::new("t", json!(1)).caused_by(Cause::new(top, 1));
    expect_code(
        s.append("s", vec![caused]).await,
        ErrorCode::InvalidArgument,
        "A7: a cause at index u64::MAX",
    );
    assert!(world(s, &["s"]).await == before, "nothing was written");
    // The store serves the next call as before.
    append_n(s, "s", 1).await;
    assert_eq!(indexes(&read_all(s, "s").await), [1, 2, 3, 4]);
}

/// X1, X2, J2: integer arguments at the extremes of their types (0, 1,
/// `u32::MAX`, `i64::MAX`, `u64::MAX`, `i64::MIN`, `usize::MAX`, …) in every
/// store method that takes one — causes, claim limits and excluded indexes,
/// lease ttls and expiry times, completions, failures (`max_failures`,
/// `retry_at`), releases, reads and pages, snapshot indexes, presence times
/// and ttls, revives — get exactly the memory store's answers, step by
/// step, and no call panics, wraps or poisons the store: a random sequence
/// of 400 operations with a quarter of their integers at an extreme.
pub async fn x1_integer_extremes_get_the_memory_stores_answers(setup: SetupFn) {
    let ids = std::sync::Arc::new(a2_core::SequentialIds::new("e"));
    let fx = crate::fixture_with(setup, a2_core::StoreOptions::default().with_ids(ids)).await;
    crate::differential::run_seed_with(
        "this store",
        fx.store.as_ref(),
        fx.clock.clone(),
        7,
        400,
        25,
    )
    .await;
}
