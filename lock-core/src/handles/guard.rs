//! The RAII guard of one hold: releases it when dropped.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

use crate::contract::error::LockError;
use crate::contract::kind::LockKind;
use crate::engine::hold::Hold;
use crate::engine::Handle;

/// One hold on a lock by the calling thread; dropping it releases the hold.
///
/// It owns what it needs (the client and the lock's name), so `client.lock(name).lock()?` can
/// be kept directly. Not `Send`: ownership and reentrancy are per thread, so a guard is released
/// by the thread that took it. Dropping releases on a best-effort basis and logs a failure;
/// [`unlock`](LockGuard::unlock) releases and reports the result.
///
/// # Examples
///
/// ```
/// use dlocks::{LockClient, MemoryBackend};
///
/// let client = LockClient::new(MemoryBackend::new());
/// let jobs = client.lock("jobs");
/// let guard = jobs.lock()?;
/// assert!(!guard.is_lost());
/// guard.unlock()?;                 // explicit release, with its error if the lease was lost
/// assert!(!jobs.is_locked()?);
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    handle: Handle,
    hold: Arc<Hold>,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl LockGuard {
    pub(crate) fn new(handle: &Handle, hold: Arc<Hold>) -> Self {
        LockGuard {
            handle: handle.clone(),
            hold,
            released: false,
            _not_send: PhantomData,
        }
    }

    /// The name of the lock this guard holds.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// The kind of the lock this guard holds.
    pub fn kind(&self) -> LockKind {
        self.handle.kind()
    }

    /// Whether the lease may have been lost: a renewal found the lock gone, the lock was
    /// re-taken by another owner, or the lease deadline passed without a renewal (a fixed lease
    /// that ran out, or a backend unreachable for a whole lease). Once true, it stays true.
    pub fn is_lost(&self) -> bool {
        self.handle.is_lost(&self.hold)
    }

    /// The id the store keeps this hold under: `<client id>:<hold number>`, its own (a later
    /// hold of the same thread has another), as inspection tools (`dlock status`) show it.
    pub fn owner(&self) -> &str {
        self.hold.owner.as_str()
    }

    /// The fencing token of this hold, for a kind that issues one ([`LockKind::Fenced`]).
    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.hold.fencing_token()
    }

    /// The instant until which the lease is known to last (it is renewed by the watchdog for
    /// locks taken without an explicit lease), on the client's clock.
    pub fn lease_deadline(&self) -> Instant {
        self.hold.deadline()
    }

    /// Releases this hold now and reports how it went: [`LockError::LeaseLost`] if the lease
    /// had been lost (the lock is still given back if the backend kept it), or the backend's
    /// error.
    pub fn unlock(mut self) -> Result<(), LockError> {
        self.released = true;
        self.handle.release_one(&self.hold)
    }

    /// Gives up the guard without releasing the hold: the thread keeps holding the lock until
    /// it calls the handle's `unlock` (or the lease ends). For lock/unlock pairs that cannot be
    /// scoped.
    pub fn leak(mut self) {
        self.released = true;
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Err(error) = self.handle.release_one(&self.hold) {
            tracing::warn!(lock = %self.handle.name(), %error, "dlock: releasing a dropped guard failed");
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.handle.name())
            .field("kind", &self.handle.kind())
            .field("owner", &self.hold.owner)
            .field("lost", &self.is_lost())
            .finish()
    }
}
