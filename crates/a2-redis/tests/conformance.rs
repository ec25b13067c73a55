//! The conformance suite against the Redis store (RD6): every case of
//! `a2_conformance` as `redis::<case>`, plus `redis::model_based_property`,
//! on a `redis-server` this test binary starts itself. Each case works under
//! its own key prefix; its peer is a second store instance on the same
//! server and prefix, as another process would open it.

use std::sync::Arc;

use a2_conformance::{Capabilities, Stores};
use a2_core::StoreOptions;
use a2_redis::testing;
use a2_redis::{RedisOptions, RedisStore};

async fn setup(options: StoreOptions) -> Stores {
    let server = testing::shared();
    let options = RedisOptions::default()
        .prefix(testing::unique_prefix("conformance"))
        .store(options);
    let store = RedisStore::connect(&server.url(), options.clone())
        .await
        .expect("connect to the test server");
    let peer = RedisStore::connect(&server.url(), options)
        .await
        .expect("connect to the test server");
    let url = server.url();
    let store = Arc::new(store);
    let keys = store.clone();
    Stores::new(store, Arc::new(peer))
        .with_caps(
            Capabilities::default()
                .with_independent_peer(true)
                .with_pending_wakeups(true)
                .with_cancellations(true),
        )
        .with_damage(move |session, index| {
            let (url, log) = (url.clone(), keys.session_keys(&session).log);
            async move { testing::delete_log_entry(&url, &log, index).await }
        })
}

// The same cases and the same 256 property sequences as every other store;
// tests/differential.rs adds random sequences checked against the memory
// store.
mod redis {
    a2_conformance::conformance!(super::setup);
}
