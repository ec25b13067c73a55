//! Strange names (§1: any characters, injective key encoding): sessions,
//! lanes, reducers, presence names and event ids with separators, glob and
//! quote characters, newlines, emoji, maximal lengths and prefixes of each
//! other never share storage.

use a2_core::{FailKind, ListSessionsOptions, Snapshot, SnapshotInfo};
use serde_json::json;

use super::presence::{entries, set};
use super::state::{put, snap, state};
use crate::support::*;
use crate::{START_MS, SetupFn, fixture};

/// Names that break naive key building: separators, globs, braces (Redis
/// hash tags), quotes, whitespace, escapes, emoji, NUL, prefixes of each
/// other, and the longest allowed.
fn strange_names() -> Vec<String> {
    let mut names: Vec<String> = [
        ":", "::", "a", "a:", ":a", "a:b", "a:b:c", "a::b", "b:c", "*", "a*", "?", "[a]", "{", "}",
        "{a}", "a}", "{a}:b", "\"", "\"a\"", "'", "\n", "a\nb", "a\r\n", " ", "a b", "a ", "🙂",
        "a🙂b", "\\", "a\\:b", "%3A", "a%3Ab", "\t", "é", "e\u{301}", "a\u{0}b", "1:a", "3:a:b",
        "a|b", "a/b", "a.b", "a#b", "a:events", "a:meta", "a:lane:b",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    names.push("x".repeat(1_023));
    names.push("x".repeat(1_024));
    names.push("🙂".repeat(256));
    names
}

/// §1 names, A1, R1, I1, PS1, C2: sessions named by strange ids are fully
/// isolated: each reads, lists, claims and streams only its own events.
pub async fn names_sessions_are_isolated_whatever_their_ids(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let names = strange_names();
    for (i, name) in names.iter().enumerate() {
        let events = vec![
            a2_core::NewEvent::new("t", json!({ "session": name })).id(format!("e{i}-1")),
            a2_core::NewEvent::new("t", json!({ "session": name }))
                .id(format!("e{i}-2"))
                .lane(name.clone()),
        ];
        let rows = append(s, name, events).await;
        assert_eq!(indexes(&rows), [1, 2], "A1: session {name:?} starts at 1");
    }
    for (i, name) in names.iter().enumerate() {
        let rows = read_all(fx.peer.as_ref(), name).await;
        assert_eq!(
            rows.len(),
            2,
            "R1: session {name:?} holds only its own events"
        );
        for row in &rows {
            assert_eq!(row.event.session_id, *name);
            assert_eq!(row.event.payload, json!({ "session": name }));
            assert!(row.event.id.starts_with(&format!("e{i}-")));
        }
        assert_eq!(rows[1].event.lane.as_deref(), Some(name.as_str()));
    }
    let mut sorted = names.clone();
    sorted.sort();
    let listed: Vec<String> = all_sessions(s)
        .await
        .into_iter()
        .map(|x| x.session_id)
        .collect();
    assert_eq!(
        listed, sorted,
        "I1: every session listed once, in byte order"
    );
    assert!(
        all_sessions(s)
            .await
            .iter()
            .all(|x| x.event_count == 2 && x.pending_count == 2)
    );
    assert_eq!(all_pending(s).await, sorted, "PS1");
    for name in &names {
        let rows = claimed(s, name, "w", TTL, 10).await;
        assert_eq!(
            claims_of(&rows),
            [at(1, 1), at(2, 1)],
            "C2: session {name:?} claims its own events"
        );
    }
    let mut feed = s.stream("a:b", 0);
    append(fx.peer.as_ref(), "a", vec![ev("not-mine")]).await;
    append(fx.peer.as_ref(), "a:b:c", vec![ev("not-mine")]).await;
    append(fx.peer.as_ref(), "a:b", vec![ev("mine")]).await;
    let got = next_indexes(&mut feed, 3, "ST1 strange names").await;
    assert_eq!(got, [1, 2, 3], "ST1: a feed sees only its session");
}

/// §1 names, A9, F6: lanes are isolated within a session (prefixes,
/// separators) and across sessions (session "a" lane "b:c" vs session "a:b"
/// lane "c").
pub async fn names_lanes_are_isolated_within_and_across_sessions(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    append(s, "a", vec![ev("1").lane("b:c"), ev("2").lane("b:c")]).await;
    append(s, "a:b", vec![ev("1").lane("c"), ev("2").lane("c")]).await;
    append(s, "a:b:c", vec![ev("1"), ev("2")]).await;
    assert_eq!(indexes(&claimed(s, "a", "w", TTL, 10).await), [1]);
    assert_eq!(
        indexes(&claimed(s, "a:b", "w", TTL, 10).await),
        [1],
        "A9: lane of another session"
    );
    assert_eq!(indexes(&claimed(s, "a:b:c", "w", TTL, 10).await), [1, 2]);

    let lanes = strange_names();
    let n = lanes.len() as u64;
    let events = lanes
        .iter()
        .map(|l| ev("head").lane(l.clone()))
        .chain(lanes.iter().map(|l| ev("next").lane(l.clone())))
        .collect();
    append(s, "L", events).await;
    let heads = claimed(s, "L", "w", TTL, 1_000).await;
    assert_eq!(
        indexes(&heads),
        (1..=n).collect::<Vec<_>>(),
        "A9: one head per lane"
    );
    assert_eq!(
        failed(s, "L", 1, 1, 1, None).await.outcome,
        FailKind::DeadLettered
    );
    for index in 2..=n {
        completed(s, "L", index, 1, vec![]).await;
    }
    let next = claimed(s, "L", "w", TTL, 1_000).await;
    let expected: Vec<u64> = (n + 2..=2 * n).collect();
    assert_eq!(
        indexes(&next),
        expected,
        "F6: only lane {:?} is blocked",
        lanes[0]
    );
}

/// §1 names, S1, S2, I3: reducers with strange names, or names that are
/// prefixes of each other, keep their own snapshots, within a session and
/// across sessions (session "a" reducer "b:x" vs session "a:b" reducer "x").
pub async fn names_reducers_are_isolated(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let reducers = strange_names();
    append_n(s, "a", reducers.len()).await;
    append_n(s, "a:b", 2).await;
    let writes = reducers
        .iter()
        .enumerate()
        .map(|(i, r)| snap(r, i as u64 + 1, json!(r)))
        .collect();
    put(s, "a", writes).await;
    put(s, "a:b", vec![snap("x", 2, json!("a:b/x"))]).await;
    put(s, "a", vec![snap("b:x", 1, json!("a/b:x"))]).await;
    for (i, r) in reducers.iter().enumerate() {
        let read = state(s, "a", r).await;
        assert_eq!(
            read.snapshot,
            Some(Snapshot {
                index: i as u64 + 1,
                state: json!(r)
            }),
            "S1: reducer {r:?}"
        );
        assert_eq!(read.events.len(), reducers.len() - i - 1);
    }
    assert_eq!(
        state(s, "a:b", "x").await.snapshot.map(|x| x.state),
        Some(json!("a:b/x"))
    );
    assert_eq!(
        state(s, "a", "b:x").await.snapshot.map(|x| x.state),
        Some(json!("a/b:x"))
    );
    assert_eq!(state(s, "a:b", "b:x").await.snapshot, None);
    assert_eq!(state(s, "a", "x").await.snapshot, None);
    let mut expected: Vec<SnapshotInfo> = reducers
        .iter()
        .enumerate()
        .map(|(i, r)| SnapshotInfo {
            reducer: r.clone(),
            index: i as u64 + 1,
            updated_at: START_MS,
        })
        .collect();
    expected.push(SnapshotInfo {
        reducer: "b:x".into(),
        index: 1,
        updated_at: START_MS,
    });
    expected.sort_by(|x, y| x.reducer.cmp(&y.reducer));
    assert_eq!(
        s.list_snapshots("a")
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        expected,
        "I3"
    );
    assert_eq!(
        s.list_snapshots("a:b")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .len(),
        1,
        "I3"
    );
}

/// §1 names, P1, P3: presence namespaces, participants and fields never mix
/// (ns "a" participant "b:c" vs ns "a:b" participant "c"; participant "p"
/// field "f:g" vs participant "p:f" field "g").
pub async fn names_presence_is_isolated(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let ttl = 60_000;
    set(s, "a", "b:c", &[("f", json!("a|b:c|f"))], 1, ttl).await;
    set(s, "a:b", "c", &[("f", json!("a:b|c|f"))], 1, ttl).await;
    set(s, "a:b", "c:f", &[("g", json!("a:b|c:f|g"))], 1, ttl).await;
    set(s, "a:b", "c", &[("f:g", json!("a:b|c|f:g"))], 1, ttl).await;
    let names = strange_names();
    for (i, name) in names.iter().enumerate() {
        set(s, name, name, &[(name.as_str(), json!(i))], 1, ttl).await;
    }
    let e = |p: &str, f: &str, v: serde_json::Value| (p.to_owned(), f.to_owned(), v);
    let index_of = |n: &str| {
        names
            .iter()
            .position(|x| x == n)
            .unwrap_or_else(|| panic!("{n}"))
    };
    assert_eq!(
        entries(s, "a").await,
        [
            e("a", "a", json!(index_of("a"))),
            e("b:c", "f", json!("a|b:c|f"))
        ],
        "P3: namespace a"
    );
    assert_eq!(
        entries(s, "a:b").await,
        [
            e("a:b", "a:b", json!(index_of("a:b"))),
            e("c", "f", json!("a:b|c|f")),
            e("c", "f:g", json!("a:b|c|f:g")),
            e("c:f", "g", json!("a:b|c:f|g")),
        ],
        "P3: namespace a:b"
    );
    for (i, name) in names.iter().enumerate() {
        if name == "a" || name == "a:b" {
            continue;
        }
        assert_eq!(
            entries(fx.peer.as_ref(), name).await,
            [e(name, name, json!(i))],
            "P3: namespace {name:?}"
        );
    }
    // Deleting one field touches no look-alike.
    let out = set(s, "a:b", "c", &[("f", serde_json::Value::Null)], 2, ttl).await;
    assert!(out.is_some());
    assert_eq!(entries(s, "a:b").await.len(), 3);
    assert_eq!(entries(s, "a").await.len(), 2);
}

/// §1 names, A4, A5: event ids with strange characters, or that are
/// prefixes of each other, are distinct ids, and ids are per session.
pub async fn names_event_ids_are_isolated(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let ids: Vec<String> = strange_names()
        .into_iter()
        .filter(|n| n.len() <= 256)
        .collect();
    let batch: Vec<_> = ids.iter().map(|id| ev_id(id)).collect();
    let first = append(s, "one", batch.clone()).await;
    assert_eq!(first.len(), ids.len());
    let others: Vec<_> = ids
        .iter()
        .map(|id| format!("{id}:"))
        .filter(|id| !ids.contains(id))
        .map(|id| ev_id(&id))
        .collect();
    let second = append(s, "one:", others.clone()).await;
    assert_eq!(
        second.len(),
        others.len(),
        "A4: look-alike ids are other ids"
    );
    let retry = s
        .append("one", batch)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(retry.events, first, "A5: a retry finds every strange id");
    // A4: the same strange ids in another session are that session's own.
    let strange: Vec<_> = ["a:b", "*", "{a}", "🙂", "a\nb"]
        .into_iter()
        .map(ev_id)
        .collect();
    let elsewhere = append(s, "two", strange.clone()).await;
    assert_eq!(indexes(&elsewhere), [1, 2, 3, 4, 5], "A4");
    let again = s
        .append("two", strange)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.events, elsewhere, "A5 in the other session");
}

