//! Where time comes from: the monotonic system clock, or one a test moves by hand.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::signal::{Signal, Wake};

/// A monotonic clock that leases, waits and watchdog ticks are measured on.
///
/// Backends own their clock ([`DistributedLock::clock`](crate::DistributedLock::clock)); the
/// client uses it for every deadline, so a backend driven by a hand-moved clock (such as
/// `lock_memory::ManualClock`) makes expiry, timed-out waits and renewals happen exactly when a
/// test advances time, with no sleeping.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Instant;

    /// Blocks until `signal` moves past generation `seen`, or until this clock reaches
    /// `deadline` (`None`: no deadline).
    fn wait(&self, signal: &Arc<Signal>, seen: u64, deadline: Option<Instant>) -> Wake;

    /// Tells the clock that the calling thread finished the work a deadline woke it for.
    ///
    /// The client calls this when a blocking call returns and after each watchdog tick. A
    /// hand-moved clock uses it to let `advance` return only once the threads it woke are done;
    /// real clocks ignore it.
    fn settle(&self) {}
}

/// The operating system's monotonic clock (`Instant::now`). The default for every backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wait(&self, signal: &Arc<Signal>, seen: u64, deadline: Option<Instant>) -> Wake {
        signal.wait_until(seen, deadline)
    }
}
