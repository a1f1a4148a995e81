//! Limits on names and durations, checked before anything reaches a backend.

use std::time::Duration;

use crate::LockError;

/// The largest lease or wait dlock accepts: one year. Longer values are almost always a unit
/// mistake, and they would overflow `Instant` arithmetic or a backend's millisecond counters.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// The longest lock name accepted, in bytes. Backends derive longer keys from it (channel and
/// latch names), and this keeps every derived key well inside their limits.
pub const MAX_NAME_LEN: usize = 1024;

/// `instant + duration`, with durations past [`MAX_DURATION`] treated as `MAX_DURATION`: a
/// lease reported by a backend (another client's) can be anything, and must not overflow.
pub fn instant_after(instant: std::time::Instant, duration: Duration) -> std::time::Instant {
    let duration = duration.min(MAX_DURATION);
    instant.checked_add(duration).unwrap_or(instant)
}

/// Checks a lock name: not empty, at most [`MAX_NAME_LEN`] bytes.
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
