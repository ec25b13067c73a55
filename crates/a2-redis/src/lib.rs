//! The Redis store of a2. (Being written.)
#![deny(missing_docs)]
