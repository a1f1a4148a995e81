//! How the client library's errors become [`LockError`]s, with what failed and on which server.

use dlock_core::backend::LockRef;
use dlock_core::LockError;
use tokio_postgres::error::SqlState;

use crate::connection::CallError;

/// The SQLSTATE the schema's functions raise when a name is in use as another kind of lock.
pub(crate) const WRONG_KIND: &str = "DL001";

/// The SQLSTATE of a count the step would take past what the store counts (2^63 - 1).
const OUT_OF_RANGE: &str = "DL002";

/// The SQLSTATE of the schema's SQL run on a schema whose lease tables are of the other sort
/// (logged against unlogged).
const OTHER_TABLES: &str = "DL003";

/// The SQLSTATE of an acquire that found, once it had taken the name, that the hold it makes
/// had ended meanwhile (the step rolled back: the hold is gone).
const ENDED: &str = "DL004";

/// Whether `error` is the schema's "the hold ended while the step ran" ([`ENDED`]).
pub(crate) fn hold_ended(error: &CallError) -> bool {
    let CallError::Db(error) = error else {
        return false;
    };
    error
        .as_db_error()
        .is_some_and(|db| db.code().code() == ENDED)
}

/// Turns `error`, raised while doing `what` on `server`, into a [`LockError`]:
///
/// - no answer in time, refused or dropped connections, a server shutting down or starting, a
///   standby that cannot take writes (a failover under way), too many connections, a deadlock
///   or a canceled statement → [`LockError::Unavailable`] (retrying later may work);
/// - refused credentials, an unknown database, a schema that is missing or of another version,
///   a database that is not UTF-8 → [`LockError::Config`] (only a configuration change helps);
/// - missing rights and everything else the server refused → [`LockError::Protocol`].
pub(crate) fn to_lock_error(error: CallError, what: &str, server: &str) -> LockError {
    let error = match error {
        CallError::TimedOut(timeout) => {
            return LockError::unavailable(
                format!("{server} unavailable while {what}: no answer within {timeout:?}"),
                format!("no answer within {timeout:?}"),
            )
        }
        CallError::Io(error) => {
            return LockError::unavailable(
                format!("{server} unavailable while {what}: {error}"),
                error,
            )
        }
        CallError::Db(error) => error,
    };
    let Some(db) = error.as_db_error() else {
        // A connection-level failure: refused, reset, closed, a TLS handshake. The client's
        // own text (`error connecting to server`) says what it was doing, its causes why.
        let text = with_causes(&error);
        if text.contains("tls") || text.contains("TLS") || text.contains("ssl") {
            return LockError::Config {
                message: format!("{server}: the TLS setup failed while {what}: {text}"),
                source: Some(Box::new(error)),
            };
        }
        return LockError::unavailable(format!("{server} unavailable while {what}: {text}"), error);
    };
    let code = db.code().clone();
    let message = format!("{server} answered while {what}: {}", db.message());
    let class = &code.code()[..2];
    if code == SqlState::INVALID_PASSWORD
        || code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        || code == SqlState::INVALID_CATALOG_NAME
    {
        return LockError::Config {
            message: format!(
                "{server} refused the connection while {what} (wrong password, unknown user or \
                 database, or no pg_hba.conf entry for this client): {}",
                db.message()
            ),
            source: Some(Box::new(error)),
        };
    }
    if code == SqlState::UNDEFINED_FUNCTION
        || code == SqlState::UNDEFINED_TABLE
        || code == SqlState::INVALID_SCHEMA_NAME
    {
        return LockError::Config {
            message: format!(
                "{message} (the dlock schema is missing or of another version: let the backend \
                 create it, or run the SQL `dlock postgres-schema` prints; see docs/postgres.md)"
            ),
            source: Some(Box::new(error)),
        };
    }
    if code.code() == OTHER_TABLES {
        return LockError::Config {
            message: format!(
                "{message} (a schema's lease tables are all logged or all unlogged: give \
                 Durability::Ephemeral a schema of its own)"
            ),
            source: Some(Box::new(error)),
        };
    }
    if code == SqlState::INSUFFICIENT_PRIVILEGE {
        return LockError::Protocol {
            message: format!(
                "{message} (the lock user needs USAGE on the dlock schema, SELECT, INSERT, UPDATE \
                 and DELETE on its tables, and USAGE on its sequence; see docs/postgres.md)"
            ),
            lock: None,
            source: Some(Box::new(error)),
        };
    }
    let unavailable = matches!(class, "08" | "53" | "57" | "58" | "40")
        || code == SqlState::READ_ONLY_SQL_TRANSACTION
        || code == SqlState::LOCK_NOT_AVAILABLE;
    if unavailable {
        return LockError::unavailable(message, error);
    }
    LockError::Protocol {
        message,
        lock: None,
        source: Some(Box::new(error)),
    }
}

