//! A backend wrapper that injects faults: latency, errors and lost replies, per operation.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, ThreadId};
use std::time::Duration;

use lock_core::backend::{
    Acquire, AcquireRequest, Clock, ClockDrift, CounterStep, DistributedLock, Handover, HoldRef,
    Leader, LockRef, LockStatus, OwnerId, Release, ReleaseSubscription, Renewal, Signal,
};
use lock_core::{LockError, LockKind};
use parking_lot::Mutex;

use crate::ManualClock;

/// One step of the backend contract, as a [`Fault`] or an observer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// [`DistributedLock::try_acquire`].
    TryAcquire,
    /// [`DistributedLock::release`].
    Release,
    /// [`DistributedLock::renew`].
    Renew,
    /// [`DistributedLock::status`].
    Status,
    /// [`DistributedLock::force_unlock`].
    ForceUnlock,
    /// [`DistributedLock::subscribe`].
    Subscribe,
}

impl Op {
    const ALL: [Op; 6] = [
        Op::TryAcquire,
        Op::Release,
        Op::Renew,
        Op::Status,
        Op::ForceUnlock,
        Op::Subscribe,
    ];

    fn index(self) -> usize {
        match self {
            Op::TryAcquire => 0,
            Op::Release => 1,
            Op::Renew => 2,
            Op::Status => 3,
            Op::ForceUnlock => 4,
            Op::Subscribe => 5,
        }
    }
}

/// What a fault does to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Effect {
    /// Wait this long before passing the call on: a slow network or server. Real time, or on
    /// a backend made with [`FaultyBackend::with_manual_clock`], that clock's time.
    Delay(Duration),
    /// Fail with [`LockError::Unavailable`] without passing the call on: the request was lost.
    Fail,
    /// Pass the call on, then fail with [`LockError::Unavailable`]: it took effect, but the
    /// reply was lost.
    LoseReply,
    /// Pass the call on, then wait this long before returning: a slow reply. Real time, or the
    /// manual clock's (see [`Delay`](Effect::Delay)).
    DelayReply(Duration),
}

/// A fault for one operation: what it does, on which lock, how many times.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlock::testing::{Fault, Op};
///
/// let slow_subscribe = Fault::delay(Op::Subscribe, Duration::from_secs(2)).on_lock("A");
/// let flaky_renewals = Fault::fail(Op::Renew).times(3);
/// let lost_unlock = Fault::lose_reply(Op::Release).times(1);
/// # let _ = (slow_subscribe, flaky_renewals, lost_unlock);
/// ```
#[derive(Debug, Clone)]
#[must_use = "a fault does nothing until it is injected"]
pub struct Fault {
    op: Op,
    effect: Effect,
    name: Option<String>,
    /// Calls left to affect; `None`: every call.
    times: Option<u64>,
}

impl Fault {
    /// Every matching call is delayed by `by` before it reaches the backend.
    pub fn delay(op: Op, by: Duration) -> Self {
        Fault::new(op, Effect::Delay(by))
    }

    /// Every matching call fails without reaching the backend.
    pub fn fail(op: Op) -> Self {
        Fault::new(op, Effect::Fail)
    }

    /// Every matching call reaches the backend, and its reply is lost.
    pub fn lose_reply(op: Op) -> Self {
        Fault::new(op, Effect::LoseReply)
    }

    /// Every matching call reaches the backend, and its reply comes `by` late.
    pub fn delay_reply(op: Op, by: Duration) -> Self {
        Fault::new(op, Effect::DelayReply(by))
    }

    /// A fault of any effect.
    pub fn new(op: Op, effect: Effect) -> Self {
        Fault {
            op,
            effect,
            name: None,
            times: None,
        }
    }

    /// Only calls about the lock `name` (a renewal batch matches if it holds that lock).
    pub fn on_lock(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Only the next `times` matching calls; the fault is gone after that.
    pub fn times(mut self, times: u64) -> Self {
        self.times = Some(times);
        self
    }

    fn matches(&self, op: Op, names: &[&str]) -> bool {
        self.op == op
            && self.times != Some(0)
            && self
                .name
                .as_deref()
                .is_none_or(|name| names.contains(&name))
    }
}

/// One call passing through a [`FaultyBackend`], as its observer sees it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Call {
    /// The operation.
    pub op: Op,
    /// The locks it is about (one, or a renewal's batch).
    pub names: Vec<String>,
    /// The calling thread.
    pub thread: ThreadId,
}

type Observer = Arc<dyn Fn(&Call) + Send + Sync>;

