//! The a2 runtime. (Being written.)
#![deny(missing_docs)]
