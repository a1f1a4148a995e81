//! The fair lock's handle: granted in arrival order across processes.

use std::fmt;

use crate::engine::Handle;
use crate::handles::lock::lock_methods;

/// A handle on the fair lock called [`name`](FairLock::name), from
/// [`LockClient::fair_lock`](crate::LockClient::fair_lock) (Redisson's `RedissonFairLock`).
///
/// The same methods and guarantees as [`Lock`](crate::Lock) (per-thread reentrancy, watchdog
/// or fixed leases, bounded waits, lease events), plus order: waiters queue on the store in the
/// order they arrived, from every process, and a release wakes only the waiter at the head of
/// the queue. A waiter that gives up leaves the queue at once; one whose process dies is
/// dropped from it once its place times out (see
/// [`LockClientBuilder::fair_wait_timeout`](crate::LockClientBuilder::fair_wait_timeout)).
/// On Redis and PostgreSQL a release hands the lock to the head waiter, which has a grant
/// lease ([`GrantOffer::MAX_LEASE`](crate::backend::GrantOffer::MAX_LEASE)) to claim it: a
/// waiter whose process stalls longer than that just then (a pause, an overloaded machine)
/// loses its turn to the next waiter, so the queue does not stand still for it, and queues
/// again at the back.
///
/// A fair lock and a plain [`Lock`](crate::Lock) of the same name are two kinds: a name is
/// one of them at a time ([`LockError::WrongKind`](crate::LockError::WrongKind) for the other),
/// unless the plain lock's client queues its waiters
/// ([`HandOff::Queue`](crate::HandOff::Queue)): its `Lock` is then this lock. (A Redisson
/// client cannot tell the two apart: its `RLock` is held off by a fair lock's holder, without
/// a place in the queue.)
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlocks::{LockClient, MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let (a, b) = (LockClient::new(backend.clone()), LockClient::new(backend));
/// let jobs = a.fair_lock("jobs");
/// let guard = jobs.lock()?;
/// assert!(b.fair_lock("jobs").try_lock_for(Duration::from_millis(5))?.is_none());
/// guard.unlock()?;
/// assert!(b.fair_lock("jobs").try_lock()?.is_some());
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Clone)]
pub struct FairLock {
    pub(crate) handle: Handle,
}

impl FairLock {
    pub(crate) fn new(handle: Handle) -> Self {
        FairLock { handle }
    }

    lock_methods!();
}

impl fmt::Debug for FairLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.handle.name())
            .finish_non_exhaustive()
    }
}