/// `error` followed by its causes: `error connecting to server: Connection refused (os error
/// 111)`.
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        let more = error.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = error.source();
    }
    text
}

/// The error of a step on `lock`: a name in use as another kind of lock is
/// [`LockError::WrongKind`], a count out of range [`LockError::InvalidArgument`], the rest as
/// [`to_lock_error`] says, naming the lock.
pub(crate) fn step_error(
    error: CallError,
    lock: LockRef<'_>,
    what: &str,
    server: &str,
) -> LockError {
    if let Some(found) = wrong_kind(&error) {
        return LockError::WrongKind {
            name: lock.name.to_owned(),
            expected: lock.kind,
            found,
        };
    }
    if let CallError::Db(db) = &error {
        if let Some(db) = db
            .as_db_error()
            .filter(|db| db.code().code() == OUT_OF_RANGE)
        {
            return LockError::invalid("permits", db.message().to_owned()).on_lock(lock.name);
        }
    }
    to_lock_error(error, what, server).on_lock(lock.name)
}

/// What the name is in use as, when `error` is the schema's wrong-kind error.
pub(crate) fn wrong_kind(error: &CallError) -> Option<String> {
    let CallError::Db(error) = error else {
        return None;
    };
    let db = error.as_db_error()?;
    (db.code().code() == WRONG_KIND).then(|| db.message().to_owned())
}

/// The index (from 1) of the request a batch's wrong-kind error was about.
pub(crate) fn wrong_kind_index(error: &CallError) -> Option<usize> {
    batch_index(error, WRONG_KIND)
}

/// The index (from 1) of the acquire of a batch whose hold ended while the batch ran (see
/// [`hold_ended`]).
pub(crate) fn ended_index(error: &CallError) -> Option<usize> {
    batch_index(error, ENDED)
}

/// The index (from 1) of the request a batch's error of SQLSTATE `code` was about.
fn batch_index(error: &CallError, code: &str) -> Option<usize> {
    let CallError::Db(error) = error else {
        return None;
    };
    let db = error.as_db_error()?;
    if db.code().code() != code {
        return None;
    }
    db.detail()?.parse().ok()
}

/// A copy of `error` for another lock of the same failed batch (`LockError` is not `Clone`).
pub(crate) fn copy_for_lock(error: &LockError, name: &str) -> LockError {
    let text = error.to_string();
    match error {
        LockError::Unavailable { message, .. } => LockError::Unavailable {
            message: message.clone(),
            lock: Some(name.to_owned()),
            source: Some(text.into()),
        },
        LockError::Config { message, .. } => LockError::Config {
            message: message.clone(),
            source: Some(text.into()),
        },
        LockError::Protocol { message, .. } => LockError::Protocol {
            message: message.clone(),
            lock: Some(name.to_owned()),
            source: Some(text.into()),
        },
        _ => LockError::Protocol {
            message: text,
            lock: Some(name.to_owned()),
            source: None,
        },
    }
}
