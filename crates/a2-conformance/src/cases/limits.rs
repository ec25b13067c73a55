//! Bad input: the limits of A12 and the other arguments every operation
//! checks. Each must fail with `InvalidArgument` and write nothing.

use a2_core::{
    CompleteRequest, ErrorCode, FailRequest, HistoryOptions, Lease, Limits, ListSessionsOptions,
    NewEvent, PageRequest, PresenceMeta, ReadEventsOptions, ReleaseRequest, RenewRequest,
    StoreOptions,
};
use serde_json::json;

use super::state::snap;
use crate::support::*;
use crate::{SetupFn, fixture, fixture_with};

const INVALID: ErrorCode = ErrorCode::InvalidArgument;

/// A payload whose compact JSON is exactly `bytes` long: a string of
/// `bytes - 2` characters plus its quotes.
fn payload_of(bytes: usize) -> serde_json::Value {
    json!("p".repeat(bytes - 2))
}

/// A12: a session id must be non-empty and at most 1024 bytes.
pub async fn a12_session_id_length(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    expect_code(
        s.append("", vec![ev("a")]).await,
        INVALID,
        "A12: empty session id",
    );
    let long = "x".repeat(1_025);
    expect_code(
        s.append(&long, vec![ev("a")]).await,
        INVALID,
        "A12: 1025-byte session id",
    );
    let long_multibyte = format!("{}x", "é".repeat(512));
    expect_code(
        s.append(&long_multibyte, vec![ev("a")]).await,
        INVALID,
        "A12: bytes, not characters",
    );
    assert_eq!(world(s, &["s"]).await, before, "A12: nothing written");
    let max = "x".repeat(1_024);
    assert_eq!(
        indexes(&append(s, &max, vec![ev("a")]).await),
        [1],
        "A12: 1024 bytes is allowed"
    );
}

/// A12: an event type must be non-empty and at most 256 bytes.
pub async fn a12_type_length(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    expect_code(
        s.append("s", vec![ev("ok"), ev("")]).await,
        INVALID,
        "A12: empty type",
    );
    let long = "t".repeat(257);
    expect_code(
        s.append("s", vec![ev(&long), ev("ok")]).await,
        INVALID,
        "A12: 257-byte type",
    );
    assert_eq!(world(s, &["s"]).await, before, "A12: nothing written");
    let max = "t".repeat(256);
    assert_eq!(
        append(s, "s", vec![ev(&max)]).await[0].event.event_type,
        max,
        "A12: 256 bytes"
    );
}

/// A12: a lane must be non-empty and at most 1024 bytes.
pub async fn a12_lane_length(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    expect_code(
        s.append("s", vec![ev("a").lane("")]).await,
        INVALID,
        "A12: empty lane",
    );
    let long = "l".repeat(1_025);
    expect_code(
        s.append("s", vec![ev("a"), ev("b").lane(long)]).await,
        INVALID,
        "A12: over-long lane",
    );
    assert_eq!(world(s, &["s"]).await, before, "A12: nothing written");
    let max = "l".repeat(1_024);
    assert_eq!(
        append(s, "s", vec![ev("a").lane(max.clone())]).await[0]
            .event
            .lane,
        Some(max)
    );
}

/// A12: an event id, when given, must be non-empty and at most 256 bytes.
pub async fn a12_event_id_length(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    expect_code(
        s.append("s", vec![ev_id("")]).await,
        INVALID,
        "A12: empty id",
    );
    expect_code(
        s.append("s", vec![ev_id(&"i".repeat(257))]).await,
        INVALID,
        "A12: 257-byte id",
    );
    assert_eq!(world(s, &["s"]).await, before, "A12: nothing written");
    let max = "i".repeat(256);
    assert_eq!(append(s, "s", vec![ev_id(&max)]).await[0].event.id, max);
}

