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
    /// The backend is unreachable, timed out or dropped the connection: the
    /// same call may succeed when tried again (RD8 says which calls a store
    /// already sent twice). The backend's error is kept as `source`.
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
        /// The event whose state makes the input invalid, when one does:
        /// the first unsettled event in a trim's range (TR2), so a caller
        /// can trim up to it.
        index: Option<u64>,
    },
    /// The stored data breaks an invariant: a log with a missing entry, a
    /// record that does not decode (SPEC E1). Unlike
    /// [`Error::StoreUnavailable`], retrying cannot help: stop and alert.
    #[error("corrupted data: {message}")]
    Corrupted {
        /// What is broken, for a person.
        message: String,
        /// The session whose data is broken, when known.
        session: Option<String>,
        /// The first index found missing or broken, when known.
        index: Option<u64>,
    },
    /// This store instance was closed (`Store::close`): nothing more can be
    /// done through it, however often it is asked. Open a new one.
    #[error("store closed: {message}")]
    StoreClosed {
        /// Which store, for a person.
        message: String,
    },
    /// A live feed's session was cleared while the feed was open (ST6): the
    /// log it was following is gone. The feed ends; open a new one from
    /// index 0 to follow the session's new log.
    #[error("session {session:?} was cleared while its feed was open")]
    SessionCleared {
        /// The cleared session.
        session: String,
    },
    /// A live feed's session expired while the feed was open (EX4): the log
    /// it was following is gone. The feed ends; open a new one from index 0
    /// to follow a new session of that id.
    #[error("session {session:?} expired while its feed was open")]
    SessionExpired {
        /// The expired session.
        session: String,
    },
    /// The session was closed (CL1): its log is final, so this write, which
    /// would have added events to it, was refused and nothing was written
    /// (CL2, CL3). Do not retry; a closed session stays closed until it is
    /// cleared.
    #[error("session {session:?} is closed: its log is final")]
    SessionClosed {
        /// The closed session.
        session: String,
    },
    /// A fork's target already exists and is not that fork (FK3): nothing
    /// was written. Pick another name, or clear the target first.
    #[error("session {session:?} already exists: {message}")]
    SessionExists {
        /// The existing session.
        session: String,
        /// What it is, for a person.
        message: String,
    },
    /// The events this call needs were trimmed away (TR3): the session
    /// keeps only the events from `first_index` on. Read from there (or
    /// from a snapshot at or after it).
    #[error("session {session:?} was trimmed: its first retained index is {first_index}")]
    Trimmed {
        /// The trimmed session.
        session: String,
        /// The first event still stored.
        first_index: u64,
    },
    /// An append that named the frontier it expected (A13) found another:
    /// a write came first. Nothing was written. Read what came after
    /// `expected`, decide again, and append with the new frontier.
    #[error("session {session:?} is at index {frontier}, not {expected} as the append expected")]
    FrontierMoved {
        /// The session.
        session: String,
        /// The frontier the append expected.
        expected: u64,
        /// The session's frontier when the append was refused (0: no events).
        frontier: u64,
    },
    /// A value of the application (a payload, a reducer's state) does not
    /// serialize to JSON or does not decode from it (RT8). Nothing was
    /// written; the input is fine, the types in the program disagree with it.
    #[error("serialization: {message}")]
    Serialization {
        /// What did not (de)serialize, for a person.
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
    /// See [`Error::Corrupted`]: never retry.
    Corrupted,
    /// See [`Error::StoreClosed`].
    StoreClosed,
    /// See [`Error::SessionCleared`].
    SessionCleared,
    /// See [`Error::SessionExpired`].
    SessionExpired,
    /// See [`Error::SessionClosed`].
    SessionClosed,
    /// See [`Error::SessionExists`].
    SessionExists,
    /// See [`Error::Trimmed`].
    Trimmed,
    /// See [`Error::FrontierMoved`].
    FrontierMoved,
    /// See [`Error::Serialization`].
    Serialization,
}

impl ErrorCode {
    /// Every code, in the order of the table in `docs/spec.md` (§1).
    pub const ALL: [ErrorCode; 13] = [
        ErrorCode::PartialDuplicateBatch,
        ErrorCode::SupersededAttempt,
        ErrorCode::StoreUnavailable,
        ErrorCode::InvalidArgument,
        ErrorCode::Corrupted,
        ErrorCode::StoreClosed,
        ErrorCode::SessionCleared,
        ErrorCode::SessionClosed,
        ErrorCode::Trimmed,
        ErrorCode::SessionExpired,
        ErrorCode::SessionExists,
        ErrorCode::FrontierMoved,
        ErrorCode::Serialization,
    ];

