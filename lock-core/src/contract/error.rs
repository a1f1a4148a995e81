//! The one error type of every dlock call.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use crate::contract::kind::LockKind;
use crate::contract::loss::LossReason;

/// A boxed error from a backend's client library, kept as the `source` of a [`LockError`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Why a lock call failed.
///
/// Contention is never an error: `try_*` calls return `Ok(None)` when another owner holds the
/// lock. An error means the call could not do what it was asked, and says why. Errors about one
/// lock carry its name in a field of their own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The calling thread does not hold this lock, so it cannot release it.
    #[error("lock {name:?} is not held by the current thread")]
    NotHeld {
        /// The lock's name.
        name: String,
    },
    /// The lease was lost while the lock was held. Whatever the guard protected may have been
    /// entered by another owner since.
    #[error("the lease on lock {name:?} was lost: {reason}")]
    LeaseLost {
        /// The lock's name.
        name: String,
        /// How it was lost, as far as the client and the store can tell.
        reason: LossReason,
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
    #[error("lock backend unavailable{}: {message}", OnLock(.lock))]
    Unavailable {
        /// What failed, in words.
        message: String,
        /// The lock the call was about, if it was about one.
        lock: Option<String>,
        /// The client library's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// The backend answered, but not as the protocol expects (a script error, a refused
    /// command, an unexpected reply type, missing permissions).
    #[error("lock backend protocol error{}: {message}", OnLock(.lock))]
    Protocol {
        /// What the backend said or what was unexpected.
        message: String,
        /// The lock the call was about, if it was about one.
        lock: Option<String>,
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
    /// The operating system refused something the library needs (a thread).
    #[error("out of resources: {message}")]
    Resource {
        /// What could not be had.
        message: String,
        /// The system's error.
        #[source]
        source: Option<BoxError>,
    },
    /// The lock's name is in use on the store by a lock of another kind (a read-write lock
    /// asked for as a plain lock, say, or a key that is not a lock at all). Nothing was changed.
    #[error("lock {name:?} is not a {expected} on the store: it is {found}")]
    WrongKind {
        /// The lock's name.
        name: String,
        /// The kind asked for.
        expected: LockKind,
        /// What the store holds under that name, in words.
        found: String,
    },
    /// The call would wait forever for something the calling thread itself holds, such as
    /// the write lock asked for by a thread holding the read lock of the same name.
    #[error("lock {name:?}: {reason}")]
    WouldDeadlock {
        /// The lock's name.
        name: String,
        /// What the thread holds that stands in the way.
        reason: &'static str,
    },
    /// The store could not make a change durable on its replicas: none of the Redis master's
    /// replicas acknowledged it within the sync timeout, so a failover could lose it. An
    /// acquire is undone before this error is returned (nothing is held); a renewal counts as
    /// failed and is retried until the lease runs out.
    #[error(
        "none of the master's {replicas} replica(s) acknowledged the change{} within {timeout:?}; \
         a failover could lose it, so it was not counted as done (the replica sync timeout \
         and switch are backend settings)",
        OnLock(.lock)
    )]
    NotReplicated {
        /// The lock the change was about, when it was about one.
        lock: Option<String>,
        /// How many replicas the master had.
        replicas: u32,
        /// How long the backend waited for them.
        timeout: Duration,
    },
    /// A fenced write was refused where the data lives (see `dlocks::fence`): a write with a
    /// newer fencing token already reached `resource`, so the lease behind `token` ran out and
    /// another holder wrote since. Nothing was written; the caller's hold is over.
    #[error(
        "resource {resource:?}: fencing token {token} is stale, token {newest} already wrote \
         (the lease behind it ran out and another holder wrote since); nothing was written"
    )]
    StaleToken {
        /// What was to be written (a row's fence name, a key).
        resource: String,
        /// The token the write carried.
        token: u64,
        /// The newest token that has written to `resource`.
        newest: u64,
    },
    /// The backend does not keep this kind of lock.
    #[error("this backend does not support the {kind} (lock {name:?})")]
    Unsupported {
        /// The lock's name.
        name: String,
        /// The kind asked for.
        kind: LockKind,
    },
}

/// Formats ` on lock "name"` when an error names a lock.
struct OnLock<'a>(&'a Option<String>);

impl fmt::Display for OnLock<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(name) => write!(f, " on lock {name:?}"),
            None => Ok(()),
        }
    }
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
            lock: None,
            source: Some(source.into()),
        }
    }

    /// A [`Protocol`](LockError::Protocol) error without an underlying cause.
    pub fn protocol(message: impl Into<String>) -> Self {
        LockError::Protocol {
            message: message.into(),
            lock: None,
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

    /// A [`Resource`](LockError::Resource) error for a thread that could not be started.
    pub fn thread_spawn(what: &str, source: std::io::Error) -> Self {
        LockError::Resource {
            message: format!("could not start the {what} thread"),
            source: Some(Box::new(source)),
        }
    }

    /// The same error, naming `name` as the lock it is about (backend errors that were raised
    /// without knowing it).
    pub fn on_lock(self, name: &str) -> Self {
        match self {
            LockError::Unavailable {
                message,
                lock: None,
                source,
            } => LockError::Unavailable {
                message,
                lock: Some(name.to_owned()),
                source,
            },
            LockError::Protocol {
                message,
                lock: None,
                source,
            } => LockError::Protocol {
                message,
                lock: Some(name.to_owned()),
                source,
            },
            LockError::NotReplicated {
                lock: None,
                replicas,
                timeout,
            } => LockError::NotReplicated {
                lock: Some(name.to_owned()),
                replicas,
                timeout,
            },
            other => other,
        }
    }

    /// The name of the lock the error is about, when it is about one.
    pub fn lock_name(&self) -> Option<&str> {
        match self {
            LockError::NotHeld { name }
            | LockError::LeaseLost { name, .. }
            | LockError::WrongKind { name, .. }
            | LockError::WouldDeadlock { name, .. }
            | LockError::Unsupported { name, .. } => Some(name),
            LockError::Unavailable { lock, .. }
            | LockError::Protocol { lock, .. }
            | LockError::NotReplicated { lock, .. } => lock.as_deref(),
            _ => None,
        }
    }

    /// True for errors that mean the lock is no longer (or never was) held by the caller.
    pub fn is_not_held(&self) -> bool {
        matches!(
            self,
            LockError::NotHeld { .. } | LockError::LeaseLost { .. }
        )
    }

    /// True for a fenced write refused because a newer token already wrote
    /// ([`LockError::StaleToken`]): the caller's hold is over, and retrying with the same token
    /// fails the same way.
    pub fn is_stale_token(&self) -> bool {
        matches!(self, LockError::StaleToken { .. })
    }

    /// True for a bad argument ([`LockError::InvalidArgument`]): calling again with the same
    /// input fails the same way.
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, LockError::InvalidArgument { .. })
    }

    /// True when the backend could not be reached, or could not make a change durable on its
    /// replicas: the call may succeed if retried later.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            LockError::Unavailable { .. } | LockError::NotReplicated { .. }
        )
    }
}