/// A12: a batch longer than the configured maximum is `InvalidArgument`.
pub async fn a12_batch_over_the_limit(setup: SetupFn) {
    let limits = Limits::default().with_max_batch_len(5);
    let fx = fixture_with(setup, StoreOptions::default().with_limits(limits)).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let six = (0..6).map(|i| ev(&format!("e{i}"))).collect();
    expect_code(
        s.append("s", six).await,
        INVALID,
        "A12: batch over the limit",
    );
    assert_eq!(world(s, &["s"]).await, before, "A12: nothing written");
    let five = (0..5).map(|i| ev(&format!("e{i}"))).collect();
    assert_eq!(
        append(s, "s", five).await.len(),
        5,
        "A12: a batch at the limit"
    );
}

/// A12: a payload larger (as compact JSON) than the configured maximum is
/// `InvalidArgument`.
pub async fn a12_payload_over_the_limit(setup: SetupFn) {
    let limits = Limits::default().with_max_payload_bytes(100);
    let fx = fixture_with(setup, StoreOptions::default().with_limits(limits)).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let big = NewEvent::new("t", payload_of(101));
    expect_code(
        s.append("s", vec![ev("ok"), big]).await,
        INVALID,
        "A12: payload over the limit",
    );
    assert_eq!(world(s, &["s"]).await, before, "A12: nothing written");
    let at_limit = NewEvent::new("t", payload_of(100));
    assert_eq!(
        append(s, "s", vec![at_limit]).await[0].event.payload,
        payload_of(100)
    );
}

/// A12: the default limits are 10 000 events per batch and 1 MiB per payload.
pub async fn a12_default_limits(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let before = world(s, &["s"]).await;
    let too_many = (0..10_001)
        .map(|_| NewEvent::new("t", json!(null)))
        .collect();
    expect_code(s.append("s", too_many).await, INVALID, "A12: 10 001 events");
    let too_big = NewEvent::new("t", payload_of(1024 * 1024 + 1));
    expect_code(
        s.append("s", vec![too_big]).await,
        INVALID,
        "A12: 1 MiB + 1 byte",
    );
    assert_eq!(world(s, &["s"]).await, before, "A12: nothing written");
    let most = (0..10_000)
        .map(|_| NewEvent::new("t", json!(null)))
        .collect();
    assert_eq!(
        append(s, "s", most).await.len(),
        10_000,
        "A12: 10 000 events"
    );
    let biggest = NewEvent::new("t", payload_of(1024 * 1024));
    assert_eq!(
        indexes(&append(s, "s", vec![biggest]).await),
        [10_001],
        "A12: exactly 1 MiB"
    );
}

/// A12, CO6: events returned to `complete_attempt` obey the same limits;
/// nothing is written and the attempt can still complete.
pub async fn a12_returned_events_obey_the_limits(setup: SetupFn) {
    let limits = Limits::default()
        .with_max_batch_len(3)
        .with_max_payload_bytes(50);
    let fx = fixture_with(setup, StoreOptions::default().with_limits(limits)).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev("a")]).await;
    claimed(s, "s", "w", TTL, 1).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let bad: Vec<(&str, Vec<NewEvent>)> = vec![
        (
            "batch over the limit",
            (0..4).map(|i| ev(&format!("r{i}"))).collect(),
        ),
        (
            "payload over the limit",
            vec![NewEvent::new("r", payload_of(51))],
        ),
        ("empty type", vec![ev("")]),
        ("long type", vec![ev(&"t".repeat(257))]),
        ("empty lane", vec![ev("r").lane("")]),
    ];
    for (what, events) in bad {
        expect_code(complete(s, "s", 1, 1, events).await, INVALID, what);
    }
    assert_eq!(world(s, &["s"]).await, before, "A12: nothing written");
    assert_eq!(
        completed(s, "s", 1, 1, vec![ev("r1"), ev("r2"), ev("r3")])
            .await
            .len(),
        3
    );
}

