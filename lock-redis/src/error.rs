//! How the `redis` crate's errors become [`LockError`]s, with what failed and on which server.

use redis::{ErrorKind, RedisError, ServerErrorKind};

use dlock_core::BoxError;
use dlock_core::LockError;

/// Whether `error` means the connection it happened on cannot be trusted any more (the server
/// went away, or a reply may still be in flight after a timeout).
pub(crate) fn breaks_connection(error: &RedisError) -> bool {
    matches!(error.kind(), ErrorKind::Io | ErrorKind::Parse)
        || error.is_unrecoverable_error()
        // A master demoted to a replica (a failover): connect again, to the new master.
        || error.code() == Some("READONLY")
}

/// Whether a pipelined reply is the server's `NOSCRIPT`: its script cache lost our scripts
/// (restart, `SCRIPT FLUSH`, failover to a replica that never loaded them).
pub(crate) fn is_noscript_reply(reply: &redis::Value) -> bool {
    matches!(reply, redis::Value::ServerError(error) if error.code() == "NOSCRIPT")
}

/// Turns `error`, raised while doing `what` on `server`, into a [`LockError`]:
///
/// - I/O errors and timeouts → [`LockError::Unavailable`] (retrying later may work);
/// - refused credentials, bad client configuration, TLS certificate problems →
///   [`LockError::Config`] (only a configuration change helps);
/// - everything the server refused or answered unexpectedly (ACL `NOPERM`, script errors,
///   wrong key type) → [`LockError::Protocol`].
pub(crate) fn to_lock_error(error: RedisError, what: &str, server: &str) -> LockError {
    let kind = error.kind();
    if kind == ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("WRONGPASS" | "NOAUTH"))
    {
        return LockError::Config {
            message: format!(
                "{server} refused the credentials while {what} (wrong password, unknown or disabled \
                 ACL user, or the server requires a password the URL does not give)"
            ),
            source: Some(Box::new(error)),
        };
    }
    if kind == ErrorKind::InvalidClientConfig {
        return LockError::Config {
            message: format!("invalid client configuration for {server}: {error}"),
            source: Some(Box::new(error)),
        };
    }
    if is_tls_error(&error) {
        return LockError::Config {
            message: format!("TLS handshake with {server} failed while {what}: {error}"),
            source: Some(Box::new(error)),
        };
    }
    if kind == ErrorKind::MasterNameNotFoundBySentinel || error.code() == Some("READONLY") {
        // No master to be found now (a failover in progress, or a master name the sentinels
        // do not know), or a master that was just demoted.
        return LockError::unavailable(
            format!("{server} has no reachable master while {what}: {error}"),
            error,
        );
    }
    if kind == ErrorKind::Io {
        let detail = if error.is_timeout() {
            "no answer within the timeout"
        } else if error.is_connection_refusal() {
            "connection refused"
        } else if error.is_connection_dropped() {
            "connection dropped"
        } else {
            "I/O error"
        };
        return LockError::unavailable(
            format!("{server} unavailable while {what}: {detail} ({error})"),
            error,
        );
    }
    if kind == ErrorKind::Server(ServerErrorKind::NoPerm) || error.code() == Some("NOPERM") {
        return LockError::Protocol {
            message: format!(
                "{server} denied permission while {what} (the ACL user needs the lock's keys, its \
                 channel, and EVALSHA/SCRIPT/PUBLISH/SUBSCRIBE; see docs/redis.md): {error}"
            ),
            lock: None,
            source: Some(Box::new(error)),
        };
    }
    LockError::Protocol {
        message: format!("{server} answered unexpectedly while {what}: {error}"),
        lock: None,
        source: Some(Box::new(error)),
    }
}

