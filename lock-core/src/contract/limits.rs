//! Limits on names and durations, checked before anything reaches a backend.

use std::time::Duration;

use crate::contract::error::LockError;
pub use crate::time::MAX_DURATION;

/// The longest lock name accepted, in bytes. Backends derive longer keys from it (channel and
/// latch names), and this keeps every derived key well inside their limits.
pub const MAX_NAME_LEN: usize = 1024;

/// The largest count a latch or semaphore keeps: 2^63 − 1, what Redis counts exactly (a Java
/// `long`, Redisson's).
pub const MAX_COUNT: u64 = i64::MAX as u64;

/// Checks the arguments of a listing of what a store holds (`list_locks`, `list_synchronizers`):
/// a pattern that is not empty, a limit of at least one.
///
/// ```
/// use dlocks::backend::validate_listing;
///
/// assert!(validate_listing("jobs:*", 100).is_ok());
/// assert!(validate_listing("", 100).is_err());
/// assert!(validate_listing("*", 0).is_err());
/// ```
pub fn validate_listing(pattern: &str, limit: usize) -> Result<(), LockError> {
    if pattern.is_empty() {
        return Err(LockError::invalid(
            "pattern",
            "a pattern must not be empty (use `*` for all)",
        ));
    }
    if limit == 0 {
        return Err(LockError::invalid("limit", "the limit must be at least 1"));
    }
    Ok(())
}

/// Checks a count (a latch's, a semaphore's permits): at most [`MAX_COUNT`].
pub fn validate_count(argument: &'static str, count: u64) -> Result<(), LockError> {
    if count > MAX_COUNT {
        return Err(LockError::invalid(
            argument,
            format!("a count is at most {MAX_COUNT} (2^63 - 1), got {count}"),
        ));
    }
    Ok(())
}

/// The prefixes of the keys stores derive from lock names (Redisson's and dlock's): a name
/// starting with one is refused, so no name is another name's derived key.
pub const RESERVED_NAME_PREFIXES: [&str; 2] = ["redisson_", "dlock_"];

/// Checks a lock name: not empty, at most [`MAX_NAME_LEN`] bytes, and never the same, in any
/// key a store derives from it, as another name. The rules (the same on every backend, so a
/// name a test accepts on the in-process store is accepted on Redis):
///
/// - it does not start with a reserved prefix ([`RESERVED_NAME_PREFIXES`]);
/// - braces form a hash tag: a name with `{` or `}` has a `{` before its first `}`, with at
///   least one character between (every key derived from it then shares its Redis Cluster
///   slot);
/// - it is not a whole hash tag, `{X}` with no other `{`: its derived keys would be those of
///   the name `X` (Redisson puts `X` in braces to derive them);
/// - a name with a hash tag does not end with `:timeout` nor contain `:rwlock_timeout`: those
///   are the keys of another name's semaphore permits and read holds.
///
/// ```
/// use dlocks::backend::validate_name;
/// assert!(validate_name("orders:42").is_ok());
/// assert!(validate_name("{user7}:cart").is_ok());
/// assert!(validate_name("{orders}").is_err());      // would share orders' keys
/// assert!(validate_name("redisson_lock_queue:{orders}").is_err());
/// assert!(validate_name("half{open").is_err());
/// ```
pub fn validate_name(name: &str) -> Result<(), LockError> {
    if name.is_empty() {
        return Err(LockError::invalid("name", "a lock name cannot be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(LockError::invalid(
            "name",
            format!(
                "a lock name is at most {MAX_NAME_LEN} bytes, this one is {} bytes",
                name.len()
            ),
        ));
    }
    if let Some(prefix) = RESERVED_NAME_PREFIXES
        .iter()
        .find(|prefix| name.starts_with(**prefix))
    {
        return Err(LockError::invalid(
            "name",
            format!(
                "{name:?}: names starting with {prefix:?} are reserved for the keys stores \
                 derive from lock names"
            ),
        ));
    }
    if name.contains(['{', '}']) {
        let tagged = match (name.find('{'), name.find('}')) {
            (Some(open), Some(close)) => close > open + 1,
            _ => false,
        };
        if !tagged {
            return Err(LockError::invalid(
                "name",
                format!(
                    "{name:?}: braces in a lock name must form a hash tag, `{{tag}}` with at \
                     least one character inside, before any other `}}`"
                ),
            ));
        }
        if name.starts_with('{') && name.ends_with('}') && !name[1..].contains('{') {
            return Err(LockError::invalid(
                "name",
                format!(
                    "{name:?}: a name that is a whole hash tag shares every derived key with \
                     the name inside the braces; add something after the tag"
                ),
            ));
        }
        if name.ends_with(":timeout") || name.contains(":rwlock_timeout") {
            return Err(LockError::invalid(
                "name",
                format!(
                    "{name:?}: a name with a hash tag may not end with `:timeout` nor contain \
                     `:rwlock_timeout`: those are keys derived from other names"
                ),
            ));
        }
    }
    Ok(())
}

/// Checks a lease: at least one millisecond (backends count leases in milliseconds) and at most
/// [`MAX_DURATION`].
pub fn validate_lease(argument: &'static str, lease: Duration) -> Result<(), LockError> {
    if lease < Duration::from_millis(1) {
        return Err(LockError::invalid(
            argument,
            format!("a lease must be at least 1 ms, got {lease:?}"),
        ));
    }
    if lease > MAX_DURATION {
        return Err(LockError::invalid(
            argument,
            format!("a lease must be at most {MAX_DURATION:?} (one year), got {lease:?}"),
        ));
    }
    Ok(())
}

/// Checks a wait: zero (try once) up to [`MAX_DURATION`]. To wait without a bound, call `lock()`.
pub fn validate_wait(wait: Duration) -> Result<(), LockError> {
    if wait > MAX_DURATION {
        return Err(LockError::invalid(
            "wait",
            format!(
                "a wait must be at most {MAX_DURATION:?} (one year), got {wait:?}; use lock() to wait without a bound"
            ),
        ));
    }
    Ok(())
}

/// Checks a backend's time setting (a timeout, a linger): at least `at_least` and at most
/// [`MAX_DURATION`], as a [`LockError::Config`] error naming the setting.
pub fn validate_setting(name: &str, value: Duration, at_least: Duration) -> Result<(), LockError> {
    if value < at_least || value.is_zero() {
        let floor = if at_least.is_zero() {
            "longer than zero".to_owned()
        } else {
            format!("at least {at_least:?}")
        };
        return Err(LockError::config(format!(
            "{name} must be {floor}, got {value:?}"
        )));
    }
    if value > MAX_DURATION {
        return Err(LockError::config(format!(
            "{name} must be at most one year, got {value:?}"
        )));
    }
    Ok(())
}
