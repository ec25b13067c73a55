//! Instructions `redis-server` spends per store operation, phase by phase:
//! appends alone and from 64 tasks (batched), claims of 3 and of 100
//! events, completions alone and from 64 tasks, and the runtime's work
//! cycle (64 tasks each appending an event that it claims, then completing
//! it), a backlog drained one claimed event at a time, as the runtime
//! drains sessions whose appends ran ahead, and retention's trims of 64
//! events and of one. Instruction counts do not depend on how busy the
//! machine is, so they show what a change of the scripts saves where
//! timings cannot.
//!
//! It needs a `redis-server` run under callgrind, collecting only inside
//! scripts, and dumps a profile after each phase with `callgrind_control`:
//!
//! ```sh
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!   --toggle-collect=luaCallFunction redis-server --port 6399 --save '' &
//! SCRIPT_COST_URL=redis://127.0.0.1:6399 SCRIPT_COST_PID=$! \
//!   cargo run --release -p a2-redis --example script_cost
//! grep -H '^summary:\|^totals:' /tmp/cg.out.*   # one file per phase
//! ```
//!
//! Each file's total divided by the phase's operations (printed at the
//! end) is the cost of one operation; a commit that changes a script
//! quotes them.
//!
//! Whether an operation costs more instructions on a store that holds more
//! data: `SCRIPT_COST_FILL=N` appends `N` settled events (in calls of
//! 1 000) to the sessions of the work cycle's first phase and exits
//! without profiling; `SCRIPT_COST_PREFIX` names the store's prefix
//! (default `cost{pid}`), so that a later run finds them:
//!
//! ```sh
//! redis-server --port 6398 --dir /tmp --dbfilename filled.rdb --save '' &
//! SCRIPT_COST_URL=redis://127.0.0.1:6398 SCRIPT_COST_PREFIX=filled \
//!   SCRIPT_COST_FILL=1000000 cargo run --release -p a2-redis --example script_cost
//! redis-cli -p 6398 save && redis-cli -p 6398 shutdown
//! valgrind --tool=callgrind … redis-server --port 6399 --dir /tmp \
//!   --dbfilename filled.rdb --save '' &
//! SCRIPT_COST_PREFIX=filled SCRIPT_COST_URL=… SCRIPT_COST_PID=… \
//!   cargo run --release -p a2-redis --example script_cost
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use a2_core::*;
use a2_redis::{RedisOptions, RedisStore};
use serde_json::json;

/// Asks callgrind to write the profile of the phase that just ended.
fn dump(label: &str) {
    let pid = std::env::var("SCRIPT_COST_PID").expect("SCRIPT_COST_PID: the server's pid");
    let status = std::process::Command::new("callgrind_control")
        .args([&format!("--dump={label}"), &pid])
        .output()
        .expect("callgrind_control runs");
    assert!(
        status.status.success(),
        "callgrind_control failed: {status:?}"
    );
}

