//! Instant arithmetic that cannot overflow, whatever duration a store reports.

use std::time::{Duration, Instant};

/// The largest lease or wait dlock accepts: one year. Longer values are almost always a unit
/// mistake, and they would overflow `Instant` arithmetic or a backend's millisecond counters.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// `instant + duration`, with durations past [`MAX_DURATION`] treated as `MAX_DURATION`: a
/// lease reported by a backend (another client's) can be anything, and must not overflow.
pub fn instant_after(instant: Instant, duration: Duration) -> Instant {
    let duration = duration.min(MAX_DURATION);
    instant.checked_add(duration).unwrap_or(instant)
}
