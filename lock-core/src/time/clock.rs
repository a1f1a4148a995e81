//! Where time comes from, and how work the library schedules is made known to it.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use parking_lot::Mutex;

use crate::time::deadlines;
use crate::time::signal::{Signal, Wake};

/// A monotonic clock that leases, waits and watchdog ticks are measured on.
///
/// Backends own their clock ([`DistributedLock::clock`](crate::contract::backend::DistributedLock::clock));
/// the client uses it for every deadline. Every deadline the client waits for goes through a
/// [`Timer`] made by the clock, and is set on the timer the moment it is decided, by whichever
/// thread decides it. A clock moved by hand (`dlock_memory::ManualClock`) therefore knows all
/// scheduled work (the watchdog's next tick, a fixed lease's end, a waiter's time-out) before any
/// thread gets around to sleeping, and can run it at the exact instant it is due.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Instant;

    /// A new timer, not yet set, for one thread's (or one background task's) deadlines.
    fn timer(&self, role: TimerRole) -> Box<dyn Timer>;

    /// Marks work the calling thread does that time must not move past until the mark is
    /// dropped: a release on its way to the store, after the hold left the watchdog. A clock
    /// that follows real time has nothing to mark (`None`, the default); a clock moved by hand
    /// waits for the mark before it moves on, so a release made while another thread moves
    /// time meets its lease as it was when the release began.
    fn work_in_progress(&self) -> Option<Box<dyn Timer>> {
        None
    }
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
/// the timer belongs to, and [`poll_wait`](Timer::poll_wait) only by the future it belongs to
/// (a timer serves one or the other). A thread already waiting sees a new instant once its
/// signal is notified. Dropping the timer tells the clock the work it stood for is done.
pub trait Timer: Send + Sync {
    /// Sets (or clears, with `None`) the instant the next wait ends at.
    fn set(&self, at: Option<Instant>);

    /// The instant set, if any.
    fn at(&self) -> Option<Instant>;

    /// Blocks until `signal` moves past generation `seen` or the set instant is reached.
    fn wait(&self, signal: &Arc<Signal>, seen: u64) -> Wake;

    /// [`wait`](Timer::wait) for a future, without blocking: ready once `signal` moved past
    /// `seen` or the set instant is reached; until then the task is woken when either happens
    /// and polls again. A future that is dropped while it waits drops its timer with it.
    ///
    /// The default takes the set instant as real time (`Instant`), right for clocks that
    /// follow the system's; a clock that moves otherwise (by hand) implements it itself.
    fn poll_wait(&self, signal: &Arc<Signal>, seen: u64, cx: &mut Context<'_>) -> Poll<Wake> {
        if signal.poll_notified(seen, cx).is_ready() {
            return Poll::Ready(Wake::Signaled);
        }
        match self.at() {
            Some(at) if Instant::now() >= at => Poll::Ready(Wake::DeadlineReached),
            Some(at) => {
                deadlines::wake_once_at(at, cx.waker());
                Poll::Pending
            }
            None => Poll::Pending,
        }
    }
}

/// The operating system's clock, counting the time the machine was suspended.
///
/// On Linux it reads `CLOCK_BOOTTIME`, which keeps counting while a VM or laptop is suspended,
/// unlike `Instant::now()` (`CLOCK_MONOTONIC`): after a resume, holds whose lease ran out
/// during the suspension are seen as lost at once, not at the next watchdog tick. Elsewhere it
/// is `Instant::now()`. The default for every backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        suspend_counting_now()
    }

    fn timer(&self, _role: TimerRole) -> Box<dyn Timer> {
        Box::new(SystemTimer::default())
    }
}