/// A backend that passes every call to another one, injecting the [`Fault`]s it is given.
///
/// For tests of what lock-using code does when the store is slow, failing or losing replies;
/// any backend can be inside (the memory backend, Redis). Delays are real time, whatever the
/// inner backend's clock, unless the backend is made with
/// [`with_manual_clock`](FaultyBackend::with_manual_clock): then a delay moves that clock on
/// instead ([`ManualClock::skip`]), as a call stalled that long would find time moved.
/// Clones share the faults and the counters.
///
/// # Examples
///
/// ```
/// use dlock::testing::{Fault, FaultyBackend, Op};
/// use dlock::{LockClient, MemoryBackend};
///
/// let faulty = FaultyBackend::new(MemoryBackend::new());
/// let client = LockClient::new(faulty.clone());
/// faulty.inject(Fault::fail(Op::TryAcquire).times(1));
/// let error = client.lock("jobs").lock().unwrap_err();
/// assert!(error.is_unavailable());
/// assert!(client.lock("jobs").lock().is_ok());      // the fault was used up
/// assert_eq!(faulty.calls(Op::TryAcquire), 2);
/// ```
#[derive(Clone)]
pub struct FaultyBackend {
    shared: Arc<Shared>,
}

struct Shared {
    inner: Arc<dyn DistributedLock>,
    faults: Mutex<Vec<Fault>>,
    calls: [AtomicU64; 6],
    answered: [AtomicU64; 6],
    observer: Mutex<Option<Observer>>,
    /// The clock delays move, instead of sleeping.
    manual_clock: Option<ManualClock>,
    /// Live subscriptions per lock name, and the most there ever were at once.
    subscriptions: Mutex<HashMap<String, (usize, usize)>>,
}

impl FaultyBackend {
    /// Wraps `inner`, with no faults yet.
    pub fn new(inner: impl DistributedLock) -> Self {
        Self::wrap(inner, None)
    }

    /// Wraps `inner`, whose clock is `clock`: a delay moves `clock` on by its length
    /// ([`ManualClock::skip`]) instead of sleeping, so a test of a slow network stays exact and
    /// takes no real time. What falls due meanwhile runs late, at the clock's next `advance`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlock::testing::{Fault, FaultyBackend, Op};
    /// use dlock::{LockClient, ManualClock, MemoryBackend};
    ///
    /// let clock = ManualClock::new();
    /// let faulty = FaultyBackend::with_manual_clock(MemoryBackend::with_clock(clock.clone()), clock.clone());
    /// let client = LockClient::new(faulty.clone());
    /// // The reply of the acquire comes back 10 s late: the 5 s lease is over by then.
    /// faulty.inject(Fault::delay_reply(Op::TryAcquire, Duration::from_secs(10)).times(1));
    /// let guard = client.lock("jobs").lock_with_lease(Duration::from_secs(5))?;
    /// assert!(guard.is_lost());
    /// assert_eq!(clock.elapsed(), Duration::from_secs(10));
    /// # Ok::<(), dlock::LockError>(())
    /// ```
    pub fn with_manual_clock(inner: impl DistributedLock, clock: ManualClock) -> Self {
        Self::wrap(inner, Some(clock))
    }

