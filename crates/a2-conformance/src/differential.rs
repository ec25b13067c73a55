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
struct Rng {
    state: u64,
    /// How often (in percent) an integer argument is replaced by an
    /// extreme of its type (X1, X2).
    extremes: u64,
}

/// The extremes an integer argument may take instead of its usual value.
const U64_EXTREMES: [u64; 6] = [
    0,
    1,
    u32::MAX as u64,
    i64::MAX as u64,
    u64::MAX - 1,
    u64::MAX,
];
const U32_EXTREMES: [u32; 4] = [0, 1, u32::MAX - 1, u32::MAX];
const USIZE_EXTREMES: [usize; 4] = [0, 1, 10_001, usize::MAX];
const I64_EXTREMES: [i64; 6] = [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX - 1, i64::MAX];

impl Rng {
    fn new(seed: u64, extremes: u64) -> Self {
        Self {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            extremes,
        }
    }

    fn next(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Whether this argument takes an extreme (never asks the generator
    /// when extremes are off, so those sequences stay as they were).
    fn extreme(&mut self) -> bool {
        self.extremes > 0 && self.chance(self.extremes)
    }

    fn u64_or_extreme(&mut self, usual: u64) -> u64 {
        if self.extreme() {
            *self.pick(&U64_EXTREMES)
        } else {
            usual
        }
    }

    fn u32_or_extreme(&mut self, usual: u32) -> u32 {
        if self.extreme() {
            *self.pick(&U32_EXTREMES)
        } else {
            usual
        }
    }

    fn usize_or_extreme(&mut self, usual: usize) -> usize {
        if self.extreme() {
            *self.pick(&USIZE_EXTREMES)
        } else {
            usual
        }
    }

    fn i64_or_extreme(&mut self, usual: i64) -> i64 {
        if self.extreme() {
            *self.pick(&I64_EXTREMES)
        } else {
            usual
        }
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
            Err(error) => {
                if error.code() == ErrorCode::Corrupted
                    || error.code() == ErrorCode::StoreUnavailable
                {
                    // Never an expected answer (a store that is up and
                    // unavailable is a decoding fault): say what it found.
                    eprintln!("differential: {error}");
                }
                format!("Err({:?})", error.code())
            }
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
        Op::Close(session) => show(store.close_session(session).await),
        Op::AppendWith(session, events, expiry, if_frontier, close) => {
            let mut options = AppendOptions::new().expiry(*expiry);
            if let Some(frontier) = if_frontier {
                options = options.if_frontier(*frontier);
            }
            if *close {
                options = options.close();
            }
            show(store.append_with(session, events.clone(), options).await)
        }
        Op::SetExpiry(session, expiry) => show(store.set_expiry(session, *expiry).await),
        Op::Trim(session, through) => show(store.trim(session, *through).await),
        Op::Fork(source, at, target) => show(store.fork(source, *at, target).await),
        Op::Cancel(session, index, reason) => {
            show(store.cancel(session, *index, reason.clone()).await)
        }
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
    Close(String),
    Trim(String, u64),
    /// Appends with an expiry, an expected frontier (A13) and a close (CL6).
    AppendWith(String, Vec<NewEvent>, Expiry, Option<u64>, bool),
    SetExpiry(String, Expiry),
    Fork(String, u64, String),
    Cancel(String, u64, Option<String>),
    Advance(i64),
}

fn claims(rng: &mut Rng) -> Vec<Claim> {
    (0..rng.below(3))
        .map(|_| {
            let index = rng.below(8);
            let attempt = rng.below(4) as u32;
            Claim {
                index: rng.u64_or_extreme(index),
                attempt: rng.u32_or_extreme(attempt),
            }
        })
        .collect()
}

fn lease(rng: &mut Rng, now: Millis) -> Lease {
    match rng.below(4) {
        0 => {
            let at = now + rng.below(3000) as i64 - 500;
            Lease::ExpiresAt(rng.i64_or_extreme(at))
        }
        _ => {
            let ttl = rng.below(2000) + if rng.chance(5) { 0 } else { 1 };
            Lease::Ttl(rng.u64_or_extreme(ttl))
        }
    }
}

/// A session expiry (EX1): a ttl, a time, both or neither, now and then out
/// of bounds.
fn expiry(rng: &mut Rng, now: Millis) -> Expiry {
    let ttl = rng.chance(70).then(|| {
        let ttl = rng.below(4000);
        rng.u64_or_extreme(ttl)
    });
    let at = rng.chance(40).then(|| {
        let at = now + rng.below(4000) as i64 - 200;
        rng.i64_or_extreme(at)
    });
    Expiry {
        ttl_ms: ttl,
        expires_at: at,
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
                    // DL1: now and then a due time, past, near or out of
                    // bounds.
                    if rng.chance(8) {
                        let ms = rng.below(2000);
                        e.delay_ms = Some(rng.u64_or_extreme(ms));
                    } else if rng.chance(4) {
                        let at = now + rng.below(2000) as i64 - 500;
                        e.not_before = Some(rng.i64_or_extreme(at));
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
                        let (index, attempt) = (rng.below(6) + 1, rng.below(3) as u32 + 1);
                        e = e.caused_by(Cause {
                            index: rng.u64_or_extreme(index),
                            attempt: rng.u32_or_extreme(attempt),
                            batch_size: None,
                        });
                    }
                    e
                })
                .collect();
            if rng.chance(10) {
                // A13: half of them at a frontier, right or (often) wrong.
                let expiry = expiry(rng, now);
                let if_frontier = if rng.chance(50) {
                    let frontier = rng.below(8);
                    Some(rng.u64_or_extreme(frontier))
                } else {
                    None
                };
                // CL6: a quarter of them close the session as well.
                let close = rng.chance(25);
                Op::AppendWith(session, events, expiry, if_frontier, close)
            } else if rng.chance(33) {
                let holder = rng.pick(&HOLDERS).to_string();
                let lease = lease(rng, now);
                let limit = rng.below(3) as usize;
                let claim = AppendClaim::new(holder, lease, rng.usize_or_extreme(limit));
                Op::AppendClaim(session, events, claim)
            } else {
                Op::Append(session, events)
            }
        }
        20..=34 => Op::Claim(ClaimRequest {
            session,
            holder: rng.pick(&HOLDERS).to_string(),
            lease: lease(rng, now),
            exclude_indexes: (0..rng.below(2))
                .map(|_| {
                    let index = rng.below(6) + 1;
                    rng.u64_or_extreme(index)
                })
                .collect(),
            limit: {
                let limit = rng.below(3) as usize + 1;
                rng.usize_or_extreme(limit)
            },
        }),
        35..=39 => Op::Renew(RenewRequest {
            session,
            holder: rng.pick(&HOLDERS).to_string(),
            claims: claims(rng),
            lease: lease(rng, now),
        }),
        40..=51 => Op::Complete(CompleteRequest {
            session,
            index: {
                let index = rng.below(8);
                rng.u64_or_extreme(index)
            },
            attempt: {
                let attempt = rng.below(4) as u32;
                rng.u32_or_extreme(attempt)
            },
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
            index: {
                let index = rng.below(8);
                rng.u64_or_extreme(index)
            },
            attempt: {
                let attempt = rng.below(4) as u32;
                rng.u32_or_extreme(attempt)
            },
            error: "boom".into(),
            max_failures: {
                let max = rng.below(3) as u32 + if rng.chance(5) { 0 } else { 1 };
                rng.u32_or_extreme(max)
            },
            retry_at: rng.chance(40).then(|| {
                let at = now + rng.below(2000) as i64;
                rng.i64_or_extreme(at)
            }),
        }),
        60..=62 => Op::Release(ReleaseRequest {
            session,
            holder: rng.pick(&HOLDERS).to_string(),
            claims: claims(rng),
        }),
        63..=65 => Op::Read(
            session,
            ReadRange {
                after_index: {
                    let after = rng.below(5);
                    rng.u64_or_extreme(after)
                },
                through_index: rng.chance(50).then(|| {
                    let through = rng.below(10);
                    rng.u64_or_extreme(through)
                }),
            },
        ),
        66..=67 => Op::History(
            session,
            HistoryOptions::new({
                let limit = rng.below(4) as usize + if rng.chance(5) { 0 } else { 1 };
                rng.usize_or_extreme(limit)
            })
            .before_index(rng.chance(50).then(|| {
                let before = rng.below(10);
                rng.u64_or_extreme(before)
            })),
        ),
        68..=69 => Op::ReadEvents(
            session,
            ReadEventsOptions::new({
                let limit = rng.below(4) as usize + 1;
                rng.usize_or_extreme(limit)
            })
            .after_index({
                let after = rng.below(5);
                rng.u64_or_extreme(after)
            })
            .through_index(rng.chance(50).then(|| {
                let through = rng.below(10);
                rng.u64_or_extreme(through)
            })),
        ),
        70..=71 => Op::Pending(PageRequest {
            cursor: rng.chance(50).then(|| rng.pick(&SESSIONS).to_string()),
            limit: {
                let limit = rng.below(3) as usize + 1;
                rng.usize_or_extreme(limit)
            },
        }),
        72..=73 => Op::List(
            ListSessionsOptions::new({
                let limit = rng.below(3) as usize + 1;
                rng.usize_or_extreme(limit)
            })
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
                    index: {
                        let index = rng.below(8);
                        rng.u64_or_extreme(index)
                    },
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
                    seen: {
                        let seen = rng.below(5) as i64;
                        rng.i64_or_extreme(seen)
                    },
                    at: {
                        let at = now + rng.below(1000) as i64 - 500;
                        rng.i64_or_extreme(at)
                    },
                    ttl_ms: {
                        let ttl = rng.below(3000) + 1;
                        rng.u64_or_extreme(ttl)
                    },
                },
            )
        }
        86..=87 => Op::PresenceRead(session),
        88 => Op::Clear(session),
        89..=91 => {
            let index = rng.below(8);
            Op::Revive(session, rng.u64_or_extreme(index))
        }
        92..=93 => {
            let through = rng.below(8);
            Op::Trim(session, rng.u64_or_extreme(through))
        }
        94 if rng.chance(50) => Op::Close(session),
        94 => {
            let at = rng.below(10);
            let at = rng.u64_or_extreme(at);
            Op::Fork(session, at, rng.pick(&SESSIONS).to_string())
        }
        95 if rng.chance(50) => Op::SetExpiry(session, expiry(rng, now)),
        95 => {
            let index = rng.below(8);
            let reason = match rng.below(4) {
                0 => None,
                1 => Some("x".repeat(1025)),
                2 => Some(String::new()),
                _ => Some("stop".to_owned()),
            };
            Op::Cancel(session, rng.u64_or_extreme(index), reason)
        }
        _ => Op::Advance(rng.below(1500) as i64 - if rng.chance(5) { 1600 } else { 0 }),
    }
}

