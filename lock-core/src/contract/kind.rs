//! The kinds of lock a store keeps, and how one operation names its lock.

use std::fmt;
use std::sync::Arc;

/// Which kind of lock an operation is on.
///
/// Kinds share one name space on a store: a name is a plain lock or a fair lock, not both. Every
/// backend step names the kind of lock it acts on ([`LockRef`]), so one acquire / wait / watchdog
/// engine serves every kind and a backend adds a kind by handling it in the same few steps (see
/// [`DistributedLock::supports`](crate::contract::backend::DistributedLock::supports)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// The reentrant exclusive lock ([`Lock`](crate::Lock), Redisson's `RLock`).
    Reentrant,
    /// The fair lock ([`FairLock`](crate::FairLock), Redisson's `RedissonFairLock`): granted
    /// in arrival order across processes, through a queue on the store.
    Fair,
    /// The shared side of a read-write lock ([`ReadLock`](crate::ReadLock)).
    Read,
    /// The exclusive side of a read-write lock ([`WriteLock`](crate::WriteLock)).
    Write,
    /// The reentrant lock with a fencing token per new hold ([`FencedLock`](crate::FencedLock),
    /// Redisson's `RFencedLock`); the same lock as [`Reentrant`](LockKind::Reentrant) on the
    /// store, plus its token counter.
    Fenced,
    /// A permit of a semaphore ([`Semaphore`](crate::Semaphore), Redisson's
    /// `RPermitExpirableSemaphore`): the owner is the permit's id; a hold is one permit, with
    /// its own lease. An acquire takes a permit if one is available, else reports the soonest
    /// a permit's lease ends.
    Semaphore,
    /// A count-down latch ([`CountDownLatch`](crate::CountDownLatch), Redisson's
    /// `RCountDownLatch`). Nothing is held: an acquire answers taken when the count is zero
    /// (the latch is open), held otherwise; waiters are woken when it reaches zero.
    Latch,
    /// The leadership of a leader election ([`LeaderElection`](crate::LeaderElection)): one
    /// holder at a time, never re-entered, each new hold with a fencing token, and the
    /// holder's candidate id kept for everyone to read.
    Election,
}

impl LockKind {
    /// The kind's name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Reentrant => "reentrant lock",
            LockKind::Fair => "fair lock",
            LockKind::Read => "read lock",
            LockKind::Write => "write lock",
            LockKind::Fenced => "fenced lock",
            LockKind::Semaphore => "semaphore",
            LockKind::Latch => "count-down latch",
            LockKind::Election => "leader election",
        }
    }

    /// Waiters queue on the store itself (in arrival order across processes) rather than in
    /// each client's local queue.
    pub fn queues_on_store(self) -> bool {
        self == LockKind::Fair
    }

    /// A waiter of this kind is known to the store while it waits (a fair waiter's place in
    /// the queue; a plain lock's waiter, which takes the lock before the waiters that came
    /// after it; a writer, which holds new readers off; a reader behind a writer's hold, which
    /// goes in before the next writer), and tells the store when it gives up
    /// ([`cancel_wait`](crate::backend::DistributedLock::cancel_wait)).
    pub fn waits_on_store(self) -> bool {
        self.queues_on_store() || self.marks_waiters()
    }

    /// A waiter of this kind that the store refused marks itself there, and its mark lives a
    /// short while after each of its attempts
    /// ([`AcquireRequest::queue_slot`](crate::backend::AcquireRequest::queue_slot)): the
    /// waiter tries again before then, so its mark lives while it waits, and a waiter that
    /// died holds the others up for no longer. The plain locks (reentrant and fenced, which
    /// share a name) and the two sides of a read-write lock.
    pub fn marks_waiters(self) -> bool {
        matches!(
            self,
            LockKind::Reentrant | LockKind::Fenced | LockKind::Read | LockKind::Write
        )
    }

    /// The two sides of a read-write lock, which share one name on the store.
    pub fn is_read_write(self) -> bool {
        matches!(self, LockKind::Read | LockKind::Write)
    }

    /// Every new hold of this kind gets a fencing token ([`Grant::fencing_token`](
    /// crate::contract::backend::Grant::fencing_token)).
    pub fn is_fenced(self) -> bool {
        matches!(self, LockKind::Fenced | LockKind::Election)
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One lock on a store: its name and its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockRef<'a> {
    /// The lock's name.
    pub name: &'a str,
    /// Which lock of that name.
    pub kind: LockKind,
}

impl<'a> LockRef<'a> {
    /// The lock `name` of kind `kind`.
    pub fn new(name: &'a str, kind: LockKind) -> Self {
        LockRef { name, kind }
    }

    /// The reentrant lock `name`.
    pub fn reentrant(name: &'a str) -> Self {
        LockRef::new(name, LockKind::Reentrant)
    }
}

/// The owned form of a [`LockRef`], kept by handles, holds and queues.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Target {
    pub(crate) name: Arc<str>,
    pub(crate) kind: LockKind,
}

impl Target {
    pub(crate) fn new(name: Arc<str>, kind: LockKind) -> Self {
        Target { name, kind }
    }

    pub(crate) fn as_ref(&self) -> LockRef<'_> {
        LockRef::new(&self.name, self.kind)
    }
}
