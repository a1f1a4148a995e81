//! A backend wrapper that injects faults: latency, errors, lost replies, steps that reach the
//! store late or twice, messages held back, one node failing alone.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dlock_core::backend::{
    Acquire, AcquireRequest, Clock, ClockDrift, CounterStep, DistributedLock, Handover, HoldRef,
    Leader, LockRef, LockStatus, OwnerId, Release, ReleaseSubscription, Renewal,
};
use dlock_core::{LockError, LockKind};
use parking_lot::Mutex;

use crate::fault::{Call, Effect, Fault, Op};
use crate::faulty_subscription::{Delivery, FaultySubscription, Relay};
use crate::held_step::{HeldStep, OwnedCounterStep, OwnedHold, OwnedRequest};
use crate::ManualClock;

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
/// use dlocks::testing::{Fault, FaultyBackend, Op};
/// use dlocks::{LockClient, MemoryBackend};
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
    calls: [AtomicU64; 9],
    answered: [AtomicU64; 9],
    observer: Mutex<Option<Observer>>,
    /// The clock delays move, instead of sleeping.
    manual_clock: Option<ManualClock>,
    /// Live subscriptions per lock name, and the most there ever were at once.
    subscriptions: Mutex<HashMap<String, (usize, usize)>>,
    /// Steps and messages kept in the network, in the order they were sent.
    held: Mutex<Vec<Held>>,
}

type Observer = Arc<dyn Fn(&Call) + Send + Sync>;

/// Something kept in the network until [`FaultyBackend::deliver_held`].
enum Held {
    Step(HeldStep),
    /// A message to a subscription; `blocking`: the original (not a duplicate's copy).
    Message {
        relay: Arc<Relay>,
        blocking: bool,
    },
}

