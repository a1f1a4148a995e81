//! A clock that only moves when a test advances it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use lock_core::{Clock, Signal, Wake};
use parking_lot::{Condvar, Mutex};

/// How long [`ManualClock::advance`] and [`ManualClock::wait_for_sleepers`] wait, in real time,
/// for other threads before giving up (a safety net against a test that would otherwise hang).
const REAL_TIME_LIMIT: Duration = Duration::from_secs(10);

/// A clock whose time moves only when [`advance`](ManualClock::advance) is called.
///
/// Give it to [`MemoryBackend::with_clock`](crate::MemoryBackend::with_clock) and lease expiry,
/// waits that end by timeout and watchdog renewals happen exactly when the test advances time:
/// tests never sleep and never race the wall clock. `advance` returns once every thread it
/// woke has finished what it was woken for (renewed, acquired, given up, or gone back to sleep).
///
/// Clones share the same time.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlock::{LockClient, ManualClock, MemoryBackend};
///
/// let clock = ManualClock::new();
/// let client = LockClient::new(MemoryBackend::with_clock(clock.clone()));
/// let lock = client.lock("report");
/// let guard = lock.lock_with_lease(Duration::from_secs(5))?;
/// clock.advance(Duration::from_secs(6));      // the lease runs out, no sleeping
/// assert!(guard.is_lost());
/// assert!(!lock.is_locked()?);
/// assert!(guard.unlock().is_err());
/// # Ok::<(), dlock::LockError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: u64,
    base: Instant,
    /// Nanoseconds advanced since `base`.
    offset: AtomicU64,
    state: Mutex<State>,
    /// Notified when sleepers come and go and when woken threads settle.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    next_sleeper: u64,
    sleepers: HashMap<u64, Sleeper>,
    /// Threads woken by `advance` that have not settled yet.
    busy: usize,
}

#[derive(Debug)]
struct Sleeper {
    deadline: Instant,
    signal: Arc<Signal>,
    /// The generation it sleeps on: once the signal moves past it, the thread is waking up.
    seen: u64,
    woken_by_advance: bool,
}

impl Sleeper {
    /// Still asleep: neither woken by `advance` nor notified.
    fn is_asleep(&self) -> bool {
        !self.woken_by_advance && self.signal.generation() == self.seen
    }
}

/// Per clock id: how many wake-ups by `advance` this thread has not settled yet. A thread
/// that ends without settling settles on its way out, so `advance` never waits for it.
#[derive(Default)]
struct Unsettled(HashMap<u64, (Weak<Inner>, usize)>);

impl Drop for Unsettled {
    fn drop(&mut self) {
        for (clock, owed) in self.0.values() {
            if let Some(clock) = clock.upgrade() {
                clock.release_busy(*owed);
            }
        }
    }
}

thread_local! {
    static UNSETTLED: RefCell<Unsettled> = RefCell::new(Unsettled::default());
}

impl Inner {
    fn release_busy(&self, owed: usize) {
        let mut state = self.state.lock();
        state.busy = state.busy.saturating_sub(owed);
        self.changed.notify_all();
    }
}

impl ManualClock {
    /// A clock standing at the present instant, moving only when advanced.
    pub fn new() -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        ManualClock {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                base: Instant::now(),
                offset: AtomicU64::new(0),
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }),
        }
    }

    /// Moves time forward by `by`, wakes every thread whose deadline is now reached, and
    /// returns once they have all settled.
    pub fn advance(&self, by: Duration) {
        let signals: Vec<Arc<Signal>> = {
            let mut state = self.inner.state.lock();
            let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
            self.inner.offset.fetch_add(nanos, Ordering::SeqCst);
            let now = self.now();
            let mut due = Vec::new();
            for sleeper in state.sleepers.values_mut() {
                if !sleeper.woken_by_advance && sleeper.deadline <= now {
                    sleeper.woken_by_advance = true;
                    due.push(sleeper.signal.clone());
                }
            }
            state.busy += due.len();
            due
        };
        for signal in &signals {
            signal.poke();
        }
        let limit = Instant::now() + REAL_TIME_LIMIT;
        let mut state = self.inner.state.lock();
        while state.busy > 0 {
            if self.inner.changed.wait_until(&mut state, limit).timed_out() {
                tracing_free_warning("advance: woken threads did not settle within 10 s");
                break;
            }
        }
    }

    /// The number of threads blocked on this clock with a deadline (waiting for a lock, or a
    /// watchdog with holds to renew) and not already woken.
    pub fn sleepers(&self) -> usize {
        let state = self.inner.state.lock();
        state.sleepers.values().filter(|s| s.is_asleep()).count()
    }

    /// Blocks until at least `count` threads sleep on this clock (see
    /// [`sleepers`](ManualClock::sleepers)): how a test knows its waiters are in place before it
    /// advances time. Returns false if that did not happen within 10 s of real time.
    pub fn wait_for_sleepers(&self, count: usize) -> bool {
        let limit = Instant::now() + REAL_TIME_LIMIT;
        let mut state = self.inner.state.lock();
        loop {
            let sleeping = state.sleepers.values().filter(|s| s.is_asleep()).count();
            if sleeping >= count {
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

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.inner.base + Duration::from_nanos(self.inner.offset.load(Ordering::SeqCst))
    }

    fn wait(&self, signal: &Arc<Signal>, seen: u64, deadline: Option<Instant>) -> Wake {
        let Some(deadline) = deadline else {
            // Going back to sleep means the work of the previous wake-up is done.
            self.settle();
            return signal.wait_until(seen, None);
        };
        let id = {
            let mut state = self.inner.state.lock();
            let id = state.next_sleeper;
            state.next_sleeper += 1;
            state.sleepers.insert(
                id,
                Sleeper {
                    deadline,
                    signal: signal.clone(),
                    seen,
                    woken_by_advance: false,
                },
            );
            // Settle the previous wake-up in the same step as registering this sleep, so
            // `advance` cannot return in between and miss this deadline.
            let owed = take_unsettled(self.inner.id);
            state.busy = state.busy.saturating_sub(owed);
            self.inner.changed.notify_all();
            id
        };
        let wake = signal.wait_while_before(seen, || self.now() >= deadline);
        let mut state = self.inner.state.lock();
        if state
            .sleepers
            .remove(&id)
            .is_some_and(|sleeper| sleeper.woken_by_advance)
        {
            let _ = UNSETTLED.try_with(|unsettled| {
                unsettled
                    .borrow_mut()
                    .0
                    .entry(self.inner.id)
                    .or_insert_with(|| (Arc::downgrade(&self.inner), 0))
                    .1 += 1;
            });
        }
        self.inner.changed.notify_all();
        wake
    }

    fn settle(&self) {
        let owed = take_unsettled(self.inner.id);
        if owed > 0 {
            self.inner.release_busy(owed);
        }
    }
}

/// Takes the calling thread's unsettled wake-ups by the clock `clock_id`.
fn take_unsettled(clock_id: u64) -> usize {
    UNSETTLED
        .try_with(|unsettled| unsettled.borrow_mut().0.remove(&clock_id))
        .ok()
        .flatten()
        .map_or(0, |(_, owed)| owed)
}

/// Test-support code reports through stderr: it must not pull a logging stack into users' tests.
fn tracing_free_warning(message: &str) {
    eprintln!("dlock ManualClock: {message}");
}
