//! Opening stores on the test binary's shared server.

#![allow(dead_code)]

use std::sync::Arc;

use a2_core::{ManualClock, SequentialIds, StoreOptions};
use a2_redis::testing::{self, RedisServer};
use a2_redis::{RedisOptions, RedisStore};

/// The clock's starting time in these tests.
pub const START_MS: i64 = 1_700_000_000_000;

/// Options with a manual clock, sequential ids and a fresh prefix.
pub fn options(label: &str, clock: Arc<ManualClock>) -> RedisOptions {
    RedisOptions::default()
        .prefix(testing::unique_prefix(label))
        .store(
            StoreOptions::default()
                .with_clock(clock)
                .with_ids(Arc::new(SequentialIds::new("e"))),
        )
}

/// A store on `server` with these options.
pub async fn open(server: &RedisServer, options: RedisOptions) -> RedisStore {
    RedisStore::connect(&server.url(), options)
        .await
        .expect("connect to the test server")
}

/// A plain connection to the server for inspecting and disturbing it.
pub async fn admin(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// `CLIENT KILL TYPE pubsub`: cuts every push connection on the server, as a
/// network fault would. Returns how many were cut.
pub async fn kill_push_connections(admin: &mut redis::aio::MultiplexedConnection) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(admin)
        .await
        .unwrap()
}