/// §1 names, I1: a `list_sessions` prefix is literal: glob, pattern and
/// separator characters match only themselves.
pub async fn names_list_prefix_is_literal(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    for id in [
        "*x", "ax", "a*", "a?", "a[b]", "ab]", "a\\", "[", "%", "_x", "a%b", "a:", "a", "{a}", "{a",
    ] {
        append(s, id, vec![ev("x").settled()]).await;
    }
    let list = |prefix: &'static str| async move {
        let options = ListSessionsOptions::new(100).prefix(Some(prefix.into()));
        match s.list_sessions(options).await {
            Ok(page) => page
                .sessions
                .into_iter()
                .map(|x| x.session_id)
                .collect::<Vec<_>>(),
            Err(err) => panic!("list_sessions failed: {err}"),
        }
    };
    assert_eq!(list("*").await, ["*x"]);
    assert_eq!(list("a*").await, ["a*"]);
    assert_eq!(list("a?").await, ["a?"]);
    assert_eq!(list("a[").await, ["a[b]"]);
    assert_eq!(list("[").await, ["["]);
    assert_eq!(list("a\\").await, ["a\\"]);
    assert_eq!(list("%").await, ["%"]);
    assert_eq!(list("_").await, ["_x"]);
    assert_eq!(list("a:").await, ["a:"]);
    assert_eq!(list("{a").await, ["{a", "{a}"]);
    assert_eq!(
        list("a").await,
        ["a", "a%b", "a*", "a:", "a?", "a[b]", "a\\", "ab]", "ax"]
    );
}

