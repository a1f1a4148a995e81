//! A backend wrapper that injects faults: latency, errors, lost replies, steps that reach the
//! store late or twice, messages held back, one node failing alone.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use dlock_core::backend::DistributedLock;
use parking_lot::Mutex;

use crate::fault::{Call, Effect, Fault, Op};
use crate::faulty_subscription::Relay;
use crate::held_step::HeldStep;
use crate::ManualClock;

mod injection;
mod steps;

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
/// let error = client.lock("jobs").try_lock().unwrap_err(); // one try (`lock()` would try again)
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
    /// The relays of the subscriptions made through this wrapper.
    relays: Mutex<Vec<Weak<Relay>>>,
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
                relays: Mutex::new(Vec::new()),
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
        self.relay_sent_messages();
        let held = std::mem::take(&mut *self.shared.held.lock());
        self.deliver(held)
    }

    /// As [`deliver_held`](Self::deliver_held), newest first: a network that reorders.
    pub fn deliver_held_in_reverse(&self) -> usize {
        self.relay_sent_messages();
        let mut held = std::mem::take(&mut *self.shared.held.lock());
        held.reverse();
        self.deliver(held)
    }

    /// How many steps and messages are kept in the network now.
    pub fn held(&self) -> usize {
        self.relay_sent_messages();
        self.shared.held.lock().len()
    }

    /// Decides now every message the store has sent to a live subscription (a relay's thread
    /// may not have run yet): what the network holds back includes every message sent so far.
    fn relay_sent_messages(&self) {
        let relays: Vec<Arc<Relay>> = {
            let mut relays = self.shared.relays.lock();
            relays.retain(|relay| relay.strong_count() > 0);
            relays.iter().filter_map(Weak::upgrade).collect()
        };
        for relay in relays {
            relay.relay_sent();
        }
    }

    /// Keeps `relay` among those whose messages [`relay_sent_messages`](Self::relay_sent_messages) decides.
    fn track_relay(&self, relay: &Arc<Relay>) {
        self.shared.relays.lock().push(Arc::downgrade(relay));
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
