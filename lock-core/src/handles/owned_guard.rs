//! Holds of their own, not tied to a thread: the RAII part every owned guard shares, and the
//! owned lock guard.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::contract::error::LockError;
use crate::contract::kind::LockKind;
use crate::contract::owner::OwnerId;
use crate::engine::hold::Hold;
use crate::engine::Handle;

/// A hold of its own and the handle it releases through: released when dropped, from
/// whichever thread has it. What [`OwnedLockGuard`], [`Permit`](crate::Permit) and
/// [`Leadership`](crate::Leadership) are made of.
pub(crate) struct OwnedHold {
    handle: Handle,
    hold: Arc<Hold>,
    released: bool,
}

impl OwnedHold {
    pub(crate) fn new(handle: &Handle, hold: Arc<Hold>) -> Self {
        OwnedHold {
            handle: handle.clone(),
            hold,
            released: false,
        }
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    pub(crate) fn owner(&self) -> &OwnerId {
        &self.hold.owner
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.handle.is_lost(&self.hold)
    }

    pub(crate) fn lease_deadline(&self) -> Instant {
        self.hold.deadline()
    }

    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.hold.fencing_token()
    }

    /// Releases the hold now and reports how it went.
    pub(crate) fn release(mut self) -> Result<(), LockError> {
        self.released = true;
        self.handle.release_one(&self.hold)
    }
}

impl Drop for OwnedHold {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Err(error) = self.handle.release_one(&self.hold) {
            tracing::warn!(lock = %self.handle.name(), kind = %self.handle.kind(), %error, "dlock: releasing a dropped guard failed");
        }
    }
}

/// A hold on a lock that belongs to no thread: `Send` and `'static`, released by whichever
/// thread has it (when dropped, or with [`unlock`](OwnedLockGuard::unlock)), from the
/// `*_owned` acquires of every lock handle (lock_api's `lock_arc`).
///
/// Each one is a holder of its own, with its own owner id (`<client id>:owned-<n>`): it is never
/// re-entered (a second `lock_owned` from the same thread waits like any other owner), and it
/// does not count as the thread's hold (`is_held_by_current_thread` stays false). The watchdog
/// renews it and lease events report it like any hold. For work handed between threads: a
/// dispatcher takes the lock, a worker finishes the job and releases it.
///
/// # Examples
///
/// ```
/// use dlocks::{LockClient, MemoryBackend};
///
/// let client = LockClient::new(MemoryBackend::new());
/// let job = client.lock("job:17");
/// let guard = job.lock_owned()?;                   // taken by the dispatcher
/// let worker = std::thread::spawn(move || {
///     // ... the job ...
///     guard.unlock()                                // released by the worker
/// });
/// worker.join().expect("worker")?;
/// assert!(!job.is_locked()?);
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct OwnedLockGuard {
    inner: OwnedHold,
}

impl OwnedLockGuard {
    pub(crate) fn new(handle: &Handle, hold: Arc<Hold>) -> Self {
        OwnedLockGuard {
            inner: OwnedHold::new(handle, hold),
        }
    }

    /// The name of the lock this guard holds.
    pub fn name(&self) -> &str {
        self.inner.handle().name()
    }

    /// The kind of the lock this guard holds.
    pub fn kind(&self) -> LockKind {
        self.inner.handle().kind()
    }

    /// The owner id this hold has on the store (`<client id>:owned-<n>`).
    pub fn owner(&self) -> &str {
        self.inner.owner().as_str()
    }

    /// Whether the lease may have been lost (see [`LockGuard::is_lost`](crate::LockGuard::is_lost)).
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// The instant until which the lease is known to last.
    pub fn lease_deadline(&self) -> Instant {
        self.inner.lease_deadline()
    }

    /// The fencing token of this hold, for a fenced lock's (`None` for other kinds).
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token()
    }

    /// Releases the lock now and reports how it went: [`LockError::LeaseLost`] if the lease
    /// had been lost (the lock is still given back if the store kept it), or the backend's
    /// error.
    pub fn unlock(self) -> Result<(), LockError> {
        self.inner.release()
    }
}

impl fmt::Debug for OwnedLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedLockGuard")
            .field("name", &self.name())
            .field("kind", &self.kind())
            .field("owner", &self.owner())
            .field("lost", &self.is_lost())
            .finish()
    }
}
