//! The semaphore with leased permits, and its permit.

use std::fmt;
use std::time::{Duration, Instant};

use crate::contract::backend::CounterStep;
use crate::contract::error::LockError;
use crate::contract::limits::validate_lease;
use crate::engine::hold::LeaseMode;
use crate::engine::Handle;
use crate::handles::owned_guard::OwnedHold;

/// A semaphore whose permits are leases, from [`LockClient::semaphore`](crate::LockClient::semaphore)
/// (Redisson's `RPermitExpirableSemaphore`): at most its number of permits are held at once,
/// across every process.
///
/// Every permit is a hold of its own, like a lock's: renewed by the client's watchdog while it
/// is held (or taken with a fixed lease), reported by lease events when lost, and given back
/// when its lease runs out. So a holder that dies gives its permit back within a lease; a permit
/// is never leaked forever. A [`Permit`] is `Send`: it may be released from any thread. Waiters
/// sleep until a permit is released (or the soonest permit lease ends), a client's own waiters
/// served first come, first served.
///
/// Cheap to clone, `Send` and `Sync`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlocks::{LockClient, MemoryBackend};
///
/// let client = LockClient::new(MemoryBackend::new());
/// let api = client.semaphore("api-quota");
/// assert!(api.try_set_permits(2)?);                  // only if not set yet
/// let a = api.acquire()?;
/// let b = api.try_acquire_for(Duration::from_millis(10))?.expect("a second permit");
/// assert!(api.try_acquire()?.is_none());              // both taken
/// assert_eq!(api.available_permits()?, 0);
/// let worker = std::thread::spawn(move || b.release()); // released from another thread
/// worker.join().expect("worker")?;
/// assert_eq!(api.available_permits()?, 1);
/// drop(a);
/// assert_eq!(api.available_permits()?, 2);
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Clone)]
pub struct Semaphore {
    handle: Handle,
}

impl Semaphore {
    pub(crate) fn new(handle: Handle) -> Self {
        Semaphore { handle }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// Sets the number of permits if it was never set (Redisson's `trySetPermits`); whether it
    /// did.
    pub fn try_set_permits(&self, permits: u32) -> Result<bool, LockError> {
        let set = self.handle.counter(CounterStep::TrySetPermits {
            name: self.name(),
            permits: u64::from(permits),
        })?;
        Ok(set == 1)
    }

    /// Makes `permits` more permits available (setting the number if it was never set), and
    /// wakes waiters.
    pub fn add_permits(&self, permits: u32) -> Result<(), LockError> {
        self.handle
            .counter(CounterStep::AddPermits {
                name: self.name(),
                permits: u64::from(permits),
            })
            .map(drop)
    }

    /// The permits available now (permits whose lease ran out count as given back).
    pub fn available_permits(&self) -> Result<u64, LockError> {
        self.handle
            .counter(CounterStep::AvailablePermits { name: self.name() })
    }

    /// Takes a permit, waiting as long as it takes; renewed by the watchdog until released.
    pub fn acquire(&self) -> Result<Permit, LockError> {
        self.take(None, LeaseMode::Watchdog)?
            .ok_or_else(|| self.unbounded_wait_ended())
    }

    /// Takes a permit if one is available now; never waits.
    pub fn try_acquire(&self) -> Result<Option<Permit>, LockError> {
        self.take(Some(Duration::ZERO), LeaseMode::Watchdog)
    }

    /// Takes a permit, waiting at most `wait`; `Ok(None)` if none came free in time.
    pub fn try_acquire_for(&self, wait: Duration) -> Result<Option<Permit>, LockError> {
        self.take(Some(wait), LeaseMode::Watchdog)
    }

    /// Takes a permit with a fixed `lease` (not renewed: it comes back on its own `lease` after
    /// it was taken unless released before), waiting as long as it takes.
    pub fn acquire_with_lease(&self, lease: Duration) -> Result<Permit, LockError> {
        validate_lease("lease", lease)?;
        self.take(None, LeaseMode::Fixed(lease))?
            .ok_or_else(|| self.unbounded_wait_ended())
    }

    /// Takes a permit with a fixed `lease`, waiting at most `wait`.
    pub fn try_acquire_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<Permit>, LockError> {
        validate_lease("lease", lease)?;
        self.take(Some(wait), LeaseMode::Fixed(lease))
    }

    /// [`acquire`](Semaphore::acquire) as a future (Redisson's `acquireAsync`): waiting as long
    /// as it takes without holding a thread. Dropped at any point, it leaves no permit taken
    /// and nothing queued.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlocks::{LockClient, MemoryBackend};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let client = LockClient::new(MemoryBackend::new());
    /// let api = client.semaphore("api-quota");
    /// api.try_set_permits(1)?;
    /// let permit = api.acquire_async().await?;
    /// assert!(api.try_acquire_async().await?.is_none());   // the only one is taken
    /// permit.release_async().await?;
    /// assert_eq!(api.available_permits()?, 1);
    /// # Ok::<(), dlocks::LockError>(())
    /// # }).unwrap();
    /// ```
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn acquire_async(
        &self,
    ) -> impl std::future::Future<Output = Result<Permit, LockError>> + Send + 'static {
        let taking = self.take_async(None, LeaseMode::Watchdog);
        let name = self.name().to_owned();
        async move { taking.await?.ok_or_else(|| unbounded_wait_ended(&name)) }
    }

