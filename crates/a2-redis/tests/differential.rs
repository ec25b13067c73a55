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

/// The same sequences over REST (the gateway of `testing::gateway`, live
/// feeds over event streams): one HTTP request per call, so fewer seeds by
/// default (`A2_DIFF_REST_SEEDS`).
#[cfg(feature = "rest")]
#[tokio::test]
async fn rest_matches_memory_on_random_sequences() {
    let seeds: u64 = std::env::var("A2_DIFF_REST_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let (_, steps) = differential::seeds_and_steps();
    for seed in 1000..1000 + seeds {
        let clock = Arc::new(ManualClock::new(common::START_MS));
        let options = common::options(&format!("diff-rest-{seed}"), clock.clone());
        let rest = a2_redis::RedisStore::connect(&testing::gateway::shared().url(), options)
            .await
            .expect("connect to the gateway");
        differential::run_seed("rest", &rest, clock, seed, steps).await;
    }
}
