//! Reading [`RedisBackend`]'s replies: the answers of the acquire and renew scripts, a
//! script's errors as `LockError`s, and a `PTTL` as a remaining lease.

use std::time::Duration;

use dlock_core::backend::{Acquire, DistributedLock, Grant, LockRef, LossReason};
use dlock_core::LockError;
use redis::{RedisError, Value};

use super::RedisBackend;
use crate::error::to_lock_error;
use crate::scripts;

/// What the acquire scripts answer to an extend of a hold the store no longer has.
pub(crate) const GONE: &str = "DLOCK_GONE";

/// An acquire script's answer: nil (taken), a `PTTL` (held), the fenced form: `{-1, token}`
/// (taken) or `{PTTL, -1}` (held), a refusal that marked its waiter, `{PTTL, -2, ahead}` (see
/// [`marks_ahead`]), or [`GONE`] (an extended hold that ended).
pub(crate) fn acquire_reply(reply: Value) -> Result<Acquire, LockError> {
    match reply {
        Value::Nil => Ok(Acquire::ACQUIRED),
        // Redis keeps no record of how a hold ended.
        Value::SimpleString(status) if status == GONE => Ok(Acquire::Gone {
            reason: LossReason::Gone,
        }),
        Value::Int(ttl) => Ok(Acquire::Held {
            remaining_lease: pttl(ttl),
        }),
        Value::Array(items) => match items[..] {
            [Value::Int(-1), Value::Int(token)] => Ok(Acquire::Acquired(
                Grant::PLAIN.with_fencing_token(u64::try_from(token).unwrap_or_default()),
            )),
            [Value::Int(ttl), Value::Int(-1)]
            | [Value::Int(ttl), Value::Int(-2), Value::Int(_)] => Ok(Acquire::Held {
                remaining_lease: pttl(ttl),
            }),
            _ => Err(LockError::protocol(format!(
                "unexpected reply to an acquire: {items:?}"
            ))),
        },
        other => Err(LockError::protocol(format!(
            "unexpected reply to an acquire: {other:?}"
        ))),
    }
}

/// How many live marks of other waiters come before the one a refusal marked, if it marked
/// one (`{PTTL, -2, ahead}`).
pub(crate) fn marks_ahead(reply: &Value) -> Option<u64> {
    match reply {
        Value::Array(items) => match items[..] {
            [Value::Int(_), Value::Int(-2), Value::Int(ahead)] => u64::try_from(ahead).ok(),
            _ => None,
        },
        _ => None,
    }
}

/// What the renew scripts answer for a lock they extended.
pub(crate) const RENEWED: i64 = 1;
/// What the hand-over release returns when the lock went to the successor.
pub(super) const HANDED_OVER: i64 = 2;
/// What they answer for a lock that another owner holds now.
pub(crate) const HELD_BY_ANOTHER: i64 = 2;

/// The client only sends the kinds a backend supports; anything else is a caller's mistake.
pub(super) fn check_kind(backend: &RedisBackend, lock: LockRef<'_>) -> Result<(), LockError> {
    if backend.supports(lock.kind) {
        Ok(())
    } else {
        Err(LockError::Unsupported {
            name: lock.name.to_owned(),
            kind: lock.kind,
        })
    }
}

/// A script's error as a `LockError` about `lock`: the name used by another kind of lock (our
/// scripts' `DLOCK_WRONGKIND`, or Redis's `WRONGTYPE` for a key that is no lock at all) is a
/// `WrongKind`, never the server's text; the rest as any command's errors.
pub(crate) fn script_error(
    error: RedisError,
    lock: LockRef<'_>,
    what: &str,
    server: &str,
) -> LockError {
    if error.code() == Some(scripts::INVALID) {
        return LockError::invalid(
            "permits",
            error.detail().unwrap_or("a count Redis cannot keep"),
        )
        .on_lock(lock.name);
    }
    let found = match error.code() {
        Some(scripts::WRONG_KIND) => {
            Some(error.detail().unwrap_or("another kind of lock").to_owned())
        }
        Some("WRONGTYPE") => Some(
            "a Redis key of another type holding other data, not a lock (lock names are the \
             store's keys)"
                .to_owned(),
        ),
        _ => None,
    };
    match found {
        Some(found) => LockError::WrongKind {
            name: lock.name.to_owned(),
            expected: lock.kind,
            found,
        },
        None => to_lock_error(error, what, server).on_lock(lock.name),
    }
}

/// A `PTTL` reply as a remaining lease: `None` when the key has no expiry (-1) or is gone (-2).
pub(crate) fn pttl(ttl: i64) -> Option<Duration> {
    u64::try_from(ttl).ok().map(Duration::from_millis)
}
