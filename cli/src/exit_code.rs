//! The exit codes of `dlock`, and the failure that carries one to `main`.
//!
//! `run` exits with its child's code (128 + the signal's number when a signal ended it, as
//! shells report it); these are the codes of `dlock`'s own outcomes.

use std::fmt;

/// The answer to a question a command was asked is no: `status --check` found the name free,
/// `force-unlock --if-holder` found the lock not held by that hold (and changed nothing).
pub const NO: i32 = 1;
/// Bad usage: an unknown option, a malformed duration, a bad lock name (as `flock` and
/// `timeout` use it).
pub const USAGE: i32 = 2;
/// The name is in use by another kind of lock, or by a Redis key that is not a lock (sysexits'
/// `EX_DATAERR`: what is stored under the name is not what was asked for; waiting or retrying
/// cannot help).
pub const WRONG_KIND: i32 = 65;
/// `run`: the lock was not acquired within `--wait` (sysexits' `EX_TEMPFAIL`: try again).
pub const NOT_ACQUIRED: i32 = 75;
/// The backend could not be reached, or the lock was lost (or at risk: renewals failing) while
/// the child ran (sysexits' `EX_UNAVAILABLE`).
pub const UNAVAILABLE: i32 = 69;
/// `run`: the command was found but could not be started (as `env` and `timeout` report it).
pub const CANNOT_RUN: i32 = 126;
/// `run`: the command was not found.
pub const NOT_FOUND: i32 = 127;

/// Why `dlock` stops early: a message for stderr and the exit code that goes with it.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: i32,
    /// What went wrong, for stderr.
    pub message: String,
}

impl Failure {
    /// A failure with `code` and `message`.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<dlocks::LockError> for Failure {
    /// Bad arguments are usage errors, a name in use by another kind its own failure;
    /// everything else means the backend did not do it.
    fn from(error: dlocks::LockError) -> Self {
        match error {
            dlocks::LockError::InvalidArgument { .. } | dlocks::LockError::Config { .. } => {
                Failure::new(USAGE, error.to_string())
            }
            dlocks::LockError::WrongKind { ref found, .. } => {
                // The backend's words say the name is a key holding other data.
                let hint = if found.contains("not a lock") || found.contains("other data") {
                    "use another name"
                } else {
                    "take it as the kind it is (`run` --fair, --read, --write or --fenced), or \
                     use another name"
                };
                Failure::new(WRONG_KIND, format!("{error}; {hint}"))
            }
            _ => Failure::new(UNAVAILABLE, error.to_string()),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
