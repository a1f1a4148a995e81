//! Why a lease was lost: told by the store's answers and carried by events and errors.

use std::fmt;

/// How a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// The lease ran out while the guard was still held: a fixed lease that was too short, or a
    /// watchdog lease whose renewal came too late.
    Expired,
    /// The store no longer had the lock when asked: it expired there, was force-unlocked, or was
    /// lost with the store's data (a restart, a failover). Stores that can tell these apart
    /// report [`Expired`](LossReason::Expired) or [`ForceUnlocked`](LossReason::ForceUnlocked).
    Gone,
    /// Someone force-unlocked it.
    ForceUnlocked,
    /// Another owner holds it now.
    TakenOver,
    /// The store could not be reached to renew the lease before it ran out.
    Unreachable,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "the lease expired",
            LossReason::Gone => "the store no longer has the lock",
            LossReason::ForceUnlocked => "the lock was force-unlocked",
            LossReason::TakenOver => "another owner holds the lock",
            LossReason::Unreachable => "the store could not be reached before the lease ran out",
        })
    }
}
