//! The release and renewal steps, each acting only on the hold it names.

use crate::contract::acquire::Grant;
use crate::contract::kind::LockRef;
use crate::contract::loss::LossReason;
use crate::contract::owner::OwnerId;

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The owner's hold was removed and waiters were woken.
    Released,
    /// The owner's hold was removed and waiters were woken, among them waiters of other
    /// clients (other processes). The releasing client gives them a turn: its next attempts
    /// on the lock wait a few round trips (or for the next release) first, and its releases
    /// go through the store rather than straight to a waiter of its own, until a release
    /// answers [`Released`](Release::Released) again. A backend that cannot tell who waits,
    /// or whose waiters hear of a release as soon as it happens, answers `Released`.
    ReleasedToOthers,
    /// The owner did not hold the lock (its lease had expired, it was force-unlocked, or
    /// another owner holds it). Nothing was changed.
    NotHeld,
}

/// What a release that may hand the lock over ([`DistributedLock::release_to`](crate::backend::DistributedLock::release_to)) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Handover {
    /// The owner's hold was removed and the lock given to the successor in the same step, on
    /// these terms (the lease runs from when the release was sent). Nobody else was woken.
    Granted(Grant),
    /// The owner's hold was removed and waiters were woken; the successor was not given the
    /// lock (the backend does not hand over this kind).
    Released,
    /// The owner did not hold the lock; nothing was changed.
    NotHeld,
}

impl Release {
    /// Whether the owner's hold was removed.
    pub fn is_released(self) -> bool {
        matches!(self, Release::Released | Release::ReleasedToOthers)
    }
}

impl From<Release> for Handover {
    fn from(release: Release) -> Self {
        match release {
            Release::Released | Release::ReleasedToOthers => Handover::Released,
            Release::NotHeld => Handover::NotHeld,
        }
    }
}

/// What a renewal found for one hold of the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Renewal {
    /// The owner still held the lock; its lease now runs from the renewal.
    Renewed,
    /// The owner no longer held the lock, and why, as far as the store can tell. Nothing was
    /// changed (a lock that is gone is never brought back).
    Lost(LossReason),
    /// The part of the store that keeps this hold (one node of several) did not answer; the
    /// rest of the batch was answered. The hold is as it was as far as the client knows: its
    /// renewal is tried again, and it is lost if its deadline comes first. A failure of one
    /// node thus touches only the holds on that node.
    Unanswered,
}

/// One hold to renew in a batch: the lock and its owner.
#[derive(Debug, Clone, Copy)]
pub struct HoldRef<'a> {
    /// The lock.
    pub lock: LockRef<'a>,
    /// The owner whose lease is to be extended.
    pub owner: &'a OwnerId,
}
