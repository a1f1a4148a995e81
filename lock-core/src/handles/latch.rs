//! The count-down latch.

use std::fmt;
use std::time::Duration;

use crate::contract::backend::CounterStep;
use crate::contract::error::LockError;
use crate::engine::Handle;

/// A count-down latch, from [`LockClient::count_down_latch`](crate::LockClient::count_down_latch)
/// (Redisson's `RCountDownLatch`): waiters block until the count, set once, has been counted
/// down to zero, in any process.
///
/// Waiters are woken by the count-down that reaches zero (a message on Redis), never by
/// polling; in case a message is lost, a waiter looks again once per watchdog lease. A latch
/// that reached zero is open until its count is set again.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlocks::{LockClient, MemoryBackend};
///
/// let client = LockClient::new(MemoryBackend::new());
/// let warm_up = client.count_down_latch("warm-up");
/// assert!(warm_up.try_set_count(2)?);
/// assert!(!warm_up.wait_for(Duration::from_millis(5))?);   // still closed
/// let jobs: Vec<_> = (0..2)
///     .map(|_| {
///         let latch = warm_up.clone();
///         std::thread::spawn(move || latch.count_down())
///     })
///     .collect();
/// warm_up.wait()?;                                          // woken by the last count-down
/// assert_eq!(warm_up.count()?, 0);
/// for job in jobs {
///     job.join().expect("job")?;
/// }
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    handle: Handle,
}

impl CountDownLatch {
    pub(crate) fn new(handle: Handle) -> Self {
        CountDownLatch { handle }
    }

    /// The latch's name.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// Sets the count if the latch has none (never set, or counted down to zero since);
    /// whether it did. A count of zero leaves the latch open.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidArgument`] for a count above [`MAX_COUNT`](crate::MAX_COUNT), which
    /// not every store keeps exactly (Redis counts in 64-bit signed integers).
    pub fn try_set_count(&self, count: u64) -> Result<bool, LockError> {
        crate::contract::limits::validate_count("count", count)?;
        let set = self.handle.counter(CounterStep::TrySetCount {
            name: self.name(),
            count,
        })?;
        Ok(set == 1)
    }

    /// Counts down by one; the count-down that reaches zero opens the latch and wakes its
    /// waiters. On an open latch it does nothing.
    pub fn count_down(&self) -> Result<(), LockError> {
        self.handle
            .counter(CounterStep::CountDown { name: self.name() })
            .map(drop)
    }

    /// The count now (0: open).
    pub fn count(&self) -> Result<u64, LockError> {
        self.handle
            .counter(CounterStep::Count { name: self.name() })
    }

    /// Waits until the latch is open, as long as it takes.
    pub fn wait(&self) -> Result<(), LockError> {
        if self.handle.wait_until_open(None)? {
            Ok(())
        } else {
            Err(wait_ended(self.name()))
        }
    }

    /// Waits at most `timeout` for the latch to open; whether it did.
    pub fn wait_for(&self, timeout: Duration) -> Result<bool, LockError> {
        self.handle.wait_until_open(Some(timeout))
    }

    /// [`wait`](CountDownLatch::wait) as a future (Redisson's `awaitAsync`): woken by the
    /// count-down that opens the latch, holding no thread meanwhile.
    ///
    /// # Examples
    ///
    /// ```
    /// use dlocks::{LockClient, MemoryBackend};
    ///
    /// # tokio::runtime::Builder::new_multi_thread().enable_time().build().unwrap().block_on(async {
    /// let client = LockClient::new(MemoryBackend::new());
    /// let warm_up = client.count_down_latch("warm-up");
    /// warm_up.try_set_count(1)?;
    /// let waiting = tokio::spawn(warm_up.wait_async());
    /// warm_up.count_down()?;
    /// waiting.await.expect("waiter")?;                // woken by the count-down
    /// # Ok::<(), dlocks::LockError>(())
    /// # }).unwrap();
    /// ```
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn wait_async(
        &self,
    ) -> impl std::future::Future<Output = Result<(), LockError>> + Send + 'static {
        let waiting = self.handle.wait_until_open_future(None);
        let name = self.name().to_owned();
        async move {
            if waiting.await? {
                Ok(())
            } else {
                Err(wait_ended(&name))
            }
        }
    }

    /// [`wait_for`](CountDownLatch::wait_for) as a future: whether the latch opened within
    /// `timeout`.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub fn wait_for_async(
        &self,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<bool, LockError>> + Send + 'static {
        self.handle.wait_until_open_future(Some(timeout))
    }
}

/// The error of a wait without a limit for latch `name` that ended before it opened (a bug).
fn wait_ended(name: &str) -> LockError {
    LockError::protocol(format!(
        "a wait without a limit for latch {name:?} returned before it opened"
    ))
}

impl fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}
