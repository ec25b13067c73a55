//! The same random operation sequences, with a manual clock and sequential
//! ids, applied to the memory store and the Redis store give identical
//! observable results: rows, outcomes, error codes and feeds. The engine is
//! `a2_conformance::differential`, shared by every store.

mod common;

use std::sync::Arc;

use a2_conformance::differential;
use a2_core::ManualClock;
use a2_redis::testing;

/// `A2_DIFF_SEEDS` and `A2_DIFF_STEPS` run more or longer sequences.
#[tokio::test]
async fn redis_matches_memory_on_random_sequences() {
    let (seeds, steps) = differential::seeds_and_steps();
    for seed in 0..seeds {
        let clock = Arc::new(ManualClock::new(common::START_MS));
        let redis = common::open(
            testing::shared(),
            common::options(&format!("diff-{seed}"), clock.clone()),
        )
        .await;
        differential::run_seed("redis", &redis, clock, seed, steps).await;
    }
}
