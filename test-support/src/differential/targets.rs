//! The backends a differential run holds to the model: one behind the tests' TCP proxy (a real
//! server whose network cuts replies and holds requests up), or one whose calls meet
//! `FaultyBackend`'s faults (the in-process store on a manual clock, or a server topology the
//! proxy cannot stand in front of).

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_protocol_model::Step;
use dlocks::backend::DistributedLock;
use dlocks::testing::{Effect, Fault as Injected, FaultyBackend, ManualClock, Op};
use parking_lot::Mutex;

use super::{Fault, Target};
use crate::tcp_proxy::TcpProxy;

/// A real server's backend reached through `proxy`, on real time.
pub struct ProxyTarget {
    name: &'static str,
    backend: Arc<dyn DistributedLock>,
    proxy: Arc<TcpProxy>,
    start: Instant,
    short_lease: Duration,
    /// What a step's request carries on the wire (every one of these), from its lock's name.
    needles: Needles,
    /// Whether the store may drop a request held up (see [`Target::may_lose_held`]).
    loses_held: bool,
    /// How the requests held up are delivered so that they meet on the store, if the store
    /// can make them (see [`ProxyTarget::delivering_through`]).
    delivery: Option<Delivery>,
    /// What was armed for the step under way: the fault, and the proxy's count before it.
    armed: Mutex<Option<(Fault, usize)>>,
}

impl ProxyTarget {
    /// `backend` connects to the server through `proxy`; short leases last `short_lease`.
    pub fn new(
        name: &'static str,
        backend: Arc<dyn DistributedLock>,
        proxy: Arc<TcpProxy>,
        short_lease: Duration,
    ) -> Self {
        ProxyTarget {
            name,
            backend,
            proxy,
            start: Instant::now(),
            short_lease,
            needles: Box::new(|name| vec![name.to_owned()]),
            loses_held: false,
            delivery: None,
            armed: Mutex::new(None),
        }
    }

    /// The same, for a store whose requests carry a lock's name otherwise than as its bytes,
    /// or whose steps send requests before the one that acts (etcd's gateway: keys in base64,
    /// reads before a transaction that writes): `needles` makes from the lock's name what the
    /// step's own request, and no other, contains (every one of them).
    pub fn with_needles(
        mut self,
        needles: impl Fn(&str) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.needles = Box::new(needles);
        self
    }

    /// The same, for a store that may drop a request held up whose client gave up on it
    /// meanwhile (see [`Target::may_lose_held`]).
    pub fn losing_held_requests(mut self) -> Self {
        self.loses_held = true;
        self
    }

    /// The same, for a store that can make the requests delivered together meet: `delivery`
    /// is given how many requests are held up and the proxy's delivery, and runs that so the
    /// requests reach the store's locks together (PostgreSQL: while the names' rows are held,
    /// so that each has done what it does before it takes them when the first goes on). A
    /// step that looks before it locks then meets the others at every delivery, not once in
    /// hundreds of sequences.
    pub fn delivering_through(
        mut self,
        delivery: impl Fn(usize, &(dyn Fn() -> usize + Sync)) -> usize + Send + Sync + 'static,
    ) -> Self {
        self.delivery = Some(Box::new(delivery));
        self
    }
}

/// What a step's request contains, from its lock's name.
type Needles = Box<dyn Fn(&str) -> Vec<String> + Send + Sync>;

/// A delivery of held requests that makes them meet on the store (see
/// [`ProxyTarget::delivering_through`]).
type Delivery = Box<dyn Fn(usize, &(dyn Fn() -> usize + Sync)) -> usize + Send + Sync>;

