//! The one error type of a2, with stable codes (SPEC §1).

use std::sync::Arc;

/// A boxed backend error kept as the cause of [`Error::StoreUnavailable`].
///
/// It is an `Arc` so that [`Error`] is `Clone`: a store that ends many live
/// feeds at once hands each the same cause.
pub type BackendError = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Every failure an a2 store or the runtime reports.
///
/// Match on [`Error::code`] for a stable, exhaustive view; the enum itself is
/// `#[non_exhaustive]` so later versions may add detail without breaking you.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Some ids of a batch exist in the session and some do not, an id
    /// repeats within the batch, or a retry differs from the stored original
    /// (A3, A5, A6, CO4, CO6). Nothing was written.
    #[error("partial duplicate batch: {message}")]
    PartialDuplicateBatch {
        /// What was duplicated, for a person.
        message: String,
    },
    /// The attempt named by a write is no longer the current one (A7).
    /// Nothing was written.
    #[error("superseded attempt: {message}")]
    SupersededAttempt {
        /// Which attempt, for a person.
        message: String,
    },
    /// The backend is unreachable, timed out, closed, or returned data that
    /// breaks an invariant. The backend's error is kept as `source`.
    #[error("store unavailable: {message}")]
    StoreUnavailable {
        /// What failed, for a person.
        message: String,
        /// The backend's own error, when there is one.
        #[source]
        source: Option<BackendError>,
    },
    /// Bad input, including a reference to an index that does not exist.
    /// Nothing was written.
    #[error("invalid argument: {message}")]
    InvalidArgument {
        /// What was wrong, for a person.
        message: String,
    },
}

/// The stable code of an [`Error`], one per SPEC error kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ErrorCode {
    /// See [`Error::PartialDuplicateBatch`].
    PartialDuplicateBatch,
    /// See [`Error::SupersededAttempt`].
    SupersededAttempt,
    /// See [`Error::StoreUnavailable`].
    StoreUnavailable,
    /// See [`Error::InvalidArgument`].
    InvalidArgument,
}

impl Error {
    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::PartialDuplicateBatch { .. } => ErrorCode::PartialDuplicateBatch,
            Error::SupersededAttempt { .. } => ErrorCode::SupersededAttempt,
            Error::StoreUnavailable { .. } => ErrorCode::StoreUnavailable,
            Error::InvalidArgument { .. } => ErrorCode::InvalidArgument,
        }
    }

    /// An [`Error::InvalidArgument`] with this message.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            message: message.into(),
        }
    }

    /// An [`Error::PartialDuplicateBatch`] with this message.
    pub fn duplicate(message: impl Into<String>) -> Self {
        Error::PartialDuplicateBatch {
            message: message.into(),
        }
    }

    /// An [`Error::SupersededAttempt`] with this message.
    pub fn superseded(message: impl Into<String>) -> Self {
        Error::SupersededAttempt {
            message: message.into(),
        }
    }

    /// An [`Error::StoreUnavailable`] without a backend cause.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::StoreUnavailable {
            message: message.into(),
            source: None,
        }
    }

    /// An [`Error::StoreUnavailable`] keeping the backend's error as its cause.
    pub fn unavailable_from<E>(message: impl Into<String>, source: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Error::StoreUnavailable {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }
}

/// `Result` with a2's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