/// §1 names, ST1, P4: feeds and presence subscriptions of names with glob
/// characters, or that are prefixes of each other, see only their own
/// session or namespace.
pub async fn names_feeds_and_subscriptions_are_isolated(setup: SetupFn) {
    let fx = fixture(setup).await;
    let s = fx.store.as_ref();
    let p = fx.peer.as_ref();
    let names = ["a*", "a?", "[a]", "a", "a:b", "*", "{a}"];
    let others = ["ab", "a", "a:b:c", "b", "a:", "{a}:b", "abc"];
    let mut feeds: Vec<_> = names.iter().map(|n| s.stream(n, 0)).collect();
    let mut subs = Vec::new();
    for name in names {
        subs.push(super::presence::subscribe(s, name).await);
    }
    for other in others {
        if !names.contains(&other) {
            append(p, other, vec![ev("not-yours")]).await;
            set(p, other, "intruder", &[("f", json!(other))], 1, 60_000).await;
        }
    }
    for (i, name) in names.iter().enumerate() {
        append(p, name, vec![ev("yours")]).await;
        set(p, name, "owner", &[("f", json!(name))], 1, 60_000).await;
        match next_item(&mut feeds[i], "ST1 isolated feed").await {
            Ok(event) => assert_eq!(
                (
                    event.session_id.as_str(),
                    event.event_type.as_str(),
                    event.index
                ),
                (*name, "yours", 1),
                "ST1: the feed of {name:?} saw only its own event"
            ),
            Err(err) => panic!("ST1: the feed of {name:?} failed: {err}"),
        }
        let patch = super::presence::next_patch(&mut subs[i], "P4 isolated subscription").await;
        assert_eq!(
            patch.participant, "owner",
            "P4: the subscription to {name:?} got {patch:?}"
        );
        assert_eq!(patch.values.get("f"), Some(&Some(json!(name))));
    }
}
