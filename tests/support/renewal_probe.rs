//! A backend wrapper that records the watchdog's renewal calls and can make them fail.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, ThreadId};
use std::time::Duration;

use dlock::{
    Acquire, Clock, DistributedLock, HoldRef, LockError, LockStatus, OwnerId, Release,
    ReleaseSubscription,
};
use parking_lot::Mutex;

/// Passes every call to the wrapped backend; records each `renew` (calling thread, batch size)
/// and fails the next `fail_renewals` of them as an unreachable backend would.
pub struct RenewalProbe {
    inner: Arc<dyn DistributedLock>,
    pub renewals: Mutex<Vec<(ThreadId, usize)>>,
    pub fail_renewals: AtomicUsize,
}

impl RenewalProbe {
    pub fn new(inner: Arc<dyn DistributedLock>) -> Arc<Self> {
        Arc::new(RenewalProbe {
            inner,
            renewals: Mutex::new(Vec::new()),
            fail_renewals: AtomicUsize::new(0),
        })
    }
}

impl DistributedLock for RenewalProbe {
    fn try_acquire(
        &self,
        name: &str,
        owner: &OwnerId,
        lease: Duration,
    ) -> Result<Acquire, LockError> {
        self.inner.try_acquire(name, owner, lease)
    }
    fn release(&self, name: &str, owner: &OwnerId) -> Result<Release, LockError> {
        self.inner.release(name, owner)
    }
    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<bool>, LockError> {
        self.renewals
            .lock()
            .push((thread::current().id(), holds.len()));
        let failing = self
            .fail_renewals
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(LockError::unavailable(
                "renewal probe",
                "the backend is made unreachable for this call",
            ));
        }
        self.inner.renew(holds, lease)
    }
    fn status(&self, name: &str, owner: &OwnerId) -> Result<LockStatus, LockError> {
        self.inner.status(name, owner)
    }
    fn force_unlock(&self, name: &str) -> Result<bool, LockError> {
        self.inner.force_unlock(name)
    }
    fn subscribe(&self, name: &str) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        self.inner.subscribe(name)
    }
    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock()
    }
}
