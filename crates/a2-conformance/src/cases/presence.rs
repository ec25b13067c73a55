//! SPEC §5 presence: P1, P2, P3, P4.

use std::collections::BTreeMap;

use a2_core::{PresenceEntry, PresencePatch, PresenceStream, Store};
use serde_json::{Value, json};

use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

pub(crate) async fn set(
    store: &dyn Store,
    ns: &str,
    participant: &str,
    pairs: &[(&str, Value)],
    at: i64,
    ttl: u64,
) -> Option<PresencePatch> {
    match store
        .presence_set(ns, participant, values(pairs), meta(at, ttl))
        .await
    {
        Ok(patch) => patch,
        Err(err) => panic!("presence_set in {ns:?} failed: {err}"),
    }
}

pub(crate) async fn entries(store: &dyn Store, ns: &str) -> Vec<(String, String, Value)> {
    match store.presence_read(ns).await {
        Ok(entries) => entries
            .into_iter()
            .map(|e| (e.participant, e.field, e.value))
            .collect(),
        Err(err) => panic!("presence_read of {ns:?} failed: {err}"),
    }
}

fn patch(participant: &str, pairs: &[(&str, Value)], at: i64) -> Option<PresencePatch> {
    Some(PresencePatch {
        participant: participant.into(),
        values: values(pairs),
        seen: at,
        at,
    })
}

fn entry(participant: &str, field: &str, value: Value) -> (String, String, Value) {
    (participant.into(), field.into(), value)
}

/// P1: per (participant, field) the write with the newer sender `at` wins;
/// a tie goes to the incoming write; the patch holds only what applied.
pub async fn p1_last_writer_wins_by_sender_time(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let ttl = 60_000;
    let applied = set(
        s,
        "ns",
        "ann",
        &[("typing", json!(true)), ("cursor", json!(3))],
        100,
        ttl,
    )
    .await;
    assert_eq!(
        applied,
        patch("ann", &[("typing", json!(true)), ("cursor", json!(3))], 100),
        "P1"
    );
    let older = set(
        fx.peer.as_ref(),
        "ns",
        "ann",
        &[("typing", json!(false))],
        50,
        ttl,
    )
    .await;
    assert_eq!(older, None, "P1: an older write does not apply");
    let mixed = set(
        s,
        "ns",
        "ann",
        &[("typing", json!("late")), ("mood", json!("ok"))],
        99,
        ttl,
    )
    .await;
    assert_eq!(
        mixed,
        patch("ann", &[("mood", json!("ok"))], 99),
        "P1: only the part that applied"
    );
    let tie = set(s, "ns", "ann", &[("cursor", json!(4))], 100, ttl).await;
    assert_eq!(
        tie,
        patch("ann", &[("cursor", json!(4))], 100),
        "P1: a tie goes to the incoming write"
    );
    let other = set(s, "ns", "bob", &[("typing", json!(false))], 1, ttl).await;
    assert!(other.is_some(), "P1: per participant");
    assert_eq!(
        entries(s, "ns").await,
        [
            entry("ann", "cursor", json!(4)),
            entry("ann", "mood", json!("ok")),
            entry("ann", "typing", json!(true)),
            entry("bob", "typing", json!(false)),
        ]
    );
}

/// P1: `null` deletes a field (when the write is not older); an empty write
/// applies nothing.
pub async fn p1_null_deletes_and_empty_values_apply_nothing(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    set(
        s,
        "ns",
        "ann",
        &[("a", json!(1)), ("b", json!(2))],
        100,
        60_000,
    )
    .await;
    let stale = set(s, "ns", "ann", &[("a", Value::Null)], 10, 60_000).await;
    assert_eq!(stale, None, "P1: an older delete does not apply");
    let deleted = set(s, "ns", "ann", &[("a", Value::Null)], 200, 60_000).await;
    assert_eq!(
        deleted,
        patch("ann", &[("a", Value::Null)], 200),
        "P1: null deletes"
    );
    assert_eq!(entries(s, "ns").await, [entry("ann", "b", json!(2))]);
    let empty = match s
        .presence_set("ns", "ann", BTreeMap::new(), meta(300, 60_000))
        .await
    {
        Ok(patch) => patch,
        Err(err) => panic!("{err}"),
    };
    assert_eq!(empty, None, "P1: empty values apply nothing");
    assert_eq!(entries(s, "ns").await, [entry("ann", "b", json!(2))]);
}