#[tokio::main]
async fn main() -> Result<()> {
    let url = std::env::var("SCRIPT_COST_URL").expect("SCRIPT_COST_URL: the server");
    let prefix = std::env::var("SCRIPT_COST_PREFIX")
        .unwrap_or_else(|_| format!("cost{}", std::process::id()));
    let store = Arc::new(RedisStore::connect(&url, RedisOptions::default().prefix(prefix)).await?);
    let sessions = 100;
    let per = 20;
    let n = sessions * per;
    if let Ok(fill) = std::env::var("SCRIPT_COST_FILL") {
        let fill: usize = fill.parse().expect("SCRIPT_COST_FILL: a number of events");
        return fill_cycle_sessions(&store, fill, sessions).await;
    }
    dump("setup");
    for k in 0..n {
        store
            .append(
                &format!("s{}", k % sessions),
                vec![NewEvent::new("e", json!({ "k": k, "text": "hello world" }))],
            )
            .await?;
    }
    dump("append_seq");
    let mut rows_all = Vec::new();
    for s in 0..sessions {
        loop {
            let outcome = store
                .claim_available(ClaimRequest {
                    session: format!("s{s}"),
                    holder: "w".into(),
                    lease: Lease::Ttl(60_000),
                    exclude_indexes: vec![],
                    limit: 3,
                })
                .await?;
            let ClaimOutcome::Claimed { events: rows, .. } = outcome else {
                break;
            };
            for row in rows {
                rows_all.push((format!("s{s}"), row.event.index, row.attempt_count));
            }
        }
    }
    dump("claim3");
    for (s, index, attempt) in &rows_all[..n / 2] {
        store
            .complete_attempt(CompleteRequest::new(s.clone(), *index, *attempt))
            .await?;
    }
    dump("complete_seq");
    let mut tasks = Vec::new();
    for chunk in rows_all[n / 2..].chunks(n / 2 / 64 + 1) {
        let store = store.clone();
        let chunk = chunk.to_vec();
        tasks.push(tokio::spawn(async move {
            for (s, index, attempt) in chunk {
                store
                    .complete_attempt(CompleteRequest::new(s, index, attempt))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    dump("complete_par64");
    let mut tasks = Vec::new();
    for t in 0..64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for k in 0..(n / 64) {
                store
                    .append(
                        &format!("s{}", (t * 7 + k) % sessions),
                        vec![NewEvent::new("e", json!({ "k": k, "text": "hello world" }))],
                    )
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    dump("append_par64");
    for s in 0..sessions {
        store
            .claim_available(ClaimRequest {
                session: format!("s{s}"),
                holder: "w".into(),
                lease: Lease::Ttl(60_000),
                exclude_indexes: vec![],
                limit: 100,
            })
            .await?;
    }
    dump("claim100");
    // The runtime's work cycle: each task appends one event claiming it
    // (AC2), then completes it; a processed event costs both. Over 100
    // sessions a batch seldom holds two operations of one session; over 8
    // it often does, as the runtime's cycle does (a session's operations
    // then share their reads, writes and wake-ups).
    cycle(&store, n, sessions, "c").await;
    dump("cycle64");
    cycle(&store, n, 8, "g").await;
    dump("cycle64_grouped");
    drain(&store, n, sessions, "d").await;
    dump("drain64");
    // Retention's trims (RT16) of sessions the work cycle processed, whose
    // records are the runtime's: 64 events a call, then one, so that the
    // cost of a call splits into what it costs whatever it removes and
    // what each event adds.
    cycle(&store, sessions * 128, sessions, "t").await;
    dump("trim_setup");
    for s in 0..sessions {
        store.trim(&format!("t{s}"), 64).await?;
    }
    dump("trim64");
    for through in 65..=84 {
        for s in 0..sessions {
            store.trim(&format!("t{s}"), through).await?;
        }
    }
    dump("trim1");
    println!(
        "operations per phase: append_seq {n}, claim3 {n} events, complete_seq {}, \
         complete_par64 {}, append_par64 {n}, claim100 {n} events, cycle64 {} events, \
         cycle64_grouped {} events, drain64 {} events, trim64 {} calls of 64 events, \
         trim1 {} calls of 1 event",
        n / 2,
        n / 2,
        n / 64 * 64,
        n / 64 * 64,
        n / 64 * 64,
        sessions,
        sessions * 20
    );
    Ok(())
}

/// Appends `events` settled events to the sessions the first work cycle
/// phase runs on (`c0` …), round-robin in calls of 1 000, from 16 tasks.
async fn fill_cycle_sessions(
    store: &Arc<RedisStore>,
    events: usize,
    sessions: usize,
) -> Result<()> {
    const CALL: usize = 1_000;
    const TASKS: usize = 16;
    let calls = events.div_ceil(CALL);
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            // Task t makes calls t, t + TASKS, …; call c goes to session
            // c mod sessions.
            for call in (t..calls).step_by(TASKS) {
                let len = CALL.min(events - call * CALL);
                let batch = (0..len)
                    .map(|k| {
                        let mut e = NewEvent::new("stored", json!({ "n": call * CALL + k }));
                        e.settled = true;
                        e
                    })
                    .collect();
                store
                    .append(&format!("c{}", call % sessions), batch)
                    .await?;
            }
            Ok::<_, Error>(())
        }));
    }
    for t in tasks {
        t.await.expect("a fill task panicked")?;
    }
    println!(
        "filled: {events} settled events over sessions c0..c{}",
        sessions - 1
    );
    Ok(())
}

/// What one task does for its `k`-th event, on `session`.
type Step = fn(Arc<RedisStore>, String, usize) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// 64 tasks, each running `step` for `n / 64` events over `sessions`
/// sessions (`{tag}{s}`): task t's k-th on session (7t + k) mod sessions.
async fn from_64_tasks(
    store: &Arc<RedisStore>,
    n: usize,
    sessions: usize,
    tag: &'static str,
    step: Step,
) {
    let mut tasks = Vec::new();
    for t in 0..64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for k in 0..(n / 64) {
                step(store.clone(), format!("{tag}{}", (t * 7 + k) % sessions), k).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// 64 tasks, each appending `n / 64` events over `sessions` sessions,
/// claiming each at its append and completing it.
async fn cycle(store: &Arc<RedisStore>, n: usize, sessions: usize, tag: &'static str) {
    from_64_tasks(store, n, sessions, tag, |store, session, k| {
        Box::pin(async move {
            let outcome = store
                .append_and_claim(
                    &session,
                    vec![NewEvent::new("e", json!({ "k": k, "text": "hello world" }))],
                    AppendClaim::new("w", Lease::Ttl(60_000), 1),
                )
                .await
                .unwrap();
            complete_all(&store, &session, outcome.claimed_rows()).await;
        })
    })
    .await;
}

/// Completes each claimed row of `session`, returning no events.
async fn complete_all<'a>(
    store: &RedisStore,
    session: &str,
    rows: impl IntoIterator<Item = &'a StoredEvent>,
) {
    for row in rows {
        store
            .complete_attempt(CompleteRequest::new(
                session,
                row.event.index,
                row.attempt_count,
            ))
            .await
            .unwrap();
    }
}

/// A backlog drained as the runtime drains it when appends ran ahead: `n`
/// events appended unclaimed over `sessions` sessions, then 64 tasks each
/// claiming one event of a session at a time and completing it. Only the
/// draining is measured (the appends go before the phase's start).
async fn drain(store: &Arc<RedisStore>, n: usize, sessions: usize, tag: &'static str) {
    for k in 0..n {
        store
            .append(
                &format!("{tag}{}", k % sessions),
                vec![NewEvent::new("e", json!({ "k": k, "text": "hello world" }))],
            )
            .await
            .unwrap();
    }
    dump("drain64_setup");
    from_64_tasks(store, n, sessions, tag, |store, session, _| {
        Box::pin(async move {
            let outcome = store
                .claim_available(ClaimRequest {
                    session: session.clone(),
                    holder: "w".into(),
                    lease: Lease::Ttl(60_000),
                    exclude_indexes: vec![],
                    limit: 1,
                })
                .await
                .unwrap();
            if let ClaimOutcome::Claimed { events: rows, .. } = outcome {
                complete_all(&store, &session, &rows).await;
            }
        })
    })
    .await;
}