/// Whether `error` is a failed TLS handshake (certificate not trusted, name mismatch, alert
/// from the server). rustls errors reach us wrapped in an `io::Error` behind an `Arc`, where
/// no downcast can see them, so this goes by rustls's messages.
fn is_tls_error(error: &RedisError) -> bool {
    if !cfg!(feature = "tls") || error.kind() != ErrorKind::Io {
        return false;
    }
    let text = error.to_string();
    [
        "invalid peer certificate",
        "received fatal alert",
        "peer is incompatible",
        "peer misbehaved",
        "peer sent no certificates",
        "certificate",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// A copy of `error` for the lock `name`, when one failure is the result of several holds
/// (`LockError` is not `Clone`): the same variant with the same fields, naming `name` where the
/// error names no lock yet, its source kept as text.
pub(crate) fn copy_for_lock(error: &LockError, name: &str) -> LockError {
    let source = |source: &Option<BoxError>| source.as_ref().map(|s| BoxError::from(s.to_string()));
    let copy = match error {
        LockError::NotHeld { name } => LockError::NotHeld { name: name.clone() },
        LockError::LeaseLost { name, reason } => LockError::LeaseLost {
            name: name.clone(),
            reason: *reason,
        },
        LockError::InvalidArgument { argument, reason } => LockError::InvalidArgument {
            argument,
            reason: reason.clone(),
        },
        LockError::Unavailable {
            message,
            lock,
            source: cause,
        } => LockError::Unavailable {
            message: message.clone(),
            lock: lock.clone(),
            source: source(cause),
        },
        LockError::Protocol {
            message,
            lock,
            source: cause,
        } => LockError::Protocol {
            message: message.clone(),
            lock: lock.clone(),
            source: source(cause),
        },
        LockError::Config {
            message,
            source: cause,
        } => LockError::Config {
            message: message.clone(),
            source: source(cause),
        },
        LockError::Resource {
            message,
            source: cause,
        } => LockError::Resource {
            message: message.clone(),
            source: source(cause),
        },
        LockError::WrongKind {
            name,
            expected,
            found,
        } => LockError::WrongKind {
            name: name.clone(),
            expected: *expected,
            found: found.clone(),
        },
        LockError::WouldDeadlock { name, reason } => LockError::WouldDeadlock {
            name: name.clone(),
            reason,
        },
        LockError::NotReplicated {
            lock,
            replicas,
            timeout,
        } => LockError::NotReplicated {
            lock: lock.clone(),
            replicas: *replicas,
            timeout: *timeout,
        },
        LockError::Unsupported { name, kind } => LockError::Unsupported {
            name: name.clone(),
            kind: *kind,
        },
        // A kind of error added later: its words, and that the backend did not do it.
        other => LockError::Unavailable {
            message: other.to_string(),
            lock: None,
            source: None,
        },
    };
    copy.on_lock(name)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use dlock_core::LockError;

    use super::copy_for_lock;

    #[test]
    fn a_copy_keeps_the_variant_and_names_the_lock() {
        let not_replicated = LockError::NotReplicated {
            lock: None,
            replicas: 2,
            timeout: Duration::from_secs(1),
        };
        match copy_for_lock(&not_replicated, "a") {
            LockError::NotReplicated {
                lock,
                replicas,
                timeout,
            } => {
                assert_eq!(lock.as_deref(), Some("a"));
                assert_eq!((replicas, timeout), (2, Duration::from_secs(1)));
            }
            other => panic!("not a NotReplicated: {other:?}"),
        }

        let protocol = LockError::Protocol {
            message: "denied".into(),
            lock: None,
            source: Some("NOPERM no script|load".into()),
        };
        let copy = copy_for_lock(&protocol, "b");
        assert!(
            matches!(&copy, LockError::Protocol { message, lock: Some(lock), .. }
                if message == "denied" && lock == "b"),
            "{copy:?}"
        );
        let source = std::error::Error::source(&copy).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("NOPERM no script|load"));

        let config = LockError::config("wrong password");
        assert!(matches!(
            copy_for_lock(&config, "c"),
            LockError::Config { message, .. } if message == "wrong password"
        ));

        // A lock the error already names stays named.
        let unavailable = LockError::Unavailable {
            message: "down".into(),
            lock: Some("first".into()),
            source: None,
        };
        assert!(matches!(
            copy_for_lock(&unavailable, "d"),
            LockError::Unavailable { lock: Some(lock), .. } if lock == "first"
        ));
    }
}
