//! The one error type of every dlock call.

use std::error::Error as StdError;

/// A boxed error from a backend's client library, kept as the `source` of a [`LockError`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Why a lock call failed.
///
/// Contention is never an error: `try_*` calls return `Ok(None)` when another owner holds the
/// lock. An error means the call could not do what it was asked, and says why.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The calling thread does not hold this lock, so it cannot release it.
    #[error("lock {name:?} is not held by the current thread")]
    NotHeld {
        /// The lock's name.
        name: String,
    },
    /// The lease was lost while the lock was held: it expired before it was renewed, the lock
    /// was force-unlocked, or the server lost it. Whatever the guard protected may have been
    /// entered by another owner since.
    #[error(
        "the lease on lock {name:?} was lost (expired, force-unlocked or dropped by the server)"
    )]
    LeaseLost {
        /// The lock's name.
        name: String,
    },
    /// An argument was rejected before anything was sent to the backend.
    #[error("invalid argument `{argument}`: {reason}")]
    InvalidArgument {
        /// Which argument was wrong (`name`, `lease`, `wait`, ...).
        argument: &'static str,
        /// What was wrong with it.
        reason: String,
    },
    /// The backend could not be reached or did not answer in time.
    #[error("lock backend unavailable: {message}")]
    Unavailable {
        /// What failed, in words.
        message: String,
        /// The client library's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// The backend answered, but not as the protocol expects (a script error, a refused
    /// command, an unexpected reply type, missing permissions).
    #[error("lock backend protocol error: {message}")]
    Protocol {
        /// What the backend said or what was unexpected.
        message: String,
        /// The client library's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// The client or backend configuration is not usable (bad URL, bad option values).
    #[error("configuration error: {message}")]
    Config {
        /// What is wrong with the configuration.
        message: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
}

impl LockError {
    /// An [`InvalidArgument`](LockError::InvalidArgument) error.
    pub fn invalid(argument: &'static str, reason: impl Into<String>) -> Self {
        LockError::InvalidArgument {
            argument,
            reason: reason.into(),
        }
    }

    /// An [`Unavailable`](LockError::Unavailable) error with its cause.
    pub fn unavailable(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        LockError::Unavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A [`Protocol`](LockError::Protocol) error without an underlying cause.
    pub fn protocol(message: impl Into<String>) -> Self {
        LockError::Protocol {
            message: message.into(),
            source: None,
        }
    }

    /// A [`Config`](LockError::Config) error without an underlying cause.
    pub fn config(message: impl Into<String>) -> Self {
        LockError::Config {
            message: message.into(),
            source: None,
        }
    }

    /// True for errors that mean the lock is no longer (or never was) held by the caller.
    pub fn is_not_held(&self) -> bool {
        matches!(
            self,
            LockError::NotHeld { .. } | LockError::LeaseLost { .. }
        )
    }

    /// True when the backend could not be reached: the call may succeed if retried later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, LockError::Unavailable { .. })
    }
}
