//! The differential test: the same random operation sequences, with a
//! manual clock and sequential ids, applied to the memory store (the
//! reference) and to another store give identical observable results:
//! rows, outcomes, error codes and feeds. Every store's
//! `tests/differential.rs` calls [`run_seed`] for a number of seeds.
//!
//! ```no_run
//! use std::sync::Arc;
//! use a2_conformance::{START_MS, differential};
//! use a2_conformance::a2_core::{ManualClock, MemoryStore};
//!
//! # async fn example() {
//! let (seeds, steps) = differential::seeds_and_steps();
//! for seed in 0..seeds {
//!     let clock = Arc::new(ManualClock::new(START_MS));
//!     // The store under test, built with these options.
//!     let store = MemoryStore::new(differential::options(clock.clone()));
//!     differential::run_seed("memory", &store, clock, seed, steps).await;
//! }
//! # }
//! ```
//!
//! This crate is a test suite: a difference panics with the seed, the step,
//! the operation and both results.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use a2_core::*;
use futures::StreamExt;
use serde_json::json;

/// A small deterministic generator (xorshift64*), so a failing seed
/// replays exactly.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const SESSIONS: [&str; 3] = ["a", "b:{1}", "c d/é"];
const LANES: [&str; 2] = ["x", "y:{z}"];
const HOLDERS: [&str; 2] = ["w1", "w2"];

/// One operation, applied to a store, rendered as text for comparison.
async fn apply(store: &dyn Store, rng_op: &Op) -> String {
    fn show<T: std::fmt::Debug>(result: Result<T>) -> String {
        match result {
            Ok(value) => format!("{value:?}"),
            Err(error) => format!("Err({:?})", error.code()),
        }
    }
    match rng_op {
        Op::Append(session, events) => show(store.append(session, events.clone()).await),
        Op::AppendClaim(session, events, claim) => show(
            store
                .append_and_claim(session, events.clone(), claim.clone())
                .await,
        ),
        Op::Claim(request) => show(store.claim_available(request.clone()).await),
        Op::Renew(request) => show(store.renew_claims(request.clone()).await),
        Op::Complete(request) => show(store.complete_attempt(request.clone()).await),
        Op::Fail(request) => show(store.fail_attempt(request.clone()).await),
        Op::Release(request) => show(store.release_claims(request.clone()).await),
        Op::Read(session, range) => show(store.read(session, *range).await),
        Op::History(session, options) => show(store.read_history(session, *options).await),
        Op::ReadEvents(session, options) => show(store.read_events(session, *options).await),
        Op::Pending(page) => show(store.pending_sessions(page.clone()).await),
        Op::List(options) => show(store.list_sessions(options.clone()).await),
        Op::PutSnapshots(session, snapshots) => {
            show(store.put_snapshots(session, snapshots.clone()).await)
        }
        Op::ReadState(session, reducer) => show(store.read_state(session, reducer).await),
        Op::ListSnapshots(session) => show(store.list_snapshots(session).await),
        Op::PresenceSet(ns, participant, values, meta) => show(
            store
                .presence_set(ns, participant, values.clone(), *meta)
                .await,
        ),
        Op::PresenceRead(ns) => show(store.presence_read(ns).await),
        Op::Clear(session) => show(store.clear(session).await),
        Op::Revive(session, index) => show(store.revive(session, *index).await),
        Op::Advance(_) => String::new(),
    }
}

/// One generated operation.
#[derive(Debug, Clone)]
enum Op {
    Append(String, Vec<NewEvent>),
    AppendClaim(String, Vec<NewEvent>, AppendClaim),
    Claim(ClaimRequest),
    Renew(RenewRequest),
    Complete(CompleteRequest),
    Fail(FailRequest),
    Release(ReleaseRequest),
    Read(String, ReadRange),
    History(String, HistoryOptions),
    ReadEvents(String, ReadEventsOptions),
    Pending(PageRequest),
    List(ListSessionsOptions),
    PutSnapshots(String, Vec<SnapshotWrite>),
    ReadState(String, String),
    ListSnapshots(String),
    PresenceSet(
        String,
        String,
        BTreeMap<String, Option<serde_json::Value>>,
        PresenceMeta,
    ),
    PresenceRead(String),
    Clear(String),
    Revive(String, u64),
    Advance(i64),
}

fn claims(rng: &mut Rng) -> Vec<Claim> {
    (0..rng.below(3))
        .map(|_| Claim {
            index: rng.below(8),
            attempt: rng.below(4) as u32,
        })
        .collect()
}

