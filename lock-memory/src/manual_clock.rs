//! A clock that only moves when a test advances it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use dlock_core::backend::{Clock, Signal, Timer, TimerRole, Wake};
use parking_lot::{Condvar, Mutex, MutexGuard};

/// How long [`ManualClock::advance`] and [`ManualClock::wait_for_sleepers`] wait, in real time,
/// for other threads before giving up (a safety net against a test that would otherwise hang).
const REAL_TIME_LIMIT: Duration = Duration::from_secs(10);

/// "No instant set", in a timer's atomic.
const UNSET: u64 = u64::MAX;

/// A clock whose time moves only when [`advance`](ManualClock::advance) is called.
///
/// Give it to [`MemoryBackend::with_clock`](crate::MemoryBackend::with_clock), and lease expiry,
/// waits that end by time-out, watchdog renewals and lease events happen exactly when the test
/// advances time: tests never sleep and never race the wall clock. Clones share the same time.
///
/// # What a test may rely on
///
/// 1. **Work the library schedules is known at once.** Taking a lock schedules its watchdog
///    renewals (or, for a fixed lease, the check that reports it expired) before the call
///    returns. `advance` then runs every piece of work due up to the new time, in time order,
///    each at its exact instant, and returns once all of it is done. So `lock()` followed by
///    `advance` needs no other call:
///
///    ```
///    use std::time::Duration;
///    use dlocks::{LockClient, ManualClock, MemoryBackend};
///
///    let clock = ManualClock::new();
///    let client = LockClient::new(MemoryBackend::with_clock(clock.clone()));
///    let lock = client.lock("report");
///    let guard = lock.lock()?;                    // watchdog lease: 30 s, renewed every 10 s
///    for _ in 0..30 {
///        clock.advance(Duration::from_secs(5));   // renewals run at 10 s, 20 s, ... exactly
///        assert!(lock.is_locked()?);
///    }
///    assert!(!guard.is_lost());
///    # Ok::<(), dlocks::LockError>(())
///    ```
///
/// 2. **A lease ends exactly when it runs out**, and its guard and the client's lease events
///    say so as soon as `advance` returns. The guard stops trusting it the clock drift margin
///    ([`ClockDrift`](dlock_core::ClockDrift), 1 % + 2 ms by default) before the store ends it:
///
///    ```
///    use std::time::Duration;
///    use dlocks::{ClockDrift, LockClient, ManualClock, MemoryBackend};
///
///    let clock = ManualClock::new();
///    let client = LockClient::new(MemoryBackend::with_clock(clock.clone()));
///    let lock = client.lock("report");
///    let lease = Duration::from_secs(5);
///    let trusted = lease - ClockDrift::DEFAULT.margin(lease);          // 4.948 s
///    let guard = lock.lock_with_lease(lease)?;
///    clock.advance(trusted - Duration::from_millis(1));
///    assert!(!guard.is_lost() && lock.is_locked()?);
///    clock.advance(Duration::from_millis(1));   // the guard gives it up, no sleeping
///    assert!(guard.is_lost());
///    clock.advance(lease - trusted);            // the store ends it
///    assert!(!lock.is_locked()?);
///    assert!(guard.unlock().is_err());
///    # Ok::<(), dlocks::LockError>(())
///    ```
///
/// 3. **Threads the test starts itself** are the one thing the clock cannot know about before
///    they get there: before advancing time for a thread that will block in a lock call, wait
///    until it does with [`wait_for_sleepers`](ManualClock::wait_for_sleepers). From then on its
///    time-out, and every retry it makes when a lease it waits for runs out, is scheduled work
///    as in 1.
///
///    ```
///    use std::time::Duration;
///    use dlocks::{LockClient, ManualClock, MemoryBackend};
///
///    let clock = ManualClock::new();
///    let backend = MemoryBackend::with_clock(clock.clone());
///    let holder = LockClient::new(backend.clone());
///    let _held = holder.lock("report").lock_with_lease(Duration::from_secs(60))?;
///    let waiter = std::thread::spawn(move || {
///        let client = LockClient::new(backend);
///        client.lock("report").try_lock_for(Duration::from_secs(5)).map(|g| g.is_some())
///    });
///    assert!(clock.wait_for_sleepers(1));            // the waiter is blocked now
///    clock.advance(Duration::from_secs(5));          // its wait ends at exactly 5 s
///    assert_eq!(waiter.join().unwrap()?, false);
///    # Ok::<(), dlocks::LockError>(())
///    ```
///
/// A thread woken by a release (not by time) runs on its own: `advance` waits for threads the
/// time it moves wakes, and for threads those wake in turn while they have a deadline set. A
/// release under way on any thread is waited for too: a thread that lets a lock go while
/// another moves time on finds its lease as it was when the release began.
///
/// 4. **Futures** (the `async` feature) count as threads do: a future waiting for a lock is a
///    sleeper from the moment it parks on its timer, `advance` wakes it at its deadline and
///    waits until it has parked again or finished. Its runtime must have threads other than
///    the one calling `advance` (a multi-thread runtime), or nothing polls it meanwhile.
#[derive(Debug, Clone)]
pub struct ManualClock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    base: Instant,
    /// Nanoseconds advanced since `base`.
    offset: AtomicU64,
    state: Mutex<State>,
    /// Notified whenever a timer is set, parked, unparked or dropped.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    next_timer: u64,
    timers: HashMap<u64, Entry>,
}