impl Target for ProxyTarget {
    fn name(&self) -> &'static str {
        self.name
    }

    fn backend(&self) -> Arc<dyn DistributedLock> {
        self.backend.clone()
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn wait(&self, by: Duration) {
        std::thread::sleep(by);
    }

    fn arm(&self, fault: Fault, _step: &Step, name: &str) -> bool {
        let needles = (self.needles)(name);
        let needles: Vec<&str> = needles.iter().map(String::as_str).collect();
        let before = match fault {
            Fault::CutReply => {
                let before = self.proxy.cuts();
                self.proxy.cut_reply_to_all(&needles);
                before
            }
            Fault::HoldBack => {
                let before = self.proxy.held_back();
                self.proxy.hold_back_next_all(&needles);
                before
            }
        };
        *self.armed.lock() = Some((fault, before));
        true
    }

    fn fired(&self) -> bool {
        let armed = self.armed.lock().take();
        self.proxy.stop_cutting();
        self.proxy.stop_holding_back();
        match armed {
            Some((Fault::CutReply, before)) => self.proxy.cuts() > before,
            Some((Fault::HoldBack, before)) => self.proxy.held_back() > before,
            None => false,
        }
    }

    fn deliver(&self) -> usize {
        let deliver = || self.proxy.deliver_held();
        match &self.delivery {
            Some(delivery) => delivery(self.proxy.held_back(), &deliver),
            None => deliver(),
        }
    }

    fn may_lose_held(&self) -> bool {
        self.loses_held
    }

    fn lingering(&self) -> Duration {
        self.backend
            .inspection()
            .map_or(Duration::ZERO, |inspection| inspection.lease_resolution())
    }

    fn slack(&self) -> Duration {
        // A real server's clock and this process's are read apart; PEXPIRE rounds up to ms.
        Duration::from_millis(5)
    }

    fn short_lease(&self) -> Duration {
        self.short_lease
    }
}

/// A backend whose calls meet `FaultyBackend`'s faults: a reply lost after the step, a step
/// held up and delivered later. On a manual clock (the in-process store) time moves only when
/// a sequence waits.
pub struct FaultyTarget {
    name: &'static str,
    faulty: FaultyBackend,
    clock: Option<ManualClock>,
    start: Instant,
    short_lease: Duration,
    armed: Mutex<Option<(Op, u64)>>,
}

impl FaultyTarget {
    /// `backend` behind `FaultyBackend`, on real time; short leases last `short_lease`.
    pub fn new(
        name: &'static str,
        backend: Arc<dyn DistributedLock>,
        short_lease: Duration,
    ) -> Self {
        FaultyTarget {
            name,
            faulty: FaultyBackend::new(backend),
            clock: None,
            start: Instant::now(),
            short_lease,
            armed: Mutex::new(None),
        }
    }

    /// The in-process store on a manual clock.
    pub fn in_process(name: &'static str) -> Self {
        let clock = ManualClock::new();
        let memory = dlocks::testing::MemoryBackend::with_clock(clock.clone());
        FaultyTarget {
            name,
            faulty: FaultyBackend::with_manual_clock(memory, clock.clone()),
            clock: Some(clock),
            start: Instant::now(),
            short_lease: Duration::from_secs(1),
            armed: Mutex::new(None),
        }
    }
}

/// The `FaultyBackend` operation a step is.
fn op_of(step: &Step) -> Option<Op> {
    Some(match step {
        Step::Acquire(_) => Op::TryAcquire,
        Step::Release { .. } | Step::ReleaseTo { .. } => Op::Release,
        Step::Renew { .. } => Op::Renew,
        Step::Status { .. } => Op::Status,
        Step::ForceUnlock { .. } => Op::ForceUnlock,
        Step::Counter { .. } => Op::Counter,
        Step::CancelWait { .. } => Op::CancelWait,
        Step::Leader { .. } => return None,
    })
}

impl Target for FaultyTarget {
    fn name(&self) -> &'static str {
        self.name
    }

    fn backend(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.faulty.clone())
    }

    fn now(&self) -> Duration {
        match &self.clock {
            Some(clock) => clock.elapsed(),
            None => self.start.elapsed(),
        }
    }

    fn wait(&self, by: Duration) {
        match &self.clock {
            Some(clock) => clock.advance(by),
            None => std::thread::sleep(by),
        }
    }

    fn arm(&self, fault: Fault, step: &Step, needle: &str) -> bool {
        let Some(op) = op_of(step) else {
            return false;
        };
        let effect = match fault {
            Fault::CutReply => Effect::LoseReply,
            Fault::HoldBack => Effect::HoldBack,
        };
        *self.armed.lock() = Some((op, self.faulty.calls(op)));
        self.faulty
            .inject(Injected::new(op, effect).on_lock(needle).times(1));
        true
    }

    fn fired(&self) -> bool {
        let armed = self.armed.lock().take();
        self.faulty.clear();
        armed.is_some_and(|(op, before)| self.faulty.calls(op) > before)
    }

    fn deliver(&self) -> usize {
        self.faulty.deliver_held()
    }

    fn slack(&self) -> Duration {
        match &self.clock {
            Some(_) => Duration::ZERO,
            None => Duration::from_millis(5),
        }
    }

    fn short_lease(&self) -> Duration {
        self.short_lease
    }
}