fn lease(rng: &mut Rng, now: Millis) -> Lease {
    match rng.below(4) {
        0 => Lease::ExpiresAt(now + rng.below(3000) as i64 - 500),
        _ => Lease::Ttl(rng.below(2000) + if rng.chance(5) { 0 } else { 1 }),
    }
}

fn generate(rng: &mut Rng, now: Millis, id_pool: &mut Vec<String>) -> Op {
    let session = rng.pick(&SESSIONS).to_string();
    match rng.below(100) {
        0..=19 => {
            let n = rng.below(4) as usize;
            let events = (0..n)
                .map(|_| {
                    let mut e = NewEvent::new(
                        *rng.pick(&["t1", "t2"]),
                        json!({"k": rng.below(3), "s": "x"}),
                    );
                    if rng.chance(40) {
                        e = e.lane(*rng.pick(&LANES));
                    }
                    if rng.chance(15) {
                        e = e.settled();
                    }
                    if rng.chance(30) {
                        // Reuse an id now and then: retries and duplicates.
                        let id = if !id_pool.is_empty() && rng.chance(50) {
                            rng.pick(id_pool).clone()
                        } else {
                            format!("c{}", rng.below(40))
                        };
                        id_pool.push(id.clone());
                        e = e.id(id);
                    }
                    if rng.chance(10) {
                        e = e.caused_by(Cause {
                            index: rng.below(6) + 1,
                            attempt: rng.below(3) as u32 + 1,
                            batch_size: None,
                        });
                    }
                    e
                })
                .collect();
            if rng.chance(33) {
                let claim = AppendClaim::new(
                    rng.pick(&HOLDERS).to_string(),
                    lease(rng, now),
                    rng.below(3) as usize,
                );
                Op::AppendClaim(session, events, claim)
            } else {
                Op::Append(session, events)
            }
        }
        20..=34 => Op::Claim(ClaimRequest {
            session,
            holder: rng.pick(&HOLDERS).to_string(),
            lease: lease(rng, now),
            exclude_indexes: (0..rng.below(2)).map(|_| rng.below(6) + 1).collect(),
            limit: rng.below(3) as usize + 1,
        }),
        35..=39 => Op::Renew(RenewRequest {
            session,
            holder: rng.pick(&HOLDERS).to_string(),
            claims: claims(rng),
            lease: lease(rng, now),
        }),
        40..=51 => Op::Complete(CompleteRequest {
            session,
            index: rng.below(8),
            attempt: rng.below(4) as u32,
            events: (0..rng.below(3))
                .map(|_| {
                    let mut e = NewEvent::new("r", json!([1, "two"]));
                    if rng.chance(30) {
                        e = e.lane(*rng.pick(&LANES));
                    }
                    if rng.chance(20) {
                        e = e.id(format!("c{}", rng.below(40)));
                    }
                    e
                })
                .collect(),
            batch_size: None,
        }),
        52..=59 => Op::Fail(FailRequest {
            session,
            index: rng.below(8),
            attempt: rng.below(4) as u32,
            error: "boom".into(),
            max_failures: rng.below(3) as u32 + if rng.chance(5) { 0 } else { 1 },
            retry_at: rng.chance(40).then(|| now + rng.below(2000) as i64),
        }),
        60..=62 => Op::Release(ReleaseRequest {
            session,
            holder: rng.pick(&HOLDERS).to_string(),
            claims: claims(rng),
        }),
        63..=65 => Op::Read(
            session,
            ReadRange {
                after_index: rng.below(5),
                through_index: rng.chance(50).then(|| rng.below(10)),
            },
        ),
        66..=67 => Op::History(
            session,
            HistoryOptions::new(rng.below(4) as usize + if rng.chance(5) { 0 } else { 1 })
                .before_index(rng.chance(50).then(|| rng.below(10))),
        ),
        68..=69 => Op::ReadEvents(
            session,
            ReadEventsOptions::new(rng.below(4) as usize + 1)
                .after_index(rng.below(5))
                .through_index(rng.chance(50).then(|| rng.below(10))),
        ),
        70..=71 => Op::Pending(PageRequest {
            cursor: rng.chance(50).then(|| rng.pick(&SESSIONS).to_string()),
            limit: rng.below(3) as usize + 1,
        }),
        72..=73 => Op::List(
            ListSessionsOptions::new(rng.below(3) as usize + 1)
                .prefix(
                    rng.chance(40)
                        .then(|| rng.pick(&["a", "b", "", "c d"]).to_string()),
                )
                .cursor(rng.chance(40).then(|| rng.pick(&SESSIONS).to_string())),
        ),
        74..=76 => Op::PutSnapshots(
            session,
            (0..rng.below(3))
                .map(|_| SnapshotWrite {
                    reducer: rng.pick(&["r1", "r:{2}"]).to_string(),
                    index: rng.below(8),
                    state: json!({"n": rng.below(10)}),
                })
                .collect(),
        ),
        77..=78 => Op::ReadState(session, rng.pick(&["r1", "r:{2}"]).to_string()),
        79 => Op::ListSnapshots(session),
        80..=85 => {
            let values = (0..rng.below(3))
                .map(|_| {
                    let field = rng.pick(&["typing", "cursor"]).to_string();
                    let value = rng.chance(75).then(|| json!(rng.below(5)));
                    (field, value)
                })
                .collect();
            Op::PresenceSet(
                session,
                rng.pick(&["ann", "bob:{x}"]).to_string(),
                values,
                PresenceMeta {
                    seen: rng.below(5) as i64,
                    at: now + rng.below(1000) as i64 - 500,
                    ttl_ms: rng.below(3000) + 1,
                },
            )
        }
        86..=87 => Op::PresenceRead(session),
        88 => Op::Clear(session),
        89..=91 => Op::Revive(session, rng.below(8)),
        _ => Op::Advance(rng.below(1500) as i64 - if rng.chance(5) { 1600 } else { 0 }),
    }
}

