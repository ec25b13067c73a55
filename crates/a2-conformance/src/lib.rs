//! The a2 contract as tests. (Being written.)
#![deny(missing_docs)]
