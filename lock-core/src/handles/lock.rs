//! The reentrant lock's handle, and the method set every exclusive handle shares.

use std::fmt;

use crate::engine::Handle;

/// Generates the method set of a handle: the struct has a field `handle: Handle`; its
/// acquires return `$guard`, made by `$wrap` from the [`LockGuard`](crate::LockGuard). Written
/// once here, for every kind of lock.
macro_rules! lock_methods {
    () => {
        $crate::handles::lock::lock_methods!($crate::handles::guard::LockGuard, std::convert::identity);
    };
    ($guard:ty, $wrap:expr) => {
        /// The lock's name.
        pub fn name(&self) -> &str {
            self.handle.name()
        }

        /// Takes the lock, waiting as long as it takes. The lease is the client's watchdog
        /// lease, renewed until the guard is dropped.
        pub fn lock(&self) -> Result<$guard, $crate::contract::error::LockError> {
            self.acquire(None, $crate::engine::hold::LeaseMode::Watchdog)
                .and_then(|guard| guard.ok_or_else(|| self.unbounded_wait_ended()))
        }

        /// Takes the lock if it is free (or already held by this thread); never waits.
        pub fn try_lock(&self) -> Result<Option<$guard>, $crate::contract::error::LockError> {
            self.acquire(
                Some(std::time::Duration::ZERO),
                $crate::engine::hold::LeaseMode::Watchdog,
            )
        }

        /// Takes the lock, waiting at most `wait`; `Ok(None)` if it stayed held that long.
        pub fn try_lock_for(
            &self,
            wait: std::time::Duration,
        ) -> Result<Option<$guard>, $crate::contract::error::LockError> {
            self.acquire(Some(wait), $crate::engine::hold::LeaseMode::Watchdog)
        }

        /// Takes the lock with a fixed `lease`, waiting as long as it takes. The lease is not
        /// renewed: the lock frees itself `lease` after it was taken unless released before
        /// (and a lease event reports it if the guard was still held).
        pub fn lock_with_lease(
            &self,
            lease: std::time::Duration,
        ) -> Result<$guard, $crate::contract::error::LockError> {
            $crate::contract::limits::validate_lease("lease", lease)?;
            self.acquire(None, $crate::engine::hold::LeaseMode::Fixed(lease))
                .and_then(|guard| guard.ok_or_else(|| self.unbounded_wait_ended()))
        }

        /// Takes the lock with a fixed `lease`, waiting at most `wait` (Redisson's
        /// `tryLock(wait, lease)`); `Ok(None)` if it stayed held that long.
        pub fn try_lock_with_lease(
            &self,
            wait: std::time::Duration,
            lease: std::time::Duration,
        ) -> Result<Option<$guard>, $crate::contract::error::LockError> {
            $crate::contract::limits::validate_lease("lease", lease)?;
            self.acquire(Some(wait), $crate::engine::hold::LeaseMode::Fixed(lease))
        }

        /// Takes the lock as a hold of its own, not tied to this thread
        /// ([`OwnedLockGuard`](crate::OwnedLockGuard): `Send`, released from any thread, never
        /// re-entered), waiting as long as it takes; renewed by the watchdog until released.
        pub fn lock_owned(&self) -> Result<$crate::handles::owned_guard::OwnedLockGuard, $crate::contract::error::LockError> {
            self.acquire_owned(None, $crate::engine::hold::LeaseMode::Watchdog)
                .and_then(|guard| guard.ok_or_else(|| self.unbounded_wait_ended()))
        }

        /// Takes the lock as a hold of its own if it is free; never waits.
        pub fn try_lock_owned(&self) -> Result<Option<$crate::handles::owned_guard::OwnedLockGuard>, $crate::contract::error::LockError> {
            self.acquire_owned(
                Some(std::time::Duration::ZERO),
                $crate::engine::hold::LeaseMode::Watchdog,
            )
        }

        /// Takes the lock as a hold of its own, waiting at most `wait`.
        pub fn try_lock_owned_for(
            &self,
            wait: std::time::Duration,
        ) -> Result<Option<$crate::handles::owned_guard::OwnedLockGuard>, $crate::contract::error::LockError> {
            self.acquire_owned(Some(wait), $crate::engine::hold::LeaseMode::Watchdog)
        }

        /// Takes the lock as a hold of its own with a fixed `lease`, waiting as long as it
        /// takes.
        pub fn lock_owned_with_lease(
            &self,
            lease: std::time::Duration,
        ) -> Result<$crate::handles::owned_guard::OwnedLockGuard, $crate::contract::error::LockError> {
            $crate::contract::limits::validate_lease("lease", lease)?;
            self.acquire_owned(None, $crate::engine::hold::LeaseMode::Fixed(lease))
                .and_then(|guard| guard.ok_or_else(|| self.unbounded_wait_ended()))
        }

        /// Takes the lock as a hold of its own with a fixed `lease`, waiting at most `wait`.
        pub fn try_lock_owned_with_lease(
            &self,
            wait: std::time::Duration,
            lease: std::time::Duration,
        ) -> Result<Option<$crate::handles::owned_guard::OwnedLockGuard>, $crate::contract::error::LockError> {
            $crate::contract::limits::validate_lease("lease", lease)?;
            self.acquire_owned(Some(wait), $crate::engine::hold::LeaseMode::Fixed(lease))
        }

        /// Takes the lock as a hold of its own, as a future (Redisson's `lockAsync`): waiting as
        /// long as it takes without holding a thread, renewed by the watchdog until released.
        /// Nothing happens until it is polled; dropped at any point, it leaves nothing held or
        /// queued (a grant that raced the drop is given back at once).
        #[cfg(feature = "async")]
        #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
        pub fn lock_async(&self) -> impl std::future::Future<Output = Result<$crate::handles::owned_guard::OwnedLockGuard, $crate::contract::error::LockError>> + Send + 'static {
            let acquiring = self.acquire_owned_async(None, $crate::engine::hold::LeaseMode::Watchdog);
            let name = self.handle.name().to_owned();
            async move { acquiring.await?.ok_or_else(|| $crate::handles::lock::unbounded_wait_ended(&name)) }
        }

        /// [`try_lock_owned`](Self::try_lock_owned) as a future: a single try, never waiting.
        #[cfg(feature = "async")]
        #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
        pub fn try_lock_async(&self) -> impl std::future::Future<Output = Result<Option<$crate::handles::owned_guard::OwnedLockGuard>, $crate::contract::error::LockError>> + Send + 'static {
            self.acquire_owned_async(
                Some(std::time::Duration::ZERO),
                $crate::engine::hold::LeaseMode::Watchdog,
            )
        }

        /// [`try_lock_owned_for`](Self::try_lock_owned_for) as a future (Redisson's
        /// `tryLockAsync(wait)`): `Ok(None)` if the lock stayed held for `wait`.
        #[cfg(feature = "async")]
        #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
        pub fn try_lock_for_async(
            &self,
            wait: std::time::Duration,
        ) -> impl std::future::Future<Output = Result<Option<$crate::handles::owned_guard::OwnedLockGuard>, $crate::contract::error::LockError>> + Send + 'static {
            self.acquire_owned_async(Some(wait), $crate::engine::hold::LeaseMode::Watchdog)
        }

        /// [`lock_owned_with_lease`](Self::lock_owned_with_lease) as a future (Redisson's
        /// `lockAsync(lease)`): a fixed `lease`, not renewed, waiting as long as it takes.
        #[cfg(feature = "async")]
        #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
        pub fn lock_with_lease_async(
            &self,
            lease: std::time::Duration,
        ) -> impl std::future::Future<Output = Result<$crate::handles::owned_guard::OwnedLockGuard, $crate::contract::error::LockError>> + Send + 'static {
            let valid = $crate::contract::limits::validate_lease("lease", lease);
            let acquiring = self.acquire_owned_async(None, $crate::engine::hold::LeaseMode::Fixed(lease));
            let name = self.handle.name().to_owned();
            async move {
                valid?;
                acquiring.await?.ok_or_else(|| $crate::handles::lock::unbounded_wait_ended(&name))
            }
        }

        /// [`try_lock_owned_with_lease`](Self::try_lock_owned_with_lease) as a future
        /// (Redisson's `tryLockAsync(wait, lease)`).
        #[cfg(feature = "async")]
        #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
        pub fn try_lock_with_lease_async(
            &self,
            wait: std::time::Duration,
            lease: std::time::Duration,
        ) -> impl std::future::Future<Output = Result<Option<$crate::handles::owned_guard::OwnedLockGuard>, $crate::contract::error::LockError>> + Send + 'static {
            let valid = $crate::contract::limits::validate_lease("lease", lease);
            let acquiring = self.acquire_owned_async(Some(wait), $crate::engine::hold::LeaseMode::Fixed(lease));
            async move {
                valid?;
                acquiring.await
            }
        }

        /// Releases one hold of the calling thread whose guard was given up with
        /// [`LockGuard::leak`](crate::LockGuard::leak). Fails with
        /// [`LockError::NotHeld`](crate::LockError::NotHeld) if this thread holds nothing here,
        /// leaving the lock untouched.
        pub fn unlock(&self) -> Result<(), $crate::contract::error::LockError> {
            self.handle.unlock_leaked()
        }

        /// Whether any owner holds the lock now (one backend call).
        pub fn is_locked(&self) -> Result<bool, $crate::contract::error::LockError> {
            Ok(self.handle.status()?.locked)
        }

        /// Whether the calling thread holds the lock now. Asks the backend when this thread has
        /// a hold, so a lease lost behind its back is seen (and its guards marked lost).
        pub fn is_held_by_current_thread(&self) -> Result<bool, $crate::contract::error::LockError> {
            self.handle.is_held_by_current_thread()
        }

        /// How many times the calling thread holds the lock (0 if it does not).
        pub fn hold_count(&self) -> Result<u32, $crate::contract::error::LockError> {
            self.handle.hold_count()
        }

        /// The holder's remaining lease as the backend sees it; `None` when the lock is free.
        pub fn remaining_lease(&self) -> Result<Option<std::time::Duration>, $crate::contract::error::LockError> {
            Ok(self.handle.status()?.remaining_lease)
        }

        /// Frees the lock whoever holds it, and wakes its waiters. Returns whether it was held.
        /// The holder's guards find out at their next renewal or release (`is_lost`,
        /// `LeaseLost`, and a lease event).
        pub fn force_unlock(&self) -> Result<bool, $crate::contract::error::LockError> {
            self.handle.force_unlock()
        }

        fn acquire(
            &self,
            wait: Option<std::time::Duration>,
            mode: $crate::engine::hold::LeaseMode,
        ) -> Result<Option<$guard>, $crate::contract::error::LockError> {
            Ok(self
                .handle
                .acquire(wait, mode)?
                .map(|hold| $wrap($crate::handles::guard::LockGuard::new(&self.handle, hold))))
        }

        fn acquire_owned(
            &self,
            wait: Option<std::time::Duration>,
            mode: $crate::engine::hold::LeaseMode,
        ) -> Result<Option<$crate::handles::owned_guard::OwnedLockGuard>, $crate::contract::error::LockError> {
            Ok(self
                .handle
                .acquire_owned(wait, mode, None)?
                .map(|hold| $crate::handles::owned_guard::OwnedLockGuard::new(&self.handle, hold)))
        }

        #[cfg(feature = "async")]
        fn acquire_owned_async(
            &self,
            wait: Option<std::time::Duration>,
            mode: $crate::engine::hold::LeaseMode,
        ) -> impl std::future::Future<Output = Result<Option<$crate::handles::owned_guard::OwnedLockGuard>, $crate::contract::error::LockError>> + Send + 'static {
            let handle = self.handle.clone();
            let acquiring = self.handle.acquire_owned_future(wait, mode, None);
            async move {
                Ok(acquiring
                    .await?
                    .map(|hold| $crate::handles::owned_guard::OwnedLockGuard::from_future(&handle, hold)))
            }
        }

        fn unbounded_wait_ended(&self) -> $crate::contract::error::LockError {
            $crate::handles::lock::unbounded_wait_ended(self.handle.name())
        }
    };
}
pub(crate) use lock_methods;