/// One timer as the clock sees it.
#[derive(Debug)]
struct Entry {
    at: Arc<AtomicU64>,
    role: TimerRole,
    /// The signal and generation its thread sleeps on, while it sleeps.
    parked: Option<(Arc<Signal>, u64)>,
    /// The thread blocked on it (`Timer::wait`), while it is.
    blocked_thread: Option<ThreadId>,
    /// For the mark of work in progress ([`Clock::work_in_progress`]): the thread doing it.
    /// The work waits while that thread is blocked on another of the clock's timers.
    mark_of: Option<ThreadId>,
}

impl State {
    /// Whether some thread has work to do before the clock may move on (see
    /// [`Entry::is_busy`]). A mark of work in progress is not, while its thread is blocked on
    /// one of the clock's timers: that work waits for time, as the thread does.
    fn any_busy(&self, now: u64) -> bool {
        self.timers.values().any(|entry| self.is_busy(entry, now))
    }

    fn is_busy(&self, entry: &Entry, now: u64) -> bool {
        entry.is_busy(now)
            && entry.mark_of.is_none_or(|thread| {
                !self
                    .timers
                    .values()
                    .any(|other| other.blocked_thread == Some(thread) && other.is_blocked())
            })
    }
}

impl Entry {
    fn at(&self) -> Option<u64> {
        match self.at.load(Ordering::SeqCst) {
            UNSET => None,
            at => Some(at),
        }
    }

    /// Its thread sleeps and nothing has woken it yet.
    fn is_asleep(&self, now: u64) -> bool {
        match &self.parked {
            Some((signal, seen)) => {
                signal.generation() == *seen && self.at().is_none_or(|at| at > now)
            }
            None => false,
        }
    }

    /// Its thread sleeps and nothing has woken it, whether or not its deadline has passed: a
    /// deadline a [`skip`](ManualClock::skip) made on another thread carried past is still
    /// waited for, and only runs at the next [`advance`](ManualClock::advance).
    fn is_blocked(&self) -> bool {
        self.parked
            .as_ref()
            .is_some_and(|(signal, seen)| signal.generation() == *seen)
    }

    /// Its thread has work to do before the clock may move on: it is awake with a deadline set
    /// (doing what it was woken for, or on its way to sleep), or it sleeps but was just woken.
    fn is_busy(&self, now: u64) -> bool {
        match &self.parked {
            None => self.at().is_some(),
            Some(_) => !self.is_asleep(now),
        }
    }
}

impl ManualClock {
    /// A clock standing at the present instant, moving only when advanced.
    pub fn new() -> Self {
        ManualClock {
            inner: Arc::new(Inner {
                base: Instant::now(),
                offset: AtomicU64::new(0),
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }),
        }
    }

    /// Moves time forward by `by`, running the work due on the way: for each instant at which
    /// work is scheduled (a watchdog tick, a lease's end, a waiter's deadline), in order, the
    /// clock stops there, wakes the threads whose work it is, and waits until they are done
    /// before going further. Returns at the new time, with everything due done.
    pub fn advance(&self, by: Duration) {
        let inner = &self.inner;
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let limit = Instant::now() + REAL_TIME_LIMIT;
        let mut state = inner.state.lock();
        let target = inner.offset.load(Ordering::SeqCst).saturating_add(by);
        loop {
            self.await_quiet(&mut state, limit);
            // A mark of work in progress is no instant to run work at: it only holds time.
            let next = state
                .timers
                .values()
                .filter(|entry| entry.mark_of.is_none())
                .filter_map(Entry::at)
                .filter(|at| *at <= target)
                .min();
            let Some(next) = next else {
                inner.offset.fetch_max(target, Ordering::SeqCst);
                break;
            };
            inner.offset.fetch_max(next, Ordering::SeqCst);
            let due: Vec<Arc<Signal>> = state
                .timers
                .values()
                .filter(|entry| entry.at().is_some_and(|at| at <= next))
                .filter_map(|entry| entry.parked.as_ref().map(|(signal, _)| signal.clone()))
                .collect();
            // Woken outside the clock's lock: a waking thread takes it to report in.
            MutexGuard::unlocked(&mut state, || {
                for signal in &due {
                    signal.poke();
                }
            });
        }
    }

