//! The conformance suite against the SQLite store: every case of
//! `a2_conformance` as `sqlite::<case>`, plus `sqlite::model_based_property`.
//! Each case opens its own database file in a temporary directory; its peer
//! is a second store instance on the same file, as another process would
//! open it.

use std::sync::Arc;

use a2_conformance::{Capabilities, Stores};
use a2_core::StoreOptions;
use a2_sqlite::{SqliteOptions, SqliteStore};

async fn setup(options: StoreOptions) -> Stores {
    // The directory is kept: the stores live until the case's runtime
    // ends, after this function returns. It sits under cargo's target/tmp,
    // which `cargo clean` empties.
    let dir = tempfile::Builder::new()
        .prefix("conformance")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory")
        .keep();
    let path = dir.join("a2.db");
    let options = SqliteOptions::default().store(options);
    let store = SqliteStore::open(&path, options.clone()).expect("open the store");
    let peer = SqliteStore::open(&path, options).expect("open the peer");
    Stores::new(Arc::new(store), Arc::new(peer))
        .with_caps(
            Capabilities::default()
                .with_independent_peer(true)
                .with_cancellations(true)
                .with_pending_wakeups(true),
        )
        .with_damage(move |session, index| {
            let path = path.clone();
            async move { delete_row(&path, &session, index) }
        })
}

/// E1's damage: deletes the row of `index` in `session` behind the store's
/// back, as a hand-made `DELETE` would (docs/sqlite-layout.md).
fn delete_row(path: &std::path::Path, session: &str, index: u64) {
    let conn = rusqlite::Connection::open(path).expect("open the file");
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .expect("set a busy timeout");
    let deleted = conn
        .execute(
            "DELETE FROM events WHERE idx = ?2 AND sid = (SELECT sid FROM sessions WHERE name = ?1)",
            rusqlite::params![session, i64::try_from(index).expect("an index SQLite can hold")],
        )
        .expect("delete the row");
    assert_eq!(deleted, 1, "no event {index} of {session:?} to delete");
}

mod sqlite {
    a2_conformance::conformance!(super::setup);
}
