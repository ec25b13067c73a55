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
        .with_caps(Capabilities::default().with_independent_peer(true))
}

mod sqlite {
    a2_conformance::conformance!(super::setup);
}