/// The effects of the faults matching one call, in the order they were injected.
struct Applied {
    effects: Vec<Effect>,
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
    /// use dlocks::testing::{Fault, FaultyBackend, Op};
    /// use dlocks::{LockClient, ManualClock, MemoryBackend};
    ///
    /// let clock = ManualClock::new();
    /// let faulty = FaultyBackend::with_manual_clock(MemoryBackend::with_clock(clock.clone()), clock.clone());
    /// let client = LockClient::new(faulty.clone());
    /// // The reply of the acquire comes back 10 s late: the 5 s lease is over by then.
    /// faulty.inject(Fault::delay_reply(Op::TryAcquire, Duration::from_secs(10)).times(1));
    /// let guard = client.lock("jobs").lock_with_lease(Duration::from_secs(5))?;
    /// assert!(guard.is_lost());
    /// assert_eq!(clock.elapsed(), Duration::from_secs(10));
    /// # Ok::<(), dlocks::LockError>(())
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
                held: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Adds a fault; faults apply in the order they were added (a delay and an error can both
    /// apply to one call).
    pub fn inject(&self, fault: Fault) {
        self.shared.faults.lock().push(fault);
    }

    /// Removes every fault (steps and messages held back stay held until delivered).
    pub fn clear(&self) {
        self.shared.faults.lock().clear();
    }

    /// Delivers every step and message kept in the network ([`Effect::HoldBack`],
    /// [`Effect::Duplicate`]) to the store, in the order they were sent; returns how many.
    ///
    /// # Examples
    ///
    /// A release that reaches the store only after the thread took the lock again ends
    /// nothing but the hold it was sent for:
    ///
    /// ```
    /// use dlocks::testing::{Effect, Fault, FaultyBackend, Op};
    /// use dlocks::{LockClient, MemoryBackend};
    ///
    /// let store = MemoryBackend::new();
    /// let faulty = FaultyBackend::new(store.clone());
    /// let client = LockClient::new(faulty.clone());
    /// let lock = client.lock("jobs");
    /// faulty.inject(Fault::new(Op::Release, Effect::HoldBack).times(1));
    /// let first = lock.lock_with_lease(std::time::Duration::from_millis(50))?;
    /// assert!(first.unlock().is_err());               // its outcome is unknown to the caller
    /// std::thread::sleep(std::time::Duration::from_millis(60));   // the first lease runs out
    /// let second = lock.lock()?;
    /// assert_eq!(faulty.deliver_held(), 1);            // the old release arrives now
    /// assert!(!second.is_lost() && lock.is_held_by_current_thread()?);
    /// # Ok::<(), dlocks::LockError>(())
    /// ```
    pub fn deliver_held(&self) -> usize {
        let held = std::mem::take(&mut *self.shared.held.lock());
        self.deliver(held)
    }

    /// As [`deliver_held`](Self::deliver_held), newest first: a network that reorders.
    pub fn deliver_held_in_reverse(&self) -> usize {
        let mut held = std::mem::take(&mut *self.shared.held.lock());
        held.reverse();
        self.deliver(held)
    }

    /// How many steps and messages are kept in the network now.
    pub fn held(&self) -> usize {
        self.shared.held.lock().len()
    }

    fn deliver(&self, held: Vec<Held>) -> usize {
        let count = held.len();
        for item in held {
            match item {
                Held::Step(step) => step.deliver(&*self.shared.inner),
                Held::Message { relay, blocking } => relay.deliver_held(blocking),
            }
        }
        count
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

    /// Counts the call, shows it to the observer, and takes the effects of the faults that
    /// match it. `node_names`: for a renewal batch, the names node faults are judged on hold by
    /// hold (they are left to the caller, in the second list).
    fn take_effects(&self, op: Op, names: &[&str]) -> (Applied, Vec<Fault>) {
        self.shared.calls[op.index()].fetch_add(1, Ordering::SeqCst);
        let observer = self.shared.observer.lock().clone();
        if let Some(observer) = observer {
            observer(&Call {
                op,
                names: names.iter().map(|name| (*name).to_owned()).collect(),
                thread: thread::current().id(),
            });
        }
        let mut faults = self.shared.faults.lock();
        let mut effects = Vec::new();
        let mut node_faults = Vec::new();
        for fault in faults.iter_mut().filter(|fault| fault.matches(op, names)) {
            if let Some(times) = &mut fault.times {
                *times -= 1;
            }
            if fault.node && op == Op::Renew {
                node_faults.push(fault.clone());
            } else {
                effects.push(fault.effect);
            }
        }
        faults.retain(|fault| fault.times != Some(0));
        (Applied { effects }, node_faults)
    }

    /// Lets `by` pass: real time, or the manual clock's.
    fn wait(&self, by: Duration) {
        match &self.shared.manual_clock {
            Some(clock) => clock.skip(by),
            None => thread::sleep(by),
        }
    }

    fn hold(&self, step: HeldStep) {
        self.shared.held.lock().push(Held::Step(step));
    }

    /// Runs one call through its faults: `f` makes it on the inner backend; `copy` makes the
    /// request to keep in the network (`None`: a read, lost instead of held).
    fn call<T>(
        &self,
        op: Op,
        names: &[&str],
        copy: impl Fn() -> Option<HeldStep>,
        f: impl FnOnce(&dyn DistributedLock) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        let (applied, _) = self.take_effects(op, names);
        let result = self.run(op, applied, copy, f);
        self.shared.answered[op.index()].fetch_add(1, Ordering::SeqCst);
        result
    }

    fn run<T>(
        &self,
        op: Op,
        applied: Applied,
        copy: impl Fn() -> Option<HeldStep>,
        f: impl FnOnce(&dyn DistributedLock) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        let mut after = Vec::new();
        for effect in applied.effects {
            match effect {
                Effect::Delay(by) => self.wait(by),
                Effect::Fail => return Err(injected(op, "the request was lost")),
                Effect::HoldBack => {
                    if let Some(step) = copy() {
                        self.hold(step);
                    }
                    return Err(injected(op, "the request is held back in the network"));
                }
                other => after.push(other),
            }
        }
        let result = f(&*self.shared.inner);
        for effect in after {
            match effect {
                Effect::DelayReply(by) => self.wait(by),
                Effect::LoseReply => return Err(injected(op, "the reply was lost")),
                Effect::Duplicate => {
                    if let Some(step) = copy() {
                        self.hold(step);
                    }
                }
                _ => {}
            }
        }
        result
    }

    /// What happens to one message to a subscription of `name` (see [`Op::Message`]).
    fn message(&self, name: &str, relay: &Arc<Relay>) -> Delivery {
        let (applied, _) = self.take_effects(Op::Message, &[name]);
        let mut delivery = Delivery::Now;
        for effect in applied.effects {
            delivery = match effect {
                Effect::Fail => Delivery::Lost,
                Effect::HoldBack => Delivery::Held,
                Effect::Duplicate => Delivery::Twice,
                _ => continue,
            };
        }
        match delivery {
            Delivery::Held | Delivery::Twice => {
                self.shared.held.lock().push(Held::Message {
                    relay: relay.clone(),
                    blocking: matches!(delivery, Delivery::Held),
                });
            }
            Delivery::Now | Delivery::Lost => {}
        }
        self.shared.answered[Op::Message.index()].fetch_add(1, Ordering::SeqCst);
        delivery
    }

    /// A renewal batch, with the faults of one node applied to that node's holds alone.
    fn renew_by_node(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
        node_faults: &[Fault],
    ) -> Result<Vec<Renewal>, LockError> {
        // Per hold: the node fault's effect on it, if any (the last one injected).
        let effects: Vec<Option<Effect>> = holds
            .iter()
            .map(|hold| {
                node_faults
                    .iter()
                    .rev()
                    .find(|fault| fault.covers(hold.lock.name))
                    .map(|fault| fault.effect)
            })
            .collect();
        for effect in effects.iter().flatten() {
            if let Effect::Delay(by) = effect {
                // One call: the slowest node makes it slow.
                self.wait(*by);
            }
        }
        let sent: Vec<HoldRef<'_>> = holds
            .iter()
            .zip(&effects)
            .filter(|(_, effect)| !matches!(effect, Some(Effect::Fail | Effect::HoldBack)))
            .map(|(hold, _)| *hold)
            .collect();
        let copies = |matching: &dyn Fn(&Effect) -> bool| -> Vec<OwnedHold> {
            holds
                .iter()
                .zip(&effects)
                .filter(|(_, effect)| effect.as_ref().is_some_and(matching))
                .map(|(hold, _)| OwnedHold::of(hold))
                .collect()
        };
        let later = copies(&|effect| matches!(effect, Effect::HoldBack | Effect::Duplicate));
        if !later.is_empty() {
            self.hold(HeldStep::new(move |store| {
                let refs: Vec<HoldRef<'_>> = later.iter().map(OwnedHold::as_ref).collect();
                let _ = store.renew(&refs, lease);
            }));
        }
        let mut answers = self.shared.inner.renew(&sent, lease)?.into_iter();
        let mut found = Vec::with_capacity(holds.len());
        for effect in &effects {
            found.push(match effect {
                Some(Effect::Fail | Effect::HoldBack) => Renewal::Unanswered,
                Some(Effect::LoseReply) => {
                    let _ = answers.next();
                    Renewal::Unanswered
                }
                _ => answers.next().unwrap_or(Renewal::Unanswered),
            });
        }
        for effect in effects.iter().flatten() {
            if let Effect::DelayReply(by) = effect {
                self.wait(*by);
            }
        }
        Ok(found)
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
        let copy = OwnedRequest::of(request);
        self.call(
            Op::TryAcquire,
            &[request.lock.name],
            || {
                let copy = copy.clone();
                Some(HeldStep::new(move |store| {
                    let _ = copy.with(|request| store.try_acquire(request));
                }))
            },
            |inner| inner.try_acquire(request),
        )
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        self.call(
            Op::Release,
            &[lock.name],
            || {
                let (name, kind, owner) = (lock.name.to_owned(), lock.kind, owner.clone());
                Some(HeldStep::new(move |store| {
                    let _ = store.release(LockRef::new(&name, kind), &owner);
                }))
            },
            |inner| inner.release(lock, owner),
        )
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
        let next = OwnedRequest::of(successor);
        self.call(
            Op::Release,
            &[lock.name],
            || {
                let (name, kind, owner) = (lock.name.to_owned(), lock.kind, owner.clone());
                let next = next.clone();
                Some(HeldStep::new(move |store| {
                    let lock = LockRef::new(&name, kind);
                    let _ = next.with(|successor| store.release_to(lock, &owner, successor));
                }))
            },
            |inner| inner.release_to(lock, owner, successor),
        )
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        let names: Vec<&str> = holds.iter().map(|hold| hold.lock.name).collect();
        let (applied, node_faults) = self.take_effects(Op::Renew, &names);
        let copies: Vec<OwnedHold> = holds.iter().map(OwnedHold::of).collect();
        let result = self.run(
            Op::Renew,
            applied,
            || {
                let copies = copies.clone();
                Some(HeldStep::new(move |store| {
                    let refs: Vec<HoldRef<'_>> = copies.iter().map(OwnedHold::as_ref).collect();
                    let _ = store.renew(&refs, lease);
                }))
            },
            |_| self.renew_by_node(holds, lease, &node_faults),
        );
        self.shared.answered[Op::Renew.index()].fetch_add(1, Ordering::SeqCst);
        result
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        self.call(
            Op::Status,
            &[lock.name],
            || None,
            |inner| inner.status(lock, owner),
        )
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        self.call(
            Op::ForceUnlock,
            &[lock.name],
            || {
                let (name, kind) = (lock.name.to_owned(), lock.kind);
                Some(HeldStep::new(move |store| {
                    let _ = store.force_unlock(LockRef::new(&name, kind));
                }))
            },
            |inner| inner.force_unlock(lock),
        )
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let inner = self.call(
            Op::Subscribe,
            &[lock.name],
            || None,
            |inner| inner.subscribe(lock, owner),
        )?;
        {
            let mut subscriptions = self.shared.subscriptions.lock();
            let (live, peak) = subscriptions.entry(lock.name.to_owned()).or_default();
            *live += 1;
            *peak = (*peak).max(*live);
        }
        let faulty = self.clone();
        let shared = self.shared.clone();
        let (name, counted) = (lock.name.to_owned(), lock.name.to_owned());
        let subscription = FaultySubscription::new(
            inner,
            move |relay| faulty.message(&name, relay),
            move || {
                if let Some((live, _)) = shared.subscriptions.lock().get_mut(&counted) {
                    *live = live.saturating_sub(1);
                }
            },
        )
        .map_err(|error| LockError::thread_spawn("faulty subscription relay", error))?;
        Ok(Box::new(subscription))
    }

    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        self.call(
            Op::CancelWait,
            &[lock.name],
            || {
                let (name, kind, owner) = (lock.name.to_owned(), lock.kind, owner.clone());
                Some(HeldStep::new(move |store| {
                    let _ = store.cancel_wait(LockRef::new(&name, kind), &owner, queue_slot);
                }))
            },
            |inner| inner.cancel_wait(lock, owner, queue_slot),
        )
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.shared.inner.clock()
    }

    fn clock_drift(&self) -> ClockDrift {
        self.shared.inner.clock_drift()
    }

    fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        let copy = OwnedCounterStep::of(&step);
        self.call(
            Op::Counter,
            &[step.name()],
            || {
                let copy = copy.clone()?;
                Some(HeldStep::new(move |store| {
                    let _ = store.counter(copy.as_step());
                }))
            },
            |inner| inner.counter(step),
        )
    }

    /// Passed on as it is, without faults.
    fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        self.shared.inner.leader(lock)
    }
}

impl fmt::Debug for FaultyBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let calls: Vec<(Op, u64)> = Op::ALL.iter().map(|op| (*op, self.calls(*op))).collect();
        f.debug_struct("FaultyBackend")
            .field("faults", &self.shared.faults.lock())
            .field("calls", &calls)
            .field("held", &self.held())
            .finish_non_exhaustive()
    }
}