    /// [`try_acquire`](Semaphore::try_acquire) as a future: a single try, never waiting.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn try_acquire_async(
        &self,
    ) -> impl std::future::Future<Output = Result<Option<Permit>, LockError>> + Send + 'static {
        self.take_async(Some(Duration::ZERO), LeaseMode::Watchdog)
    }

    /// [`try_acquire_for`](Semaphore::try_acquire_for) as a future (Redisson's
    /// `tryAcquireAsync(wait)`).
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn try_acquire_for_async(
        &self,
        wait: Duration,
    ) -> impl std::future::Future<Output = Result<Option<Permit>, LockError>> + Send + 'static {
        self.take_async(Some(wait), LeaseMode::Watchdog)
    }

    /// [`acquire_with_lease`](Semaphore::acquire_with_lease) as a future.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn acquire_with_lease_async(
        &self,
        lease: Duration,
    ) -> impl std::future::Future<Output = Result<Permit, LockError>> + Send + 'static {
        let valid = validate_lease("lease", lease);
        let taking = self.take_async(None, LeaseMode::Fixed(lease));
        let name = self.name().to_owned();
        async move {
            valid?;
            taking.await?.ok_or_else(|| unbounded_wait_ended(&name))
        }
    }

    #[cfg(feature = "async")]
    fn take_async(
        &self,
        wait: Option<Duration>,
        mode: LeaseMode,
    ) -> impl std::future::Future<Output = Result<Option<Permit>, LockError>> + Send + 'static {
        let handle = self.handle.clone();
        let taking = self.handle.acquire_owned_future(wait, mode, None);
        async move {
            Ok(taking.await?.map(|hold| Permit {
                inner: OwnedHold::from_future(&handle, hold),
            }))
        }
    }

    fn take(&self, wait: Option<Duration>, mode: LeaseMode) -> Result<Option<Permit>, LockError> {
        Ok(self
            .handle
            .acquire_owned(wait, mode, None)?
            .map(|hold| Permit {
                inner: OwnedHold::new(&self.handle, hold),
            }))
    }

    fn unbounded_wait_ended(&self) -> LockError {
        unbounded_wait_ended(self.name())
    }
}

/// The error of an acquire of a permit of `name` without a wait limit that ended without one
/// (a bug).
fn unbounded_wait_ended(name: &str) -> LockError {
    LockError::protocol(format!(
        "acquire of a permit of {name:?} without a wait limit returned without one"
    ))
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// One permit of a [`Semaphore`]: given back when dropped (or with
/// [`release`](Permit::release)), from any thread.
#[must_use = "the permit is given back as soon as it is dropped"]
pub struct Permit {
    inner: OwnedHold,
}

impl Permit {
    /// The permit's id: 32 hex digits, Redisson's permit id form.
    pub fn id(&self) -> &str {
        self.inner.owner().as_str()
    }

    /// The semaphore's name.
    pub fn semaphore(&self) -> &str {
        self.inner.handle().name()
    }

    /// Whether the permit's lease may have been lost (expired, or the store no longer has it):
    /// another holder may have it now.
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// The instant until which the permit's lease is known to last.
    pub fn lease_deadline(&self) -> Instant {
        self.inner.lease_deadline()
    }

    /// Gives the permit back now and reports how it went ([`LockError::LeaseLost`] if its lease
    /// had been lost).
    pub fn release(self) -> Result<(), LockError> {
        self.inner.release()
    }

    /// [`release`](Permit::release) for async code: given back where it cannot block the
    /// caller's executor, at once, even if the future is dropped.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn release_async(
        self,
    ) -> impl std::future::Future<Output = Result<(), LockError>> + Send + 'static {
        self.inner.release_async()
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("semaphore", &self.semaphore())
            .field("id", &self.id())
            .field("lost", &self.is_lost())
            .finish()
    }
}