/// The error of an acquire of `name` without a wait limit that ended without the lock (a bug).
pub(crate) fn unbounded_wait_ended(name: &str) -> crate::contract::error::LockError {
    crate::contract::error::LockError::protocol(format!(
        "acquire of {name:?} without a wait limit returned without the lock"
    ))
}

/// A handle on the reentrant lock called [`name`](Lock::name), from
/// [`LockClient::lock`](crate::LockClient::lock) (Redisson's `RLock`).
///
/// Cheap to clone, `Send` and `Sync`: share it between threads or make a new one from the
/// client each time. Holding is per thread: each acquire returns a [`LockGuard`](crate::LockGuard) that releases
/// its hold when dropped, and a thread that already holds the lock re-enters it at once.
///
/// Waiters race for it when it is released, as Redisson's: the next holder is whoever asks
/// first. A client built with [`HandOff::Queue`](crate::HandOff::Queue) queues its waiters on
/// the store instead, and each release grants it to the longest waiter of any process.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlocks::{LockClient, MemoryBackend};
///
/// let client = LockClient::new(MemoryBackend::new());
/// let orders = client.lock("orders:42");
/// {
///     let outer = orders.lock()?;          // renewed by the watchdog until dropped
///     let inner = orders.lock()?;          // reentrant on the same thread
///     assert_eq!(orders.hold_count()?, 2);
/// }                                        // both released
/// let fixed = orders.lock_with_lease(Duration::from_secs(10))?; // expires on its own
/// fixed.unlock()?;
/// assert!(orders.try_lock_for(Duration::from_millis(5))?.is_some());
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Clone)]
pub struct Lock {
    pub(crate) handle: Handle,
}

impl Lock {
    pub(crate) fn new(handle: Handle) -> Self {
        Lock { handle }
    }

    lock_methods!();
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.handle.name())
            .finish_non_exhaustive()
    }
}
