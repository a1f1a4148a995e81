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
    /// Made by a future: dropped, most likely, by async code on an executor's thread, so its
    /// drop never blocks on the store (the release goes to the client's threads).
    #[cfg(feature = "async")]
    from_future: bool,
}

impl OwnedHold {
    pub(crate) fn new(handle: &Handle, hold: Arc<Hold>) -> Self {
        OwnedHold {
            handle: handle.clone(),
            hold,
            released: false,
            #[cfg(feature = "async")]
            from_future: false,
        }
    }

    /// A hold a future took (see [`from_future`](OwnedHold::from_future)).
    #[cfg(feature = "async")]
    pub(crate) fn from_future(handle: &Handle, hold: Arc<Hold>) -> Self {
        let mut owned = OwnedHold::new(handle, hold);
        owned.from_future = true;
        owned
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

    /// Releases the hold off the calling thread; the future reports how it went. The release
    /// goes out at once, whether or not the future is polled.
    #[cfg(feature = "async")]
    pub(crate) fn release_async(
        mut self,
    ) -> impl std::future::Future<Output = Result<(), LockError>> + Send + 'static {
        self.released = true;
        self.handle.release_future(self.hold.clone())
    }
}

impl Drop for OwnedHold {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        #[cfg(feature = "async")]
        if self.from_future {
            self.handle.release_detached(self.hold.clone());
            return;
        }
        if let Err(error) = self.handle.release_one(&self.hold) {
            tracing::warn!(lock = %self.handle.name(), kind = %self.handle.kind(), %error, "dlock: releasing a dropped guard failed");
        }
    }
}

/// A hold on a lock that belongs to no thread: `Send` and `'static`, released by whichever
/// thread has it (when dropped, or with [`unlock`](OwnedLockGuard::unlock)), from the
/// `*_owned` acquires of every lock handle (lock_api's `lock_arc`) and from their futures
/// (`lock_async`, ..., with the `async` feature).
///
/// Each one is a holder of its own, with its own owner id (`<client id>:owned-<n>`): it is never
/// re-entered (a second `lock_owned` from the same thread waits like any other owner), and it
/// does not count as the thread's hold (`is_held_by_current_thread` stays false). The watchdog
/// renews it and lease events report it like any hold. For work handed between threads: a
/// dispatcher takes the lock, a worker finishes the job and releases it; and for async code,
/// where a task moves between threads.
///
/// Dropping it releases the hold at once. A guard from a future gives that release to the
/// client's own threads (in place on a store whose steps never block), so async code that
/// drops it (an early return, a cancelled request) never blocks on the store.
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

    /// The guard of a hold a future took: its drop hands the release to the client's threads.
    #[cfg(feature = "async")]
    pub(crate) fn from_future(handle: &Handle, hold: Arc<Hold>) -> Self {
        OwnedLockGuard {
            inner: OwnedHold::from_future(handle, hold),
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

    /// [`unlock`](OwnedLockGuard::unlock) for async code: the release runs where it cannot
    /// block the caller's executor (the client's own threads; in place on a store whose steps
    /// never block), and goes out at once, even if the future is dropped; the future reports
    /// how it went.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlocks::{LockClient, MemoryBackend};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let client = LockClient::new(MemoryBackend::new());
    /// let job = client.lock("job:17");
    /// let guard = job.lock_async().await?;
    /// let worker = tokio::spawn(async move {
    ///     // ... the job, across `.await`s ...
    ///     guard.unlock_async().await                    // released by the task
    /// });
    /// worker.await.expect("worker")?;
    /// assert!(!job.is_locked()?);
    /// # Ok::<(), dlocks::LockError>(())
    /// # }).unwrap();
    /// ```
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn unlock_async(
        self,
    ) -> impl std::future::Future<Output = Result<(), LockError>> + Send + 'static {
        self.inner.release_async()
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
