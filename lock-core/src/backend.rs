//! The contract every storage backend implements.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::owner::OwnerId;
use crate::signal::Signal;
use crate::LockError;

/// What a single acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Acquire {
    /// The owner now holds the lock (it was free, or the owner already held it) with the
    /// requested lease.
    Acquired,
    /// Another owner holds the lock; its remaining lease, when the backend knows one.
    Held {
        /// Time until the holder's lease ends, as seen by the backend (`None`: no expiry).
        remaining_lease: Option<Duration>,
    },
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The owner's hold was removed and waiters were woken.
    Released,
    /// The owner did not hold the lock (its lease had expired, it was force-unlocked, or
    /// another owner holds it). Nothing was changed.
    NotHeld,
}

/// A snapshot of one lock, as the backend sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// Some owner holds the lock.
    pub locked: bool,
    /// The owner asked about holds it.
    pub held_by_owner: bool,
    /// The holder's remaining lease (`None` when the lock is free or has no expiry).
    pub remaining_lease: Option<Duration>,
}

impl LockStatus {
    /// The status of a lock nobody holds.
    pub const FREE: LockStatus = LockStatus {
        locked: false,
        held_by_owner: false,
        remaining_lease: None,
    };

    /// The status of a lock that is held.
    pub fn held(held_by_owner: bool, remaining_lease: Option<Duration>) -> Self {
        LockStatus {
            locked: true,
            held_by_owner,
            remaining_lease,
        }
    }
}

/// One hold to renew in a batch: the lock's name and its owner.
#[derive(Debug, Clone, Copy)]
pub struct HoldRef<'a> {
    /// The lock's name.
    pub name: &'a str,
    /// The owner whose lease is to be extended.
    pub owner: &'a OwnerId,
}

/// A backend's registration of interest in one lock's releases.
///
/// While it is alive, every release of the lock (by any client, in any process the backend can
/// see) notifies [`signal`](ReleaseSubscription::signal). Dropping it ends the interest.
pub trait ReleaseSubscription: Send {
    /// The signal notified on each release of the lock.
    fn signal(&self) -> &Arc<Signal>;
}

/// A lock store: the small set of atomic operations the client's algorithm is built on.
///
/// Every method is one atomic step on the store (one round trip on a networked backend). The
/// client does the rest: per-thread reentrancy, waiting, watchdog renewal and loss detection.
/// Names passed in have been checked against [`MAX_NAME_LEN`](crate::MAX_NAME_LEN), leases
/// against [`validate_lease`](crate::validate_lease).
///
/// Implementations must be safe to call from many threads at once, and every call must return
/// within the backend's own timeouts: an unreachable store is an [`LockError::Unavailable`]
/// error, never a hang.
pub trait DistributedLock: Send + Sync + 'static {
    /// Takes `name` for `owner` if it is free or already held by `owner`, and sets its lease to
    /// `lease` from now. Otherwise reports the holder's remaining lease.
    fn try_acquire(
        &self,
        name: &str,
        owner: &OwnerId,
        lease: Duration,
    ) -> Result<Acquire, LockError>;

    /// Removes `owner`'s hold on `name` entirely (whatever its count on the store) and wakes the
    /// lock's waiters. A release the backend retries after a lost reply must not act twice.
    fn release(&self, name: &str, owner: &OwnerId) -> Result<Release, LockError>;

    /// Extends each hold that its owner still has to `lease` from now, in one step for the whole
    /// batch. Returns, in order, whether each hold was still there (`false`: it is gone and was
    /// not brought back).
    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<bool>, LockError>;

    /// Reports whether `name` is held, whether `owner` holds it, and the remaining lease.
    fn status(&self, name: &str, owner: &OwnerId) -> Result<LockStatus, LockError>;

    /// Deletes `name` whoever holds it and wakes its waiters. Returns whether it was held.
    fn force_unlock(&self, name: &str) -> Result<bool, LockError>;

    /// Starts listening for releases of `name`. The client subscribes *before* retrying an
    /// acquire that found the lock held, so a release in between is not missed.
    fn subscribe(&self, name: &str) -> Result<Box<dyn ReleaseSubscription>, LockError>;

    /// The clock this backend measures leases on; the client measures waits and watchdog ticks
    /// on the same one.
    fn clock(&self) -> Arc<dyn Clock> {
        Arc::new(SystemClock)
    }
}

/// A shared backend is a backend: several clients can use one `Arc<dyn DistributedLock>`.
impl<T: DistributedLock + ?Sized> DistributedLock for Arc<T> {
    fn try_acquire(
        &self,
        name: &str,
        owner: &OwnerId,
        lease: Duration,
    ) -> Result<Acquire, LockError> {
        (**self).try_acquire(name, owner, lease)
    }

    fn release(&self, name: &str, owner: &OwnerId) -> Result<Release, LockError> {
        (**self).release(name, owner)
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<bool>, LockError> {
        (**self).renew(holds, lease)
    }

    fn status(&self, name: &str, owner: &OwnerId) -> Result<LockStatus, LockError> {
        (**self).status(name, owner)
    }

    fn force_unlock(&self, name: &str) -> Result<bool, LockError> {
        (**self).force_unlock(name)
    }

    fn subscribe(&self, name: &str) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        (**self).subscribe(name)
    }

    fn clock(&self) -> Arc<dyn Clock> {
        (**self).clock()
    }
}

impl fmt::Debug for dyn DistributedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dyn DistributedLock")
    }
}
