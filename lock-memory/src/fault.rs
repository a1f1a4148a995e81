//! What a [`FaultyBackend`](crate::FaultyBackend) does to the calls that pass through it: the
//! steps of the contract ([`Op`]), what a fault does to one ([`Effect`]), and which calls it
//! affects ([`Fault`]).

use std::thread::ThreadId;
use std::time::Duration;

/// One step of the backend contract, as a [`Fault`] or an observer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// [`DistributedLock::try_acquire`](dlock_core::backend::DistributedLock::try_acquire) (and
    /// each attempt of a `try_acquire_many`).
    TryAcquire,
    /// [`DistributedLock::release`](dlock_core::backend::DistributedLock::release), and a
    /// release that hands the lock over.
    Release,
    /// [`DistributedLock::renew`](dlock_core::backend::DistributedLock::renew).
    Renew,
    /// [`DistributedLock::status`](dlock_core::backend::DistributedLock::status).
    Status,
    /// [`DistributedLock::force_unlock`](dlock_core::backend::DistributedLock::force_unlock).
    ForceUnlock,
    /// [`DistributedLock::subscribe`](dlock_core::backend::DistributedLock::subscribe).
    Subscribe,
    /// [`DistributedLock::cancel_wait`](dlock_core::backend::DistributedLock::cancel_wait).
    CancelWait,
    /// [`DistributedLock::counter`](dlock_core::backend::DistributedLock::counter).
    Counter,
    /// A message of the store to a subscription: a release announced, a grant told to its
    /// waiter. [`Effect::Fail`] loses it, [`Effect::HoldBack`] delays it until the held
    /// steps are delivered, [`Effect::Duplicate`] delivers it twice; the others pass it on.
    Message,
}

impl Op {
    pub(crate) const ALL: [Op; 9] = [
        Op::TryAcquire,
        Op::Release,
        Op::Renew,
        Op::Status,
        Op::ForceUnlock,
        Op::Subscribe,
        Op::CancelWait,
        Op::Counter,
        Op::Message,
    ];

    pub(crate) fn index(self) -> usize {
        match self {
            Op::TryAcquire => 0,
            Op::Release => 1,
            Op::Renew => 2,
            Op::Status => 3,
            Op::ForceUnlock => 4,
            Op::Subscribe => 5,
            Op::CancelWait => 6,
            Op::Counter => 7,
            Op::Message => 8,
        }
    }
}

/// What a fault does to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Effect {
    /// Wait this long before passing the call on: a slow network or server. Real time, or on
    /// a backend made with [`FaultyBackend::with_manual_clock`](crate::FaultyBackend::with_manual_clock),
    /// that clock's time.
    Delay(Duration),
    /// Fail with [`LockError::Unavailable`](dlock_core::LockError::Unavailable) without passing
    /// the call on: the request was lost.
    Fail,
    /// Pass the call on, then fail with `Unavailable`: it took effect, but the reply was lost.
    LoseReply,
    /// Pass the call on, then wait this long before returning: a slow reply. Real time, or the
    /// manual clock's (see [`Delay`](Effect::Delay)).
    DelayReply(Duration),
    /// Keep the request in the network: the call fails with `Unavailable` now (its caller
    /// cannot tell whether it took effect), and the request reaches the store later, when the
    /// test calls [`FaultyBackend::deliver_held`](crate::FaultyBackend::deliver_held): a step
    /// delivered after its caller gave up on it, retried it, or went on to its next hold.
    /// A read (a status, a subscription) is lost instead.
    HoldBack,
    /// Pass the call on, and keep a copy of the request in the network, delivered again at
    /// [`FaultyBackend::deliver_held`](crate::FaultyBackend::deliver_held): a step a backend
    /// sent twice (a retry after a lost reply), the second copy arriving late.
    Duplicate,
    /// On a subscription: it is made, but comes back lapsed and hears nothing, as when its
    /// channel moved away before the store confirmed it (a cluster's slot moving while the
    /// waiter subscribed where an older slot map placed it); the waiter must subscribe again.
    /// Other calls pass on.
    Lapse,
}

/// A fault for one operation: what it does, on which locks, how many times.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlocks::testing::{Effect, Fault, Op};
///
/// let slow_subscribe = Fault::delay(Op::Subscribe, Duration::from_secs(2)).on_lock("A");
/// let flaky_renewals = Fault::fail(Op::Renew).times(3);
/// let lost_unlock = Fault::lose_reply(Op::Release).times(1);
/// let late_unlock = Fault::new(Op::Release, Effect::HoldBack).times(1);
/// let one_node_down = Fault::fail(Op::Renew).on_node(["A", "B"]);
/// # let _ = (slow_subscribe, flaky_renewals, lost_unlock, late_unlock, one_node_down);
/// ```
#[derive(Debug, Clone)]
#[must_use = "a fault does nothing until it is injected"]
pub struct Fault {
    pub(crate) op: Op,
    pub(crate) effect: Effect,
    names: Option<Vec<String>>,
    /// The names are one node's of several: a renewal batch is affected for their holds only.
    pub(crate) node: bool,
    /// Calls left to affect; `None`: every call.
    pub(crate) times: Option<u64>,
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
            names: None,
            node: false,
            times: None,
        }
    }

    /// Only calls about the lock `name` (a renewal batch matches if it holds that lock).
    pub fn on_lock(mut self, name: impl Into<String>) -> Self {
        self.names = Some(vec![name.into()]);
        self.node = false;
        self
    }

    /// Only the part of the store that keeps the locks `names`, as one node of a cluster: calls
    /// about them, and, in a renewal batch, their holds alone (a failed one answers
    /// [`Renewal::Unanswered`](dlock_core::backend::Renewal::Unanswered), the others are renewed
    /// as usual).
    pub fn on_node(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.names = Some(names.into_iter().map(Into::into).collect());
        self.node = true;
        self
    }

    /// Only the next `times` matching calls; the fault is gone after that.
    pub fn times(mut self, times: u64) -> Self {
        self.times = Some(times);
        self
    }

    /// Whether it affects a call of `op` about `names` (for a node fault: about any of them).
    pub(crate) fn matches(&self, op: Op, names: &[&str]) -> bool {
        self.op == op
            && self.times != Some(0)
            && self
                .names
                .as_ref()
                .is_none_or(|mine| mine.iter().any(|mine| names.contains(&mine.as_str())))
    }

    /// For a node fault: whether the lock `name` is on its node.
    pub(crate) fn covers(&self, name: &str) -> bool {
        self.names
            .as_ref()
            .is_none_or(|mine| mine.iter().any(|mine| mine == name))
    }
}

/// One call passing through a [`FaultyBackend`](crate::FaultyBackend), as its observer sees it.
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
