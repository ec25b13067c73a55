//! The same random operation sequences, with a manual clock and sequential
//! ids, applied to the memory store and the Postgres store give identical
//! observable results: rows, outcomes, error codes and feeds
//! (`a2_conformance::differential`). Each seed runs in a schema of its own
//! on the shared test server.

use std::sync::Arc;

use a2_conformance::{START_MS, differential};
use a2_core::ManualClock;
use a2_postgres::testing::shared;
use a2_postgres::{PostgresOptions, PostgresStore};

/// `A2_DIFF_SEEDS` and `A2_DIFF_STEPS` run more or longer sequences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_matches_memory_on_random_sequences() {
    let (seeds, steps) = differential::seeds_and_steps();
    for seed in 0..seeds {
        let clock = Arc::new(ManualClock::new(START_MS));
        let url = format!(
            "{}&a2_schema=diff_{}_{seed}",
            shared().url(),
            std::process::id()
        );
        let options = differential::options(clock.clone());
        let store = PostgresStore::connect(&url, PostgresOptions::default(), options)
            .await
            .expect("connect the store");
        differential::run_seed("postgres", &store, clock, seed, steps).await;
    }
}