/// P2, P3: an applied entry expires at store-now + ttl (the store clock, not
/// the sender's `at`); expired entries are not read.
pub async fn p2_entries_expire_at_store_now_plus_ttl(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    fx.clock.advance(5);
    set(s, "ns", "ann", &[("here", json!(true))], 7, 1_000).await;
    let read = match s.presence_read("ns").await {
        Ok(read) => read,
        Err(err) => panic!("{err}"),
    };
    let expected = PresenceEntry {
        participant: "ann".into(),
        field: "here".into(),
        value: json!(true),
        seen: 7,
        at: 7,
        expires_at: START_MS + 5 + 1_000,
    };
    assert_eq!(read, [expected], "P2: expires at store-now + ttl");
    fx.clock.advance(999);
    assert_eq!(entries(s, "ns").await.len(), 1, "P2: live until then");
    fx.clock.advance(2);
    assert!(
        entries(s, "ns").await.is_empty(),
        "P3: expired entries are gone"
    );
    // A write refreshes the expiry from the store's now.
    set(s, "ns", "ann", &[("here", json!(1))], 8, 1_000).await;
    fx.clock.advance(500);
    set(s, "ns", "ann", &[("here", json!(2))], 9, 1_000).await;
    fx.clock.advance(700);
    assert_eq!(
        entries(s, "ns").await,
        [entry("ann", "here", json!(2))],
        "P2: refreshed"
    );
}

/// P3: only live entries, ordered by participant then field.
pub async fn p3_read_returns_only_live_entries_in_order(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    set(
        s,
        "ns",
        "zed",
        &[("b", json!(1)), ("a", json!(2))],
        1,
        10_000,
    )
    .await;
    set(s, "ns", "amy", &[("x", json!(3))], 1, 100).await;
    set(s, "ns", "bo", &[("short", json!(4))], 1, 100).await;
    set(s, "ns", "bo", &[("long", json!(5))], 1, 10_000).await;
    assert_eq!(
        entries(s, "ns").await,
        [
            entry("amy", "x", json!(3)),
            entry("bo", "long", json!(5)),
            entry("bo", "short", json!(4)),
            entry("zed", "a", json!(2)),
            entry("zed", "b", json!(1)),
        ],
        "P3: by participant then field"
    );
    fx.clock.advance(101);
    assert_eq!(
        entries(fx.peer.as_ref(), "ns").await,
        [
            entry("bo", "long", json!(5)),
            entry("zed", "a", json!(2)),
            entry("zed", "b", json!(1))
        ],
        "P3: only live entries"
    );
    assert!(entries(s, "other").await.is_empty());
}

/// A subscription to `ns`, live once this returns (P4).
pub(crate) async fn subscribe(store: &dyn Store, ns: &str) -> PresenceStream {
    match store.presence_subscribe(ns).await {
        Ok(subscriber) => subscriber,
        Err(err) => panic!("P4: presence_subscribe to {ns:?} failed: {err}"),
    }
}

/// The next patch of a subscription.
pub(crate) async fn next_patch(subscriber: &mut PresenceStream, what: &str) -> PresencePatch {
    match next_item(subscriber, what).await {
        Ok(patch) => patch,
        Err(err) => panic!("{what}: {err}"),
    }
}

/// P4: patches applied through the peer (another process) once
/// `presence_subscribe` returned reach every subscriber, on either handle,
/// in the order they applied, and nothing else does.
pub async fn p4_subscribers_receive_patches_from_the_peer(setup: SetupFn) {
    let fx = fixture(setup).await;
    let mut on_store = subscribe(fx.store.as_ref(), "room").await;
    let mut on_peer = subscribe(fx.peer.as_ref(), "room").await;
    let first = set(
        fx.peer.as_ref(),
        "room",
        "ann",
        &[("typing", json!(true)), ("mood", json!(1))],
        1_000,
        60_000,
    )
    .await;
    let second = set(
        fx.peer.as_ref(),
        "room",
        "ann",
        &[("typing", Value::Null)],
        2_000,
        60_000,
    )
    .await;
    set(
        fx.peer.as_ref(),
        "elsewhere",
        "ann",
        &[("typing", json!(1))],
        1_000,
        60_000,
    )
    .await;
    let stale = set(
        fx.peer.as_ref(),
        "room",
        "ann",
        &[("mood", json!(0))],
        5,
        60_000,
    )
    .await;
    assert_eq!(stale, None);
    let third = set(
        fx.store.as_ref(),
        "room",
        "bob",
        &[("here", json!(1))],
        3_000,
        60_000,
    )
    .await;
    if fx.caps.presence_patches_merge {
        // Merged patches add up to the same view, and the stale write
        // never shows.
        let mut expected = a2_core::presence::PresenceView::default();
        for patch in [&first, &second, &third].into_iter().flatten() {
            expected.apply(patch);
        }
        for (name, subscriber) in [("store", &mut on_store), ("peer", &mut on_peer)] {
            let mut view = a2_core::presence::PresenceView::default();
            while view != expected {
                let patch = next_patch(subscriber, &format!("P4 ({name})")).await;
                assert_ne!(
                    patch.values.get("mood"),
                    Some(&Some(json!(0))),
                    "P4: the stale write reached the subscriber on {name}"
                );
                view.apply(&patch);
            }
        }
        return;
    }
    for (name, subscriber) in [("store", &mut on_store), ("peer", &mut on_peer)] {
        let mut got = Vec::new();
        while got.len() < 3 {
            got.push(Some(next_patch(subscriber, &format!("P4 ({name})")).await));
        }
        assert_eq!(
            got,
            [first.clone(), second.clone(), third.clone()],
            "P4: subscriber on {name}"
        );
    }
}