    /// Whether the same call may succeed when tried again unchanged: only
    /// for [`ErrorCode::StoreUnavailable`]. A [`ErrorCode::Corrupted`] store
    /// stays corrupted and a [`ErrorCode::StoreClosed`] one closed however
    /// often it is asked; the others need other input.
    pub fn is_retryable(self) -> bool {
        self == ErrorCode::StoreUnavailable
    }

    /// The code's name, as `docs/spec.md` and the HTTP API spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::PartialDuplicateBatch => "PartialDuplicateBatch",
            ErrorCode::SupersededAttempt => "SupersededAttempt",
            ErrorCode::StoreUnavailable => "StoreUnavailable",
            ErrorCode::InvalidArgument => "InvalidArgument",
            ErrorCode::Corrupted => "Corrupted",
            ErrorCode::StoreClosed => "StoreClosed",
            ErrorCode::SessionCleared => "SessionCleared",
            ErrorCode::SessionClosed => "SessionClosed",
            ErrorCode::SessionExpired => "SessionExpired",
            ErrorCode::Trimmed => "Trimmed",
            ErrorCode::SessionExists => "SessionExists",
            ErrorCode::FrontierMoved => "FrontierMoved",
            ErrorCode::Serialization => "Serialization",
        }
    }
}

impl Error {
    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::PartialDuplicateBatch { .. } => ErrorCode::PartialDuplicateBatch,
            Error::SupersededAttempt { .. } => ErrorCode::SupersededAttempt,
            Error::StoreUnavailable { .. } => ErrorCode::StoreUnavailable,
            Error::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            Error::Corrupted { .. } => ErrorCode::Corrupted,
            Error::StoreClosed { .. } => ErrorCode::StoreClosed,
            Error::SessionCleared { .. } => ErrorCode::SessionCleared,
            Error::SessionClosed { .. } => ErrorCode::SessionClosed,
            Error::SessionExpired { .. } => ErrorCode::SessionExpired,
            Error::Trimmed { .. } => ErrorCode::Trimmed,
            Error::SessionExists { .. } => ErrorCode::SessionExists,
            Error::FrontierMoved { .. } => ErrorCode::FrontierMoved,
            Error::Serialization { .. } => ErrorCode::Serialization,
        }
    }

    /// Whether the same call may succeed when tried again unchanged
    /// ([`ErrorCode::is_retryable`]).
    pub fn is_retryable(&self) -> bool {
        self.code().is_retryable()
    }

    /// The backend's own error behind an [`Error::StoreUnavailable`], to
    /// inspect with `downcast_ref` (the `Arc` that keeps it hides its type
    /// from [`std::error::Error::source`]).
    pub fn backend(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            Error::StoreUnavailable { source, .. } => source.as_deref(),
            _ => None,
        }
    }

    /// An [`Error::StoreClosed`] with this message.
    pub fn closed(message: impl Into<String>) -> Self {
        Error::StoreClosed {
            message: message.into(),
        }
    }

    /// An [`Error::InvalidArgument`] with this message.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            message: message.into(),
            index: None,
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

    /// An [`Error::Corrupted`] about `session`, naming the first broken
    /// `index` when known.
    pub fn corrupted(
        message: impl Into<String>,
        session: Option<&str>,
        index: Option<u64>,
    ) -> Self {
        Error::Corrupted {
            message: message.into(),
            session: session.map(str::to_owned),
            index,
        }
    }

    /// An [`Error::SessionExpired`] about `session` (EX4).
    pub fn session_expired(session: &str) -> Self {
        Error::SessionExpired {
            session: session.to_owned(),
        }
    }

    /// An [`Error::SessionClosed`] about `session` (CL2).
    pub fn session_closed(session: &str) -> Self {
        Error::SessionClosed {
            session: session.to_owned(),
        }
    }

    /// An [`Error::Trimmed`]: `session` keeps its events from
    /// `first_index` on (TR3).
    pub fn trimmed(session: &str, first_index: u64) -> Self {
        Error::Trimmed {
            session: session.to_owned(),
            first_index,
        }
    }

    /// An [`Error::SessionExists`]: `session` exists and is not the fork
    /// asked for (FK3).
    pub fn session_exists(session: &str, message: impl Into<String>) -> Self {
        Error::SessionExists {
            session: session.to_owned(),
            message: message.into(),
        }
    }

    /// An [`Error::Serialization`] with this message.
    pub fn serialization(message: impl Into<String>) -> Self {
        Error::Serialization {
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
