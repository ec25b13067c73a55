//! The conformance suite against the Postgres store: every case of
//! `a2_conformance` as `postgres::<case>`. Each case has a schema of its
//! own on the shared test server; its peer is a second store instance on
//! that schema, with its own pool and listener, as another process would
//! open it. The model-based property runs 64 cases here (256 elsewhere).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use a2_conformance::{Capabilities, Stores};
use a2_core::StoreOptions;
use a2_postgres::testing::shared;
use a2_postgres::{PostgresOptions, PostgresStore};

static CASES: AtomicU64 = AtomicU64::new(0);

async fn setup(options: StoreOptions) -> Stores {
    let schema = format!(
        "conformance_{}_{}",
        std::process::id(),
        CASES.fetch_add(1, Ordering::Relaxed)
    );
    let url = format!("{}&a2_schema={schema}", shared().url());
    let pool = PostgresOptions::default().pool_size(4);
    let store = PostgresStore::connect(&url, pool.clone(), options.clone())
        .await
        .expect("connect the store");
    let peer = PostgresStore::connect(&url, pool, options)
        .await
        .expect("connect the peer");
    Stores::new(Arc::new(store), Arc::new(peer))
        .with_caps(
            Capabilities::default()
                .with_independent_peer(true)
                .with_cancellations(true)
                .with_pending_wakeups(true),
        )
        .with_damage(move |session, index| {
            let schema = schema.clone();
            async move { delete_row(&schema, &session, index).await }
        })
}

/// E1's damage: deletes the row of `index` in `session` behind the store's
/// back, as a hand-made `DELETE` would (docs/postgres-layout.md).
async fn delete_row(schema: &str, session: &str, index: u64) {
    let (client, connection) = tokio_postgres::connect(&shared().url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let deleted = client
        .execute(
            &format!(
                "DELETE FROM \"{schema}\".events WHERE idx = $2
                 AND sid = (SELECT sid FROM \"{schema}\".sessions WHERE name = $1)"
            ),
            &[
                &session,
                &i64::try_from(index).expect("an index Postgres can hold"),
            ],
        )
        .await
        .expect("delete the row");
    assert_eq!(deleted, 1, "no event {index} of {session:?} to delete");
}

mod postgres {
    // Each property case sets up a schema and two stores with their pools
    // and listeners: 64 cases keep this file under a minute.
    a2_conformance::conformance!(super::setup, property_cases = 64);
}
