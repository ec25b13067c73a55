//! [`MemoryStore`]: the embedded, in-process store.

use crate::store::StoreOptions;

/// The in-memory store. (Being written.)
#[derive(Debug)]
pub struct MemoryStore {
    #[allow(dead_code)]
    options: StoreOptions,
}

impl MemoryStore {
    /// A store with these options.
    pub fn new(options: StoreOptions) -> Self {
        Self { options }
    }
}
