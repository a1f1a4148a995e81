//! The one place a local lease deadline is computed.
//!
//! The lease rule: a hold that says it is valid has a lease in the store that ends no earlier
//! than its local deadline, at every instant. Every deadline the client keeps (an acquire, a
//! re-entry that extends, a renewal, a grant handed over by a release) is a [`Lease`]: the
//! instant the request that set it was sent, the lease the store was asked to set, and the
//! [`ClockDrift`] allowance, so the rule holds by construction wherever a deadline is made.

use std::time::{Duration, Instant};

use crate::contract::error::LockError;
use crate::time::instant_after;

/// How much faster a store's clock may run than the client's during a lease: the margin every
/// local deadline keeps from the store's expiry, as a fraction of the lease plus a fixed part.
///
/// The default, and the least accepted, is Redisson's and the Redlock description's:
/// 1 % of the lease + 2 ms. A client uses the larger of its own setting
/// ([`LockClientBuilder::clock_drift`](crate::LockClientBuilder::clock_drift)) and its backend's
/// ([`DistributedLock::clock_drift`](crate::contract::backend::DistributedLock::clock_drift)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlocks::ClockDrift;
///
/// let drift = ClockDrift::DEFAULT;
/// assert_eq!(drift.margin(Duration::from_secs(30)), Duration::from_millis(302));
/// let wider = ClockDrift::new(0.05, Duration::from_millis(10))?;
/// assert_eq!(wider.margin(Duration::from_secs(10)), Duration::from_millis(510));
/// assert!(ClockDrift::new(0.001, Duration::ZERO).is_err());   // below the floor
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockDrift {
    factor: f64,
    fixed: Duration,
}

impl ClockDrift {
    /// 1 % of the lease + 2 ms (Redisson's, the Redlock description's): the default and the
    /// floor.
    pub const DEFAULT: ClockDrift = ClockDrift {
        factor: 0.01,
        fixed: Duration::from_millis(2),
    };

    /// A drift allowance of `factor` × the lease + `fixed`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidArgument`] when `factor` is below 0.01 or not below 0.5, or `fixed`
    /// below 2 ms or above a minute: less would undercut the floor, more would leave too little of
    /// a lease to use.
    pub fn new(factor: f64, fixed: Duration) -> Result<Self, LockError> {
        if !(Self::DEFAULT.factor..0.5).contains(&factor) {
            return Err(LockError::invalid(
                "clock_drift",
                format!("the drift factor must be at least 0.01 and below 0.5, got {factor}"),
            ));
        }
        if fixed < Self::DEFAULT.fixed || fixed > Duration::from_secs(60) {
            return Err(LockError::invalid(
                "clock_drift",
                format!("the fixed drift must be between 2 ms and 1 minute, got {fixed:?}"),
            ));
        }
        Ok(ClockDrift { factor, fixed })
    }

    /// The fraction of the lease allowed for.
    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// The fixed part allowed for.
    pub fn fixed(&self) -> Duration {
        self.fixed
    }

    /// The margin kept from a lease of `lease`: `lease × factor + fixed`, rounded up to the
    /// microsecond.
    pub fn margin(&self, lease: Duration) -> Duration {
        // In nanoseconds, where the product is exact for any lease a client takes; the tiny
        // allowance keeps a float error from adding a microsecond to a round result.
        let micros = (lease.as_nanos() as f64 * self.factor / 1e3 - 1e-6).ceil();
        Duration::from_micros(micros.max(0.0) as u64) + self.fixed
    }

    /// The larger allowance of the two, part by part.
    pub fn max(self, other: ClockDrift) -> ClockDrift {
        ClockDrift {
            factor: self.factor.max(other.factor),
            fixed: self.fixed.max(other.fixed),
        }
    }
}

impl Default for ClockDrift {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A lease as the client knows it: asked of the store by a request sent at `sent_at`, for
/// `granted`. The store's lease starts when the store runs the request, which is no earlier
/// than `sent_at`; so it ends no earlier than `sent_at + granted`, on the store's clock.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// use dlocks::backend::Lease;
/// use dlocks::ClockDrift;
///
/// let sent_at = Instant::now();
/// let lease = Lease::new(sent_at, Duration::from_secs(10));
/// assert_eq!(lease.deadline(ClockDrift::DEFAULT), sent_at + Duration::from_millis(9898));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    sent_at: Instant,
    granted: Duration,
}

impl Lease {
    /// The lease `granted` by a request sent at `sent_at`.
    pub fn new(sent_at: Instant, granted: Duration) -> Self {
        Lease { sent_at, granted }
    }

    /// When the request was sent.
    pub fn sent_at(&self) -> Instant {
        self.sent_at
    }

    /// The lease the store set.
    pub fn granted(&self) -> Duration {
        self.granted
    }

    /// The local deadline: `sent_at + granted − drift margin`, never later than the store's
    /// expiry as long as the store's clock runs no more than `drift` faster. A lease shorter
    /// than its margin is over as soon as it is granted.
    pub fn deadline(&self, drift: ClockDrift) -> Instant {
        let usable = self.granted.saturating_sub(drift.margin(self.granted));
        instant_after(self.sent_at, usable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_is_a_fraction_plus_a_fixed_part_rounded_up() {
        let drift = ClockDrift::DEFAULT;
        assert_eq!(drift.margin(Duration::ZERO), Duration::from_millis(2));
        assert_eq!(
            drift.margin(Duration::from_millis(1)),
            Duration::from_micros(2010)
        );
        // 1 % of 1.5 µs is 0.015 µs: rounded up to a whole microsecond.
        assert_eq!(
            drift.margin(Duration::from_nanos(1500)),
            Duration::from_micros(2001)
        );
    }

    #[test]
    fn a_deadline_is_never_later_than_the_store_expiry() {
        let sent_at = Instant::now();
        for lease_ms in [1u64, 2, 3, 10, 999, 30_000, 86_400_000] {
            let granted = Duration::from_millis(lease_ms);
            let deadline = Lease::new(sent_at, granted).deadline(ClockDrift::DEFAULT);
            assert!(deadline <= sent_at + granted);
            assert!(deadline >= sent_at);
        }
        // Shorter than its margin: over at once.
        let tiny = Lease::new(sent_at, Duration::from_millis(1)).deadline(ClockDrift::DEFAULT);
        assert_eq!(tiny, sent_at);
    }

    #[test]
    fn the_allowance_is_never_below_the_floor() {
        assert!(ClockDrift::new(0.009, Duration::from_millis(2)).is_err());
        assert!(ClockDrift::new(0.01, Duration::from_millis(1)).is_err());
        assert!(ClockDrift::new(0.5, Duration::from_millis(2)).is_err());
        assert!(ClockDrift::new(f64::NAN, Duration::from_millis(2)).is_err());
        let drift = ClockDrift::new(0.02, Duration::from_millis(5)).expect("valid");
        assert_eq!(drift.max(ClockDrift::DEFAULT), drift);
        assert_eq!(ClockDrift::DEFAULT.max(drift), drift);
    }
}