/// C2, RN2: a claim limit of 0 and a lease ttl of 0 are `InvalidArgument`
/// (claim, renew); nothing written.
pub async fn c2_zero_limit_and_zero_ttl_are_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    claimed(s, "s", "w", TTL, 1).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    expect_code(
        s.claim_available(claim_request("s", "w", TTL, 0)).await,
        INVALID,
        "C2: limit 0",
    );
    expect_code(
        s.claim_available(claim_request("s", "w", 0, 5)).await,
        INVALID,
        "C2: ttl 0",
    );
    expect_code(
        s.claim_available(claim_request("", "w", TTL, 5)).await,
        INVALID,
        "C2: empty session id",
    );
    let renew = RenewRequest {
        session: "s".into(),
        holder: "w".into(),
        claims: vec![at(1, 1)],
        lease: Lease::Ttl(0),
    };
    expect_code(s.renew_claims(renew).await, INVALID, "RN2: ttl 0");
    assert_eq!(world(s, &["s"]).await, before, "nothing written");
}

/// R2, I1, I2, PS1: page sizes of 0 are `InvalidArgument`.
pub async fn r2_i1_i2_ps1_zero_page_sizes_are_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    let history = HistoryOptions::new(0);
    expect_code(s.read_history("s", history).await, INVALID, "R2: limit 0");
    let list = ListSessionsOptions::new(0);
    expect_code(s.list_sessions(list).await, INVALID, "I1: limit 0");
    let events = ReadEventsOptions::new(0);
    expect_code(s.read_events("s", events).await, INVALID, "I2: limit 0");
    expect_code(
        s.pending_sessions(PageRequest {
            cursor: None,
            limit: 0,
        })
        .await,
        INVALID,
        "PS1: limit 0",
    );
}

/// F6, CO1: `max_failures` of 0 is `InvalidArgument`, as is an attempt of 0;
/// nothing written.
pub async fn f6_zero_max_failures_is_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    claimed(s, "s", "w", TTL, 1).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let request = FailRequest {
        session: "s".into(),
        index: 1,
        attempt: 1,
        error: "boom".into(),
        max_failures: 0,
        retry_at: None,
    };
    expect_code(s.fail_attempt(request).await, INVALID, "F6: max_failures 0");
    assert_eq!(world(s, &["s"]).await, before, "nothing written");
    let request = CompleteRequest {
        session: "".into(),
        index: 1,
        attempt: 1,
        events: vec![],
        batch_size: None,
    };
    expect_code(
        s.complete_attempt(request).await,
        INVALID,
        "CO1: empty session id",
    );
    assert_eq!(world(s, &["s"]).await, before, "nothing written");
}

/// S2: a reducer name is any non-empty string: an empty one is
/// `InvalidArgument`, for writing and for reading; nothing written.
pub async fn s2_empty_reducer_name_is_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    expect_code(
        s.put_snapshots("s", vec![snap("ok", 1, json!(1)), snap("", 1, json!(1))])
            .await,
        INVALID,
        "S2: empty reducer name",
    );
    expect_code(
        s.read_state("s", "").await,
        INVALID,
        "S1: empty reducer name",
    );
    assert_eq!(world(s, &["s"]).await, before, "S2: nothing written");
}

/// P1, P2, P4: empty namespace, participant or field names, and a ttl of 0,
/// are `InvalidArgument`, for writing and subscribing; nothing written.
pub async fn p1_empty_presence_names_and_zero_ttl_are_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let good = || values(&[("f", json!(1))]);
    let meta = PresenceMeta {
        seen: 0,
        at: 1,
        ttl_ms: 60_000,
    };
    let before = world(s, &["ns"]).await;
    expect_code(
        s.presence_set("", "p", good(), meta).await,
        INVALID,
        "P1: empty namespace",
    );
    expect_code(
        s.presence_set("ns", "", good(), meta).await,
        INVALID,
        "P1: empty participant",
    );
    let mut empty_field = good();
    empty_field.insert(String::new(), Some(json!(2)));
    expect_code(
        s.presence_set("ns", "p", empty_field, meta).await,
        INVALID,
        "P1: empty field",
    );
    let zero_ttl = PresenceMeta { ttl_ms: 0, ..meta };
    expect_code(
        s.presence_set("ns", "p", good(), zero_ttl).await,
        INVALID,
        "P2: ttl 0",
    );
    expect_code(
        s.presence_subscribe("").await.map(|_| ()),
        INVALID,
        "P4: subscribing to the empty namespace",
    );
    assert_eq!(world(s, &["ns"]).await, before, "P1: nothing written");
}