    fn wrap(inner: impl DistributedLock, manual_clock: Option<ManualClock>) -> Self {
        FaultyBackend {
            shared: Arc::new(Shared {
                inner: Arc::new(inner),
                faults: Mutex::new(Vec::new()),
                calls: Default::default(),
                answered: Default::default(),
                observer: Mutex::new(None),
                manual_clock,
                subscriptions: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Adds a fault; faults apply in the order they were added (a delay and an error can both
    /// apply to one call).
    pub fn inject(&self, fault: Fault) {
        self.shared.faults.lock().push(fault);
    }

    /// Removes every fault.
    pub fn clear(&self) {
        self.shared.faults.lock().clear();
    }

    /// How many calls of `op` have been made (whether a fault affected them or not).
    pub fn calls(&self, op: Op) -> u64 {
        self.shared.calls[op.index()].load(Ordering::SeqCst)
    }

    /// How many calls of `op` have returned to their caller, whatever they returned.
    pub fn answered(&self, op: Op) -> u64 {
        self.shared.answered[op.index()].load(Ordering::SeqCst)
    }

    /// Calls `observer` with every call, on the calling thread, before faults apply.
    pub fn observe(&self, observer: impl Fn(&Call) + Send + Sync + 'static) {
        *self.shared.observer.lock() = Some(Arc::new(observer));
    }

    /// The most subscriptions to the lock `name` that were alive at once through this wrapper.
    pub fn peak_subscriptions(&self, name: &str) -> usize {
        self.shared
            .subscriptions
            .lock()
            .get(name)
            .map_or(0, |(_, peak)| *peak)
    }

    /// Counts the call, shows it to the observer, and applies the faults that come before the
    /// call reaches the inner backend. Returns the faults to apply after it.
    fn before(&self, op: Op, names: &[&str]) -> Result<Vec<Effect>, LockError> {
        self.shared.calls[op.index()].fetch_add(1, Ordering::SeqCst);
        let observer = self.shared.observer.lock().clone();
        if let Some(observer) = observer {
            observer(&Call {
                op,
                names: names.iter().map(|name| (*name).to_owned()).collect(),
                thread: thread::current().id(),
            });
        }
        let effects: Vec<Effect> = {
            let mut faults = self.shared.faults.lock();
            let effects = faults
                .iter_mut()
                .filter(|fault| fault.matches(op, names))
                .map(|fault| {
                    if let Some(times) = &mut fault.times {
                        *times -= 1;
                    }
                    fault.effect
                })
                .collect();
            faults.retain(|fault| fault.times != Some(0));
            effects
        };
        let mut after = Vec::new();
        for effect in effects {
            match effect {
                Effect::Delay(by) => self.wait(by),
                Effect::Fail => return Err(injected(op, "the request was lost")),
                other => after.push(other),
            }
        }
        Ok(after)
    }

    /// Lets `by` pass: real time, or the manual clock's.
    fn wait(&self, by: Duration) {
        match &self.shared.manual_clock {
            Some(clock) => clock.skip(by),
            None => thread::sleep(by),
        }
    }

    /// Applies the faults that come after the inner backend answered.
    fn after<T>(
        &self,
        op: Op,
        effects: Vec<Effect>,
        result: Result<T, LockError>,
    ) -> Result<T, LockError> {
        for effect in effects {
            match effect {
                Effect::DelayReply(by) => self.wait(by),
                Effect::LoseReply => return Err(injected(op, "the reply was lost")),
                _ => {}
            }
        }
        result
    }

    fn call<T>(
        &self,
        op: Op,
        names: &[&str],
        f: impl FnOnce(&dyn DistributedLock) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        let result = self.before(op, names).and_then(|after| {
            let result = f(&*self.shared.inner);
            self.after(op, after, result)
        });
        self.shared.answered[op.index()].fetch_add(1, Ordering::SeqCst);
        result
    }
}

fn injected(op: Op, what: &str) -> LockError {
    LockError::unavailable(
        format!("fault injected into {op:?}: {what}"),
        "FaultyBackend",
    )
}

impl DistributedLock for FaultyBackend {
    fn supports(&self, kind: LockKind) -> bool {
        self.shared.inner.supports(kind)
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        self.call(Op::TryAcquire, &[request.lock.name], |inner| {
            inner.try_acquire(request)
        })
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        self.call(Op::Release, &[lock.name], |inner| {
            inner.release(lock, owner)
        })
    }

    fn hands_over(&self, kind: LockKind) -> bool {
        self.shared.inner.hands_over(kind)
    }

    /// A release that hands the lock over meets the faults of [`Op::Release`].
    fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        self.call(Op::Release, &[lock.name], |inner| {
            inner.release_to(lock, owner, successor)
        })
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        let names: Vec<&str> = holds.iter().map(|hold| hold.lock.name).collect();
        self.call(Op::Renew, &names, |inner| inner.renew(holds, lease))
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        self.call(Op::Status, &[lock.name], |inner| inner.status(lock, owner))
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        self.call(Op::ForceUnlock, &[lock.name], |inner| {
            inner.force_unlock(lock)
        })
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let inner = self.call(Op::Subscribe, &[lock.name], |inner| {
            inner.subscribe(lock, owner)
        })?;
        {
            let mut subscriptions = self.shared.subscriptions.lock();
            let (live, peak) = subscriptions.entry(lock.name.to_owned()).or_default();
            *live += 1;
            *peak = (*peak).max(*live);
        }
        Ok(Box::new(CountedSubscription {
            shared: self.shared.clone(),
            name: lock.name.to_owned(),
            inner,
        }))
    }

    /// Passed on as it is, without faults: a waiter that gives up leaves the queue.
    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        self.shared.inner.cancel_wait(lock, owner, queue_slot)
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.shared.inner.clock()
    }

    fn clock_drift(&self) -> ClockDrift {
        self.shared.inner.clock_drift()
    }

    /// Passed on as it is, without faults.
    fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        self.shared.inner.counter(step)
    }

    /// Passed on as it is, without faults.
    fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        self.shared.inner.leader(lock)
    }
}

/// A subscription through the wrapper, counted while it lives.
struct CountedSubscription {
    shared: Arc<Shared>,
    name: String,
    inner: Box<dyn ReleaseSubscription>,
}

impl ReleaseSubscription for CountedSubscription {
    fn signal(&self) -> &Arc<Signal> {
        self.inner.signal()
    }

    fn granted(&self, attempt: u64) -> bool {
        self.inner.granted(attempt)
    }

    fn lapsed(&self) -> bool {
        self.inner.lapsed()
    }
}

impl Drop for CountedSubscription {
    fn drop(&mut self) {
        if let Some((live, _)) = self.shared.subscriptions.lock().get_mut(&self.name) {
            *live = live.saturating_sub(1);
        }
    }
}

impl fmt::Debug for FaultyBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let calls: Vec<(Op, u64)> = Op::ALL.iter().map(|op| (*op, self.calls(*op))).collect();
        f.debug_struct("FaultyBackend")
            .field("faults", &self.shared.faults.lock())
            .field("calls", &calls)
            .finish_non_exhaustive()
    }
}
