//! The same random operation sequences, with a manual clock and sequential
//! ids, applied to the memory store and the SQLite store give identical
//! observable results: rows, outcomes, error codes and feeds
//! (`a2_conformance::differential`).

use std::sync::Arc;

use a2_conformance::{START_MS, differential};
use a2_core::ManualClock;
use a2_sqlite::{SqliteOptions, SqliteStore};

/// `A2_DIFF_SEEDS` and `A2_DIFF_STEPS` run more or longer sequences.
#[tokio::test]
async fn sqlite_matches_memory_on_random_sequences() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (seeds, steps) = differential::seeds_and_steps();
    for seed in 0..seeds {
        let clock = Arc::new(ManualClock::new(START_MS));
        let options = SqliteOptions::default().store(differential::options(clock.clone()));
        let store = SqliteStore::open(dir.path().join(format!("diff-{seed}.db")), options)
            .expect("open the store");
        differential::run_seed("sqlite", &store, clock, seed, steps).await;
    }
}