/// `Instant::now()` plus the time the machine spent suspended since the process first asked.
#[cfg(target_os = "linux")]
fn suspend_counting_now() -> Instant {
    use std::sync::OnceLock;
    use std::time::Duration;

    fn boottime() -> Duration {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        // Both fields are non-negative for this clock.
        Duration::new(
            u64::try_from(now.tv_sec).unwrap_or(0),
            u32::try_from(now.tv_nsec).unwrap_or(0),
        )
    }
    static ORIGIN: OnceLock<(Instant, Duration)> = OnceLock::new();
    let (instant, boot) = *ORIGIN.get_or_init(|| (Instant::now(), boottime()));
    crate::time::instant_after(instant, boottime().saturating_sub(boot))
}

#[cfg(not(target_os = "linux"))]
fn suspend_counting_now() -> Instant {
    Instant::now()
}

/// A deadline on the system clock: waiting is a timed wait on the signal (a thread), or a
/// waker woken by the signal or at the instant (a future).
#[derive(Debug, Default)]
struct SystemTimer {
    at: Mutex<Option<Instant>>,
    /// A future's waker scheduled at the set instant, while it waits.
    scheduled: Mutex<Option<deadlines::Key>>,
}

impl SystemTimer {
    /// Replaces the waker scheduled for this timer (if any) by `next`.
    fn schedule(&self, next: Option<deadlines::Key>) {
        if let Some(previous) = std::mem::replace(&mut *self.scheduled.lock(), next) {
            deadlines::cancel(previous);
        }
    }
}

impl Drop for SystemTimer {
    fn drop(&mut self) {
        self.schedule(None);
    }
}

impl Timer for SystemTimer {
    fn set(&self, at: Option<Instant>) {
        *self.at.lock() = at;
    }

    fn at(&self) -> Option<Instant> {
        *self.at.lock()
    }

    fn wait(&self, signal: &Arc<Signal>, seen: u64) -> Wake {
        // The deadline is on the suspend-counting clock; the condition variable waits on
        // `Instant`: wait for what is left of it.
        let at = (*self.at.lock()).map(|at| {
            let left = at.saturating_duration_since(suspend_counting_now());
            crate::time::instant_after(Instant::now(), left)
        });
        signal.wait_until(seen, at)
    }

    fn poll_wait(&self, signal: &Arc<Signal>, seen: u64, cx: &mut Context<'_>) -> Poll<Wake> {
        if signal.poll_notified(seen, cx).is_ready() {
            self.schedule(None);
            return Poll::Ready(Wake::Signaled);
        }
        let Some(at) = *self.at.lock() else {
            self.schedule(None);
            return Poll::Pending;
        };
        // On the suspend-counting clock; the timers' thread sleeps on `Instant`.
        let left = at.saturating_duration_since(suspend_counting_now());
        if left.is_zero() {
            self.schedule(None);
            return Poll::Ready(Wake::DeadlineReached);
        }
        let wake_at = crate::time::instant_after(Instant::now(), left);
        self.schedule(Some(deadlines::wake_at(wake_at, cx.waker())));
        Poll::Pending
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::time::Duration;

    use super::{Clock, SystemClock};

    fn boottime() -> Duration {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
    }

    /// The system clock moves with `CLOCK_BOOTTIME`, the clock that keeps counting while the
    /// machine is suspended. A suspension cannot be made in a test, so this only shows the
    /// clock follows that one; what a holder sees after a pause is shown on a `ManualClock`
    /// (`ManualClock::skip`).
    #[test]
    fn the_system_clock_follows_the_clock_that_counts_suspended_time() {
        let (clock_start, boot_start) = (SystemClock.now(), boottime());
        std::thread::sleep(Duration::from_millis(20));
        let (boot_end, clock_end) = (boottime(), SystemClock.now());
        let clock_moved = clock_end - clock_start;
        let boot_moved = boot_end - boot_start;
        // The boot clock was read inside the system clock's readings.
        assert!(
            clock_moved >= boot_moved,
            "{clock_moved:?} < {boot_moved:?}"
        );
        // Apart from what a preempted test thread adds between two readings.
        assert!(clock_moved - boot_moved < Duration::from_millis(200));
    }
}