/// The options both stores of a run use: the manual clock and sequential
/// ids `e1`, `e2`, … (so generated ids agree row by row).
pub fn options(clock: Arc<ManualClock>) -> StoreOptions {
    StoreOptions::default()
        .with_clock(clock)
        .with_ids(Arc::new(SequentialIds::new("e")))
}

/// How many seeds and steps per seed to run: `A2_DIFF_SEEDS` and
/// `A2_DIFF_STEPS`, by default 24 and 300.
pub fn seeds_and_steps() -> (u64, usize) {
    let seeds: u64 = std::env::var("A2_DIFF_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    let steps: usize = std::env::var("A2_DIFF_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    (seeds, steps)
}

/// Runs the sequence of `seed` (`steps` operations) on a fresh memory store
/// and on `store`, an empty store named `name` in messages, built with
/// [`options`] around `clock`; panics at the first difference, then checks
/// that both feeds of session `a` delivered the same events.
pub async fn run_seed(
    name: &str,
    store: &dyn Store,
    clock: Arc<ManualClock>,
    seed: u64,
    steps: usize,
) {
    let memory = MemoryStore::new(options(clock.clone()));
    let mut memory_feed = memory.stream("a", 0);
    let mut other_feed = store.stream("a", 0);
    let mut rng = Rng::new(seed);
    let mut ids = Vec::new();
    let mut cleared_a = false;
    for step in 0..steps {
        let op = generate(&mut rng, clock.now_ms(), &mut ids);
        if let Op::Advance(delta) = op {
            clock.advance(delta);
            continue;
        }
        if matches!(&op, Op::Clear(s) if s == "a") {
            cleared_a = true;
        }
        let expected = apply(&memory, &op).await;
        let actual = apply(store, &op).await;
        assert_eq!(
            actual, expected,
            "seed {seed}, step {step}: {op:?}\n{name}:  {actual}\nmemory: {expected}"
        );
    }
    if !cleared_a {
        // Both feeds saw the same events: everything up to the frontier.
        let frontier = match memory.read("a", ReadRange::default()).await {
            Ok(rows) => rows.len(),
            Err(error) => panic!("seed {seed}: reading the memory store failed: {error}"),
        };
        for k in 0..frontier {
            let m = match tokio::time::timeout(Duration::from_secs(5), memory_feed.next()).await {
                Ok(Some(Ok(event))) => event,
                other => panic!("seed {seed}: memory feed at {k}: {other:?}"),
            };
            let r = match tokio::time::timeout(Duration::from_secs(5), other_feed.next()).await {
                Ok(Some(Ok(event))) => event,
                Ok(other) => panic!("seed {seed}: {name} feed at {k}: {other:?}"),
                Err(_) => panic!("seed {seed}: {name} feed stalled at {k}"),
            };
            assert_eq!(r, m, "seed {seed}: feed event {k}");
        }
    }
}
