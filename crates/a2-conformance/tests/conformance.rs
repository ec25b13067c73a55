//! The conformance suite against the in-memory store: every case of
//! `a2_conformance` as `memory::<case>`, plus `memory::model_based_property`.

use std::sync::Arc;

use a2_conformance::Stores;
use a2_core::{MemoryStore, StoreOptions};

/// A fresh memory store; its peer is the store itself (one process).
async fn setup(options: StoreOptions) -> Stores {
    let store = Arc::new(MemoryStore::new(options));
    let damaged = store.clone();
    Stores::new(store.clone(), store)
        .with_caps(
            a2_conformance::Capabilities::default()
                .with_pending_wakeups(true)
                .with_cancellations(true),
        )
        .with_damage(move |session, index| {
            assert!(
                damaged.damage(&session, index),
                "no event {index} to damage"
            );
            std::future::ready(())
        })
}

mod memory {
    a2_conformance::conformance!(super::setup);
}