/// C2, RN2, RL1: an empty holder name is `InvalidArgument` for claiming,
/// renewing and releasing; nothing written.
pub async fn c2_rn2_rl1_empty_holder_is_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 2).await;
    claimed(s, "s", "w", TTL, 1).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    expect_code(
        s.claim_available(claim_request("s", "", TTL, 5)).await,
        INVALID,
        "C2: empty holder",
    );
    let renew = RenewRequest {
        session: "s".into(),
        holder: String::new(),
        claims: vec![at(1, 1)],
        lease: Lease::Ttl(TTL),
    };
    expect_code(s.renew_claims(renew).await, INVALID, "RN2: empty holder");
    let release = ReleaseRequest {
        session: "s".into(),
        holder: String::new(),
        claims: vec![at(1, 1)],
    };
    expect_code(
        s.release_claims(release).await,
        INVALID,
        "RL1: empty holder",
    );
    assert_eq!(world(s, &["s"]).await, before, "nothing written");
}

/// S2, P1, P4: reducer, namespace, participant and field names longer than
/// 1024 bytes are `InvalidArgument` (a namespace for subscribing too);
/// 1024 bytes are fine.
pub async fn s2_p1_names_over_1024_bytes_are_invalid(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append_n(s, "s", 1).await;
    let long = "n".repeat(1_025);
    let max = "n".repeat(1_024);
    let before = world(s, &["s", &long[..1_024]]).await;
    fx.clock.advance(1);
    expect_code(
        s.put_snapshots("s", vec![snap(&long, 1, json!(1))]).await,
        INVALID,
        "S2: long reducer",
    );
    let meta = PresenceMeta {
        seen: 0,
        at: 1,
        ttl_ms: 60_000,
    };
    expect_code(
        s.presence_set(&long, "p", values(&[("f", json!(1))]), meta)
            .await,
        INVALID,
        "P1: long namespace",
    );
    expect_code(
        s.presence_set("s", &long, values(&[("f", json!(1))]), meta)
            .await,
        INVALID,
        "P1: long participant",
    );
    expect_code(
        s.presence_set("s", "p", values(&[(&long, json!(1))]), meta)
            .await,
        INVALID,
        "P1: long field",
    );
    expect_code(
        s.presence_subscribe(&long).await.map(|_| ()),
        INVALID,
        "P4: subscribing to a long namespace",
    );
    assert_eq!(
        world(s, &["s", &long[..1_024]]).await,
        before,
        "nothing written"
    );
    if let Err(err) = s.put_snapshots("s", vec![snap(&max, 1, json!(1))]).await {
        panic!("S2: a 1024-byte reducer name: {err}");
    }
    if let Err(err) = s
        .presence_set(&max, &max, values(&[(&max, json!(1))]), meta)
        .await
    {
        panic!("P1: 1024-byte presence names: {err}");
    }
    if let Err(err) = s.presence_subscribe(&max).await {
        panic!("P4: subscribing to a 1024-byte namespace: {err}");
    }
}

/// A12, A3, A5: limits are checked before duplicates: a batch that repeats
/// an id, or retries a stored one, and also breaks a limit is
/// `InvalidArgument`; nothing written.
pub async fn a12_limits_are_checked_before_duplicates(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "s", vec![ev_id("stored")]).await;
    let before = world(s, &["s"]).await;
    fx.clock.advance(1);
    let repeated = vec![ev_id("x"), ev_id("x"), ev("")];
    expect_code(s.append("s", repeated).await, INVALID, "A12 before A3");
    let retry = vec![ev_id("stored"), ev_id("new").lane("")];
    expect_code(s.append("s", retry).await, INVALID, "A12 before A5/A6");
    expect_code(
        s.append("", vec![ev_id("stored")]).await,
        INVALID,
        "A12: session id first",
    );
    assert_eq!(world(s, &["s"]).await, before, "nothing written");
}
