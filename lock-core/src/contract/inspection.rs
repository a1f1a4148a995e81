//! The inspection hook of the contract: what a store holds, read for people and tools
//! (`dlock status`, `list`, `top`, `watch`) without taking or writing anything.

use std::time::Duration;

use crate::contract::error::LockError;
use crate::contract::lock_info::LockInfo;
use crate::contract::synchronizer_info::SynchronizerInfo;

/// Reads what a store holds: a backend offers it through
/// [`DistributedLock::inspection`](crate::backend::DistributedLock::inspection), so a tool
/// shows any backend without knowing which one it is.
///
/// Every answer is stale once read: a program that needs a lock asks for it instead. Nothing
/// is created, migrated or written by any of these calls. Holders carry their clients'
/// records ([`LockHolder::client`](crate::backend::LockHolder::client)) where the store keeps
/// them.
pub trait Inspection: Send + Sync {
    /// What the store holds for lock `name` now: holders, remaining lease, queued fair waiters,
    /// the last fencing token. A name the store keeps as something that is not a lock is
    /// [`LockError::InvalidArgument`].
    fn inspect(&self, name: &str) -> Result<LockInfo, LockError>;

    /// What the store holds for `name` as a semaphore, a count-down latch or a leader election.
    fn inspect_synchronizer(&self, name: &str) -> Result<SynchronizerInfo, LockError>;

    /// The locks held now whose names match `pattern` (glob syntax: `*`, `?`, `[ab]`), sorted
    /// by name, at most `limit` of them.
    fn list_locks(&self, pattern: &str, limit: usize) -> Result<Vec<LockInfo>, LockError>;

    /// The semaphores, latches and elections in use now whose names match `pattern`, sorted
    /// by name, at most `limit` of them.
    fn list_synchronizers(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<SynchronizerInfo>, LockError>;

    /// How much later than the remaining lease it reports a hold may end on the store: zero
    /// where a lease ends when it reads it does (Redis's `PTTL`, PostgreSQL's `expires_at`);
    /// etcd tells whole seconds, cut down, and ends a lease up to half a second after it ran
    /// out. A reader telling a lease that ran out from a release allows this much.
    fn lease_resolution(&self) -> Duration {
        Duration::ZERO
    }

    /// What `name` is in use as now: a synchronizer in use, else the lock (held or free); a
    /// name is one kind at a time.
    fn inspect_name(&self, name: &str) -> Result<NameInfo, LockError> {
        let synchronizer = self.inspect_synchronizer(name)?;
        if synchronizer.is_in_use() {
            return Ok(NameInfo::Synchronizer(synchronizer));
        }
        Ok(NameInfo::Lock(self.inspect(name)?))
    }
}

/// What a name is in use as ([`Inspection::inspect_name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameInfo {
    /// A lock of some kind, or nothing (a free lock).
    Lock(LockInfo),
    /// A semaphore, a latch or an election in use.
    Synchronizer(SynchronizerInfo),
}
