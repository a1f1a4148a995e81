//! The values of a step's call: a lock's kind code, durations in microseconds, request ids;
//! and the rows a call answers, read into the step's outcome.

use std::time::Duration;

use dlock_core::backend::{Acquire, AcquireRequest, Grant, LockRef, LossReason, Release};
use dlock_core::{LockError, LockKind};
use tokio_postgres::Row;

/// How a kind is named in the schema's functions.
pub(super) fn kind_code(lock: LockRef<'_>) -> Result<i8, LockError> {
    let code = match lock.kind {
        LockKind::Reentrant => b'e',
        LockKind::Fenced => b't',
        LockKind::Fair => b'f',
        LockKind::Read => b'r',
        LockKind::Write => b'w',
        LockKind::Semaphore => b's',
        LockKind::Latch => b'l',
        LockKind::Election => b'n',
        _ => {
            return Err(LockError::Unsupported {
                name: lock.name.to_owned(),
                kind: lock.kind,
            })
        }
    };
    Ok(code as i8)
}

/// A duration in whole microseconds, rounded up (a lease the store sets is never shorter than
/// the one the client counts on), at least 1.
pub(crate) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos().div_ceil(1_000))
        .unwrap_or(i64::MAX)
        .max(1)
}

pub(super) fn from_micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// A random request id for a release's latch.
pub(super) fn request_id() -> i64 {
    let (high, _) = uuid::Uuid::new_v4().as_u64_pair();
    high as i64
}

/// An acquire's row: (acquired, remaining µs, fencing token, gone): gone is an ended hold (an
/// extend that found none, or a hold ended before under the request's id).
pub(super) fn acquire_row(row: &Row, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
    let kind = request.lock.kind;
    let acquired: Option<bool> = row.try_get(0).map_err(protocol)?;
    let remaining: Option<i64> = row.try_get(1).map_err(protocol)?;
    let token: Option<i64> = row.try_get(2).map_err(protocol)?;
    let gone: Option<bool> = row.try_get(3).map_err(protocol)?;
    if acquired == Some(true) {
        let mut grant = Grant::PLAIN;
        if kind.is_fenced() {
            let token = token.ok_or_else(|| {
                LockError::protocol(format!("the server granted a {kind} without a token"))
            })?;
            grant = grant.with_fencing_token(u64::try_from(token).unwrap_or(0));
        }
        Ok(Acquire::Acquired(grant))
    } else if gone == Some(true) {
        Ok(Acquire::Gone {
            reason: LossReason::Gone,
        })
    } else {
        Ok(Acquire::Held {
            remaining_lease: remaining.map(from_micros),
        })
    }
}

pub(super) fn protocol(error: tokio_postgres::Error) -> LockError {
    LockError::Protocol {
        message: format!("unexpected answer from PostgreSQL: {error}"),
        lock: None,
        source: Some(Box::new(error)),
    }
}

pub(super) fn one_row(rows: Vec<Row>, what: &str) -> Result<Row, LockError> {
    rows.into_iter()
        .next()
        .ok_or_else(|| LockError::protocol(format!("no answer to {what}")))
}

/// A release code: 1 released, 0 not held.
pub(super) fn release_of(code: i16) -> Release {
    if code == 1 {
        Release::Released
    } else {
        Release::NotHeld
    }
}

/// What a release-many code below zero says the name is in use as.
pub(super) fn family_of_code(code: i16) -> &'static str {
    match code {
        -1 => "a reentrant or fenced lock",
        -2 => "a fair lock",
        -4 => "a semaphore",
        -5 => "a count-down latch",
        -6 => "a leader election",
        _ => "a read-write lock",
    }
}

#[cfg(test)]
mod tests {
    use super::micros;
    use std::time::Duration;

    #[test]
    fn a_lease_is_sent_in_whole_microseconds_rounded_up() {
        assert_eq!(micros(Duration::from_millis(30_000)), 30_000_000);
        assert_eq!(micros(Duration::from_nanos(1_001)), 2);
        assert_eq!(micros(Duration::ZERO), 1);
        assert_eq!(micros(Duration::MAX), i64::MAX);
    }
}
