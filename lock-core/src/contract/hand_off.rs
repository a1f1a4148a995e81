//! How a plain lock passes from one holder to the next (a race among its waiters, or the
//! store's queue), and the kind that makes it on the store.

use crate::contract::kind::LockKind;

/// How a client's plain [`Lock`](crate::Lock)s pass from a holder to a waiter, chosen with
/// [`LockClientBuilder::lock_hand_off`](crate::LockClientBuilder::lock_hand_off).
///
/// Every client of a name must use the same choice: the two are different locks on the store,
/// and a client of the other choice is refused the name with
/// [`LockError::WrongKind`](crate::LockError::WrongKind) while it is in use, never let in.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlocks::{HandOff, LockClient, LockError, MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let queued = |backend: &MemoryBackend| {
///     LockClient::builder(backend.clone()).lock_hand_off(HandOff::Queue).build()
/// };
/// let (a, b) = (queued(&backend)?, queued(&backend)?);
/// let guard = a.lock("jobs").lock()?;
/// assert!(b.lock("jobs").try_lock_for(Duration::from_millis(5))?.is_none());
/// // A client that races for the name is refused it: the name is queued.
/// let racing = LockClient::new(backend).lock("jobs");
/// assert!(matches!(racing.try_lock(), Err(LockError::WrongKind { .. })));
/// guard.unlock()?;
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HandOff {
    /// A release tells every waiter the lock is free, and they ask again (Redisson's
    /// `RLock`). On a store that keeps the waiters in turn
    /// ([`keeps_turns`](crate::backend::DistributedLock::keeps_turns): the memory backend,
    /// Redis, PostgreSQL and etcd), a waiter the store refused marks itself there, and a free
    /// lock goes to the waiter marked first: whoever else asks, a process that did not wait
    /// included, is refused while that waiter's mark lives (it renews it with each try, and it
    /// lapses 2 s after a waiter that died). A waiter so waits for at most the holds of those
    /// marked before it. A client's threads queue among themselves, and the one at the head of
    /// its queue is the one marked. Every waiter still wakes at each release and asks, and the
    /// hand-off waits for the first one's try among theirs: between processes it costs more
    /// than [`Queue`](HandOff::Queue)'s, which wakes one waiter. On a RedLock quorum, whose
    /// nodes would each keep an order of their own, whoever asks first takes a free lock.
    ///
    /// Redisson's `RLock` clients share such a lock, and ignore the marks: one takes the lock
    /// whenever it finds it free, whoever waits.
    #[default]
    Race,
    /// Waiters queue on the store in the order they arrived, from every process, and the
    /// store's release step grants the lock to the head of the queue and wakes only it, which
    /// claims the lock in a step of its own: no process waits while another that came later
    /// takes the lock, and a release wakes one process. The lock is the
    /// [`FairLock`](crate::FairLock) of the name, on every backend (a `Lock` and a `FairLock`
    /// of the name are then one lock), with its layout: on Redis, Redisson's
    /// `RedissonFairLock`. A Redisson `RFairLock` queues with dlock's waiters; a Redisson
    /// `RLock` on the same name is held off by a holder but does not queue (it takes the lock
    /// when it finds it free, as it does against Redisson's own fair lock). On etcd, etcd's
    /// `concurrency.Mutex` queue: `etcdctl lock` and Go `Mutex` contenders queue with dlock's
    /// waiters, each served in the order it came.
    ///
    /// A waiter whose process dies holds the queue up for seconds, whatever lease it asked
    /// for: on Redis and PostgreSQL for a grant lease (at most 2 s: the release grants it the
    /// lock, and the grant runs out unclaimed); on etcd, where the release is the next
    /// waiter's turn (its place becomes the first key), until its place's lease ends, which
    /// its process kept alive: about 3.5 s. On Redis, a Redisson
    /// client's waiter, which takes no grants, holds it until its place times out (Redisson's
    /// `threadWaitTime`, 5 minutes by default).
    Queue,
}

impl HandOff {
    /// The kind a plain lock is on the store with this hand-off.
    pub(crate) fn plain_lock_kind(self) -> LockKind {
        match self {
            HandOff::Race => LockKind::Reentrant,
            HandOff::Queue => LockKind::Fair,
        }
    }
}