/// P4: a patch applied through the peer (another process) right after
/// `presence_subscribe` returned reaches the subscriber, and is the first
/// thing it reports: the subscription is live when the call returns, and
/// the earlier rounds' entries, applied before it, are not reported.
/// Repeated with a new subscription and participant each round, so that a
/// store returning before its subscription takes effect is caught.
pub async fn p4_patch_from_peer_right_after_subscribe_is_delivered(setup: SetupFn) {
    let fx = fixture(setup).await;
    for round in 0..50_i64 {
        let participant = format!("p{round}");
        let mut subscriber = subscribe(fx.store.as_ref(), "race").await;
        let applied = set(
            fx.peer.as_ref(),
            "race",
            &participant,
            &[("here", json!(round))],
            1_000 + round,
            60_000,
        )
        .await;
        let Some(applied) = applied else {
            panic!("P4: round {round}: the write did not apply");
        };
        let got = next_patch(&mut subscriber, &format!("P4 (round {round})")).await;
        assert_eq!(got, applied, "P4: round {round}");
    }
}

/// X3, P1: a presence write's `at` and `seen` at ±(2^53 − 1) are exact: the
/// later of two writes one millisecond apart at the top of the range wins,
/// and both read back as written; one past the range (up to `i64::MAX` and
/// down to `i64::MIN`) is `InvalidArgument`, nothing written.
pub async fn x3_presence_times_are_exact_to_the_largest_exact_integer(setup: SetupFn) {
    use a2_core::validate::MAX_EXACT_INTEGER as TOP;
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    assert!(
        set(s, "room", "ann", &[("typing", json!(1))], TOP - 1, 60_000)
            .await
            .is_some()
    );
    assert!(
        set(s, "room", "ann", &[("typing", json!(2))], TOP, 60_000)
            .await
            .is_some()
    );
    // One millisecond older than the stored write: it loses (P1).
    assert!(
        set(s, "room", "ann", &[("typing", json!(3))], TOP - 1, 60_000)
            .await
            .is_none()
    );
    let entries = s.presence_read("room").await.expect("P3: read");
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!((entries[0].value.clone(), entries[0].at), (json!(2), TOP));
    let low = s
        .presence_set(
            "room",
            "bob",
            values(&[("typing", json!(1))]),
            meta(-TOP, 60_000),
        )
        .await
        .expect("X3: -(2^53 - 1) is in range");
    assert_eq!(low.map(|p| p.at), Some(-TOP));
    for at in [TOP + 1, i64::MAX, -TOP - 1, i64::MIN] {
        expect_code(
            s.presence_set(
                "room",
                "cy",
                values(&[("typing", json!(1))]),
                meta(at, 60_000),
            )
            .await,
            a2_core::ErrorCode::InvalidArgument,
            "X3: at outside the exact range",
        );
    }
    let mut beyond = meta(START_MS, 60_000);
    beyond.seen = i64::MIN;
    expect_code(
        s.presence_set("room", "cy", values(&[("typing", json!(1))]), beyond)
            .await,
        a2_core::ErrorCode::InvalidArgument,
        "X3: seen outside the exact range",
    );
    let participants: Vec<String> = s
        .presence_read("room")
        .await
        .expect("P3: read")
        .into_iter()
        .map(|e| e.participant)
        .collect();
    assert_eq!(participants, ["ann", "bob"], "nothing of cy was written");
}
