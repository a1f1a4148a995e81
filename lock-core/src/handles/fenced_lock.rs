//! The fenced lock's handle: every new hold comes with a token, strictly increasing per name.

use std::fmt;
use std::time::Instant;

use crate::contract::error::LockError;
use crate::contract::kind::LockKind;
use crate::engine::Handle;
use crate::handles::guard::LockGuard;
use crate::handles::lock::lock_methods;

/// A handle on the fenced lock called [`name`](FencedLock::name), from
/// [`LockClient::fenced_lock`](crate::LockClient::fenced_lock) (Redisson's `RFencedLock`).
///
/// The reentrant lock (the same lock on the store: a plain and a fenced handle of one name
/// exclude each other), whose every new hold gets a **fencing token**, strictly increasing per
/// name across all holders (a reentrant acquire keeps its hold's token). A lease can be lost
/// while its holder still runs (a pause longer than the lease, a server losing the lock): give
/// the token with every write to the resource the lock protects, and have the resource refuse
/// a write whose token is lower than one it has seen. Then a holder that lost its lease cannot
/// overwrite the work of the one after it. `examples/fenced_store.rs` shows such a resource.
///
/// # Examples
///
/// ```
/// use dlocks::{LockClient, MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let (a, b) = (LockClient::new(backend.clone()), LockClient::new(backend));
/// let first = a.fenced_lock("ledger").lock()?;
/// let token = first.token();
/// assert_eq!(a.fenced_lock("ledger").lock()?.token(), token);   // reentrant: same hold
/// first.unlock()?;
/// let next = b.fenced_lock("ledger").lock()?;
/// assert!(next.token() > token);                               // a new hold: a higher token
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Clone)]
pub struct FencedLock {
    pub(crate) handle: Handle,
}

impl FencedLock {
    pub(crate) fn new(handle: Handle) -> Self {
        FencedLock { handle }
    }

    lock_methods!(FencedLockGuard, FencedLockGuard::new);
}

impl fmt::Debug for FencedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedLock")
            .field("name", &self.handle.name())
            .finish_non_exhaustive()
    }
}

/// One hold on a [`FencedLock`], with its fencing token; dropping it releases the hold.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct FencedLockGuard {
    guard: LockGuard,
    token: u64,
}

impl FencedLockGuard {
    fn new(guard: LockGuard) -> Self {
        // The engine refuses a fenced grant without a token, so there is one.
        let token = guard.fencing_token().unwrap_or_default();
        FencedLockGuard { guard, token }
    }

    /// The hold's fencing token: higher than the token of every hold of this lock before it.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The id the store keeps this hold under (see [`LockGuard::owner`]).
    pub fn owner(&self) -> &str {
        self.guard.owner()
    }

    /// The lock's kind ([`LockKind::Fenced`]).
    pub fn kind(&self) -> LockKind {
        self.guard.kind()
    }

    /// Whether the lease may have been lost (see [`LockGuard::is_lost`]); the token still
    /// fences the resource against this holder's late writes.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// The instant until which the lease is known to last.
    pub fn lease_deadline(&self) -> Instant {
        self.guard.lease_deadline()
    }

    /// Releases this hold now and reports how it went (see [`LockGuard::unlock`]).
    pub fn unlock(self) -> Result<(), LockError> {
        self.guard.unlock()
    }

    /// Gives up the guard without releasing the hold (see [`LockGuard::leak`]).
    pub fn leak(self) {
        self.guard.leak()
    }
}

impl fmt::Debug for FencedLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedLockGuard")
            .field("name", &self.name())
            .field("token", &self.token)
            .field("lost", &self.is_lost())
            .finish()
    }
}
