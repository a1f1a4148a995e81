//! Where time comes from, and how work the library schedules is made known to it.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::signal::{Signal, Wake};

/// A monotonic clock that leases, waits and watchdog ticks are measured on.
///
/// Backends own their clock ([`DistributedLock::clock`](crate::backend::DistributedLock::clock));
/// the client uses it for every deadline. Every deadline the client waits for goes through a
/// [`Timer`] made by the clock, and is set on the timer the moment it is decided, by whichever
/// thread decides it. A clock moved by hand (`lock_memory::ManualClock`) therefore knows all
/// scheduled work (the watchdog's next tick, a fixed lease's end, a waiter's time-out) before any
/// thread gets around to sleeping, and can run it at the exact instant it is due.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Instant;

    /// A new timer, not yet set, for one thread's (or one background task's) deadlines.
    fn timer(&self, role: TimerRole) -> Box<dyn Timer>;
}

/// Who waits on a timer: a thread blocked in a lock call, or the library's own background work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimerRole {
    /// A caller's thread waiting for a lock (counted by `ManualClock::sleepers`).
    Waiter,
    /// Work the library schedules on its own threads (watchdog ticks, lease expiry checks).
    Background,
}

/// One deadline at a time for one waiting thread or task, made by [`Clock::timer`].
///
/// [`set`](Timer::set) may be called from any thread; [`wait`](Timer::wait) only by the thread
/// the timer belongs to. A thread already waiting sees a new instant once its signal is
/// notified. Dropping the timer tells the clock the work it stood for is done.
pub trait Timer: Send + Sync {
    /// Sets (or clears, with `None`) the instant the next wait ends at.
    fn set(&self, at: Option<Instant>);

    /// The instant set, if any.
    fn at(&self) -> Option<Instant>;

    /// Blocks until `signal` moves past generation `seen` or the set instant is reached.
    fn wait(&self, signal: &Arc<Signal>, seen: u64) -> Wake;
}

/// The operating system's monotonic clock (`Instant::now`). The default for every backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn timer(&self, _role: TimerRole) -> Box<dyn Timer> {
        Box::new(SystemTimer::default())
    }
}

/// A deadline on the system clock: waiting is a timed wait on the signal.
#[derive(Debug, Default)]
struct SystemTimer {
    at: Mutex<Option<Instant>>,
}

impl Timer for SystemTimer {
    fn set(&self, at: Option<Instant>) {
        *self.at.lock() = at;
    }

    fn at(&self) -> Option<Instant> {
        *self.at.lock()
    }

    fn wait(&self, signal: &Arc<Signal>, seen: u64) -> Wake {
        let at = *self.at.lock();
        signal.wait_until(seen, at)
    }
}