/// Everything a store holds, as text: each session's counters and every
/// retained event with its processing record (I1, I2, TR5).
async fn everything(store: &dyn Store) -> String {
    let listed = store
        .list_sessions(ListSessionsOptions::new(100))
        .await
        .map_err(|e| e.code());
    let mut out = format!("{listed:?}\n");
    for session in SESSIONS {
        let first = listed
            .as_ref()
            .ok()
            .and_then(|l| l.sessions.iter().find(|s| s.session_id == session))
            .map_or(1, |s| s.first_index);
        let page = store
            .read_events(
                session,
                ReadEventsOptions::new(10_000).after_index(first - 1),
            )
            .await
            .map(|page| page.events)
            .map_err(|e| e.code());
        out.push_str(&format!("{session}: {page:?}\n"));
    }
    out
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
    run_seed_with(name, store, clock, seed, steps, DEFAULT_EXTREMES).await;
}

/// How often, in percent, [`run_seed`] replaces an integer argument by an
/// extreme of its type.
pub const DEFAULT_EXTREMES: u64 = 10;

/// As [`run_seed`], with `extremes` percent of the integer arguments (an
/// index, attempt, limit, ttl, time or count) replaced by an extreme of
/// their type: 0, 1, `u32::MAX`, `u64::MAX`, `i64::MIN`, `i64::MAX`, …
/// (X1, X2): every store must answer them exactly as the memory store does.
pub async fn run_seed_with(
    name: &str,
    store: &dyn Store,
    clock: Arc<ManualClock>,
    seed: u64,
    steps: usize,
    extremes: u64,
) {
    let memory = MemoryStore::new(options(clock.clone()));
    let mut memory_feed = memory.stream("a", 0);
    let mut other_feed = store.stream("a", 0);
    let mut rng = Rng::new(seed, extremes);
    // `A2_DIFF_TRACE=SEED` prints every step of that seed.
    let trace = std::env::var("A2_DIFF_TRACE").is_ok_and(|t| t == seed.to_string());
    let mut ids = Vec::new();
    let mut cleared_a = false;
    for step in 0..steps {
        let op = generate(&mut rng, clock.now_ms(), &mut ids);
        if let Op::Advance(delta) = op {
            // The clock moves back too, expiring sessions or not: a store
            // instance never reads time backward (EX3), so a session found
            // expired stays gone on every store, whether it freed its
            // storage yet or not.
            clock.advance(delta);
            continue;
        }
        // A feed of a cleared or trimmed session may end early (ST6,
        // TR3), as far as it read ahead: its end is not compared.
        if matches!(&op, Op::Clear(s) | Op::Trim(s, _) | Op::AppendWith(s, _, _, _, _)
            | Op::SetExpiry(s, _) | Op::Fork(_, _, s) if s == "a")
        {
            cleared_a = true;
        }
        let expected = apply(&memory, &op).await;
        let actual = apply(store, &op).await;
        if trace {
            eprintln!("seed {seed}, step {step}: {op:?}\n  -> {expected}");
            // Each step's writes, compared at once: a write that differs
            // while both answer alike shows at the step that made it.
            let (m, o) = (everything(&memory).await, everything(store).await);
            assert_eq!(
                o, m,
                "seed {seed}, step {step}: the stored state differs after {op:?}"
            );
        }
        assert_eq!(
            actual, expected,
            "seed {seed}, step {step}: {op:?}\n{name}:  {actual}\nmemory: {expected}"
        );
    }
    // What both stores hold at the end: every event with its record,
    // every session's counters.
    let (m, o) = (everything(&memory).await, everything(store).await);
    assert_eq!(
        o, m,
        "seed {seed}: the stored state differs at the end ({name} left, memory right)"
    );
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