    /// Moves time forward by `by` at once, without stopping at the work due on the way: as a
    /// process sees time when it resumes after a pause (a stop-the-world pause, a `SIGSTOP`, a
    /// suspended VM), or as a call that was stalled in the network sees it when it returns.
    /// Nothing runs until the next [`advance`](ManualClock::advance) (of any length, zero too),
    /// which runs the work that fell due meanwhile first, late, as a resumed process would.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlocks::{LockClient, ManualClock, MemoryBackend};
    ///
    /// let clock = ManualClock::new();
    /// let client = LockClient::new(MemoryBackend::with_clock(clock.clone()));
    /// let events = client.lease_events();
    /// let guard = client.lock("report").lock()?;     // 30 s watchdog lease
    /// clock.skip(Duration::from_secs(40));            // the process was paused for 40 s
    /// assert!(guard.is_lost());                       // it knows its lease may be gone at once
    /// clock.advance(Duration::ZERO);                  // the late watchdog tick runs now
    /// assert!(events.try_recv().is_ok());             // and reports the loss
    /// # Ok::<(), dlocks::LockError>(())
    /// ```
    pub fn skip(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _state = self.inner.state.lock();
        let now = self.inner.offset.load(Ordering::SeqCst);
        self.inner
            .offset
            .store(now.saturating_add(by), Ordering::SeqCst);
    }

    /// Waits until no thread with a deadline on this clock is busy. Work left overdue by a
    /// [`skip`](ManualClock::skip) (before this call, or by a thread this call waits for) is
    /// woken first, and runs late.
    fn await_quiet(&self, state: &mut MutexGuard<'_, State>, limit: Instant) {
        loop {
            let now = self.inner.offset.load(Ordering::SeqCst);
            let overdue: Vec<Arc<Signal>> = state
                .timers
                .values()
                .filter(|entry| entry.at().is_some_and(|at| at <= now))
                .filter_map(|entry| entry.parked.as_ref().map(|(signal, _)| signal.clone()))
                .collect();
            if !overdue.is_empty() {
                MutexGuard::unlocked(state, || {
                    for signal in &overdue {
                        signal.poke();
                    }
                });
            }
            if !state.any_busy(now) {
                return;
            }
            if self.inner.changed.wait_until(state, limit).timed_out() {
                let busy: Vec<String> = state
                    .timers
                    .values()
                    .filter(|entry| state.is_busy(entry, now))
                    .map(|entry| {
                        format!(
                            "{:?} timer {} at {:?}",
                            entry.role,
                            if entry.parked.is_some() {
                                "parked"
                            } else {
                                "awake"
                            },
                            entry.at().map(Duration::from_nanos)
                        )
                    })
                    .collect();
                stderr_warning(&format!(
                    "advance: threads with work due did not finish within 10 s (at {:?}: {})",
                    Duration::from_nanos(now),
                    busy.join(", ")
                ));
                return;
            }
        }
    }

    /// The number of threads blocked in lock calls on this clock (waiting for a lock to be
    /// released or for their wait to end), and of futures waiting so.
    pub fn sleepers(&self) -> usize {
        count_sleepers(&self.inner.state.lock())
    }

    /// Blocks until at least `count` threads are blocked in lock calls on this clock (see
    /// [`sleepers`](ManualClock::sleepers)): how a test knows that threads it started are in
    /// place before it advances time. Returns false if that did not happen within 10 s of real
    /// time.
    pub fn wait_for_sleepers(&self, count: usize) -> bool {
        let limit = Instant::now() + REAL_TIME_LIMIT;
        let mut state = self.inner.state.lock();
        loop {
            if count_sleepers(&state) >= count {
                return true;
            }
            if self.inner.changed.wait_until(&mut state, limit).timed_out() {
                return false;
            }
        }
    }

    /// Time advanced since the clock was made.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.inner.offset.load(Ordering::SeqCst))
    }
}

/// Threads blocked in lock calls. One whose deadline a `skip` carried past counts too: it is
/// still blocked, and a test waiting for it to block must go on to the `advance` that wakes it.
fn count_sleepers(state: &State) -> usize {
    state
        .timers
        .values()
        .filter(|entry| entry.role == TimerRole::Waiter && entry.is_blocked())
        .count()
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.inner.instant(self.inner.offset.load(Ordering::SeqCst))
    }

    fn timer(&self, role: TimerRole) -> Box<dyn Timer> {
        Box::new(ManualTimer::new(self, role))
    }

    /// A timer set to now and never parked: busy, so [`advance`](ManualClock::advance) waits
    /// for it to be dropped before it moves time on.
    fn work_in_progress(&self) -> Option<Box<dyn Timer>> {
        let mark = ManualTimer::new(self, TimerRole::Background);
        if let Some(entry) = self.inner.state.lock().timers.get_mut(&mark.id) {
            entry.mark_of = Some(thread::current().id());
        }
        mark.set(Some(self.now()));
        Some(Box::new(mark))
    }
}

impl Inner {
    fn instant(&self, offset: u64) -> Instant {
        self.base + Duration::from_nanos(offset)
    }

    fn offset_of(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(UNSET - 1)
    }
}

/// A deadline on a [`ManualClock`], registered with it from the moment it is set.
struct ManualTimer {
    clock: Arc<Inner>,
    id: u64,
    at: Arc<AtomicU64>,
}

impl ManualTimer {
    /// A timer of `clock`'s, not yet set.
    fn new(clock: &ManualClock, role: TimerRole) -> ManualTimer {
        let at = Arc::new(AtomicU64::new(UNSET));
        let id = {
            let mut state = clock.inner.state.lock();
            let id = state.next_timer;
            state.next_timer += 1;
            state.timers.insert(
                id,
                Entry {
                    at: at.clone(),
                    role,
                    parked: None,
                    blocked_thread: None,
                    mark_of: None,
                },
            );
            id
        };
        ManualTimer {
            clock: clock.inner.clone(),
            id,
            at,
        }
    }

    fn due(&self) -> bool {
        let at = self.at.load(Ordering::SeqCst);
        at != UNSET && at <= self.clock.offset.load(Ordering::SeqCst)
    }
}

impl Timer for ManualTimer {
    fn set(&self, at: Option<Instant>) {
        let _state = self.clock.state.lock();
        let at = at.map_or(UNSET, |at| self.clock.offset_of(at));
        self.at.store(at, Ordering::SeqCst);
        self.clock.changed.notify_all();
    }

    fn at(&self) -> Option<Instant> {
        match self.at.load(Ordering::SeqCst) {
            UNSET => None,
            at => Some(self.clock.instant(at)),
        }
    }

    fn poll_wait(&self, signal: &Arc<Signal>, seen: u64, cx: &mut Context<'_>) -> Poll<Wake> {
        let mut state = self.clock.state.lock();
        let woken = if self.due() {
            Some(Wake::DeadlineReached)
        } else if signal.poll_notified(seen, cx).is_ready() {
            Some(Wake::Signaled)
        } else {
            // The waker was left with the signal under the clock's lock: an `advance` that
            // finds this timer due pokes the signal after it let the lock go, and wakes it.
            None
        };
        if let Some(entry) = state.timers.get_mut(&self.id) {
            entry.parked = match woken {
                Some(_) => None,
                None => Some((signal.clone(), seen)),
            };
        }
        self.clock.changed.notify_all();
        match woken {
            Some(wake) => Poll::Ready(wake),
            None => Poll::Pending,
        }
    }

    fn wait(&self, signal: &Arc<Signal>, seen: u64) -> Wake {
        {
            let mut state = self.clock.state.lock();
            if self.due() {
                return Wake::DeadlineReached;
            }
            if let Some(entry) = state.timers.get_mut(&self.id) {
                entry.parked = Some((signal.clone(), seen));
                entry.blocked_thread = Some(thread::current().id());
            }
            self.clock.changed.notify_all();
        }
        let wake = signal.wait_while_before(seen, || self.due());
        let mut state = self.clock.state.lock();
        if let Some(entry) = state.timers.get_mut(&self.id) {
            entry.parked = None;
            entry.blocked_thread = None;
        }
        self.clock.changed.notify_all();
        wake
    }
}

impl Drop for ManualTimer {
    fn drop(&mut self) {
        let mut state = self.clock.state.lock();
        state.timers.remove(&self.id);
        self.clock.changed.notify_all();
    }
}

/// Test-support code reports through stderr: it must not pull a logging stack into users' tests.
fn stderr_warning(message: &str) {
    eprintln!("dlock ManualClock: {message}");
}
