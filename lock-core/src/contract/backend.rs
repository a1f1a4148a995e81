//! The contract a storage backend implements, and the types it is written with.
//!
//! This is the implementor's side of dlock, as `lock_api::RawMutex` is for mutexes: programs
//! that only take locks never need it. A backend implements [`DistributedLock`]; the client in
//! the crate root does the rest.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use crate::contract::acquire::{
    Acquire, AcquireRequest, Grant, GrantOffer, DEFAULT_QUEUE_SLOT,
};
pub use crate::contract::client_record::{
    attach_records, holder_client_ids, ClientRecord, HeldSince, HolderClient, StoredRecord,
};
use crate::contract::error::LockError;
pub use crate::contract::heard::HeardCounts;
pub use crate::contract::inspection::{Inspection, NameInfo};
pub use crate::contract::kind::{LockKind, LockRef};
pub use crate::contract::lease::{ClockDrift, Lease};
pub use crate::contract::limits::{
    validate_count, validate_lease, validate_listing, validate_name, validate_setting,
    validate_wait, MAX_COUNT, MAX_DURATION, MAX_NAME_LEN, RESERVED_NAME_PREFIXES,
};
pub use crate::contract::lock_info::LockStatus;
pub use crate::contract::lock_info::{HeldAs, LockHolder, LockInfo};
pub use crate::contract::loss::LossReason;
pub use crate::contract::owner::OwnerId;
pub use crate::contract::redact::redact_url;
pub use crate::contract::release::{Handover, HoldRef, Release, Renewal};
pub use crate::contract::reminders::Reminders;
pub use crate::contract::synchronizer::{CounterStep, Leader};
pub use crate::contract::synchronizer_info::{LeaderInfo, PermitInfo, SynchronizerInfo};
pub use crate::time::clock::{Clock, SystemClock, Timer, TimerRole};
pub use crate::time::instant_after;
pub use crate::time::signal::{Signal, Wake};

/// A backend's registration of interest in one lock's releases.
///
/// While it is alive, every release of the lock (by any client, in any process the backend can
/// see) notifies [`signal`](ReleaseSubscription::signal). Dropping it ends the interest.
pub trait ReleaseSubscription: Send {
    /// The signal notified on each release of the lock.
    fn signal(&self) -> &Arc<Signal>;

    /// Whether this subscription stopped listening for good (on a cluster, the lock's slot
    /// moved to another node): its signal was notified once more, and the waiter subscribes
    /// again before it next waits. The default: never.
    fn lapsed(&self) -> bool {
        false
    }
}

/// A lock store: the small set of atomic steps the client's algorithm is built on.
///
/// Every method is one atomic step on the store (one round trip on a networked backend). The
/// client does the rest: per-thread reentrancy, waiting, watchdog renewal and loss detection.
/// Names passed in have been checked with [`validate_name`],
/// leases with [`validate_lease`]; a waiter's queue slot is at most [`MAX_DURATION`].
///
/// # Kinds
///
/// Every step names the [`LockKind`] it acts on. A backend says which kinds it keeps with
/// [`supports`](DistributedLock::supports) (the reentrant lock at least); the client never sends
/// it another kind. A kind is data rather than a trait of its own so that one renewal batch
/// carries the holds of every kind (one round trip per watchdog tick), and so that a wrapper
/// (fault injection, a quorum over several stores) forwards every kind with one implementation.
///
/// Implementations must be safe to call from many threads at once, and every call must return
/// within the backend's own timeouts: an unreachable store is an [`LockError::Unavailable`]
/// error, never a hang.
pub trait DistributedLock: Send + Sync + 'static {
    /// Whether this backend keeps locks of `kind`. The default: the reentrant lock only.
    fn supports(&self, kind: LockKind) -> bool {
        kind == LockKind::Reentrant
    }

    /// Takes the lock for the request's owner if it is free or already held by that owner, and
    /// sets its lease from now (never shortening a lease the owner already has there).
    /// Otherwise reports the holder's remaining lease.
    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError>;

    /// Removes `owner`'s hold on `lock` entirely (whatever its count on the store) and wakes the
    /// lock's waiters; says whether waiters of other clients heard it
    /// ([`Release::ReleasedToOthers`]), if it can tell. A release the backend retries after a
    /// lost reply must not act twice.
    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError>;

    /// Whether this backend hands locks of `kind` over: for the kinds queued in each client,
    /// whether [`release_to`](Self::release_to) does; for a kind queued on the store, whether
    /// its release grants the lock to a head waiter that made a [`GrantOffer`]. The default: no.
    fn hands_over(&self, kind: LockKind) -> bool {
        let _ = kind;
        false
    }

    /// Whether this backend keeps the plain lock's waiters, and a read-write lock's writers, in
    /// turn (see [`AcquireRequest::will_wait`]): a refused waiter that will wait is marked, and
    /// a free lock goes to the waiter of its kind marked first, so no waiter waits for more
    /// than the holds of those marked before it. The client then tries again within each
    /// mark's life. The default: no (whoever asks first takes a free lock).
    fn keeps_turns(&self) -> bool {
        false
    }

    /// Removes `owner`'s hold as [`release`](Self::release) does and, in the same atomic step,
    /// gives the lock to `successor` (a waiter of the same client) with its lease, waking
    /// nobody: the client tells the successor itself, so a hand-off costs the release's round
    /// trip and no acquire. The default releases without handing over. A retried call must not
    /// act twice. A store that marks plain waiters (see [`AcquireRequest::will_wait`]) hands
    /// the lock over only if the successor's acquire would take it once free (no live mark,
    /// or the oldest is the successor's waiter's); otherwise it releases.
    fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        let _ = successor;
        self.release(lock, owner).map(Handover::from)
    }

    /// Several acquire attempts at once, each exactly as [`try_acquire`](Self::try_acquire)
    /// would make it (not atomic as a whole: some may be taken and others not). Returns, in
    /// order, what each found. A networked backend sends them together (one round trip); the
    /// default makes them one by one, stopping at the first lock found held (the rest are then
    /// reported held with no known lease, and were not tried).
    fn try_acquire_many(&self, requests: &[AcquireRequest<'_>]) -> Result<Vec<Acquire>, LockError> {
        let mut found = Vec::with_capacity(requests.len());
        for request in requests {
            let acquire = self.try_acquire(request)?;
            let held = !acquire.is_acquired();
            found.push(acquire);
            if held {
                break;
            }
        }
        found.resize(
            requests.len(),
            Acquire::Held {
                remaining_lease: None,
            },
        );
        Ok(found)
    }

    /// Several releases at once, each as [`release`](Self::release) would make it. A networked
    /// backend sends them together (one round trip); the default makes them one by one. An
    /// error for one does not stop the others: each gets its own result.
    fn release_many(&self, holds: &[HoldRef<'_>]) -> Vec<Result<Release, LockError>> {
        holds
            .iter()
            .map(|hold| self.release(hold.lock, hold.owner))
            .collect()
    }

    /// Extends each hold that its owner still has to `lease` from now, in one step for the whole
    /// batch (whatever the kinds in it), never shortening it. Returns, in order, what was found
    /// for each hold. A store of several nodes answers [`Renewal::Unanswered`] for the holds of
    /// a node that failed and the others' answers as they are; an `Err` is for a batch of which
    /// nothing is known.
    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError>;

    /// [`renew`](Self::renew), each part of the batch told to `answered` as soon as the part
    /// of the store that keeps it has answered: the positions in `holds` of the part's holds,
    /// and what was found for each, in the same order. Every hold is told at most once (a part
    /// whose node failed as [`Renewal::Unanswered`]); an `Err` says that nothing is known of
    /// the holds not told yet.
    ///
    /// The client applies each part on arrival, so a store of several nodes overrides this to
    /// let one silent node hold up only the holds it keeps: the holds of the healthy nodes are
    /// renewed on time, whatever the silent node's response timeout. The default renews the
    /// whole batch with [`renew`](Self::renew) and tells it as one part.
    fn renew_parts(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
        answered: &(dyn Fn(&[usize], &[Renewal]) + Sync),
    ) -> Result<(), LockError> {
        let found = self.renew(holds, lease)?;
        let all: Vec<usize> = (0..found.len().min(holds.len())).collect();
        answered(&all, &found[..all.len()]);
        if found.len() == holds.len() {
            Ok(())
        } else {
            Err(LockError::protocol(format!(
                "the backend answered a renewal of {} holds with {} results",
                holds.len(),
                found.len()
            )))
        }
    }

    /// Reports whether `lock` is held, whether `owner` holds it, and the remaining lease.
    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError>;

    /// Deletes `lock` whoever holds it and wakes its waiters. Returns whether it was held.
    ///
    /// A hold it ends is never made again under its id: the store remembers it for a while
    /// (ten minutes), and an acquire under that id (a copy of the request that made it,
    /// delivered late) answers [`Acquire::Gone`]; else the late copy would make the hold again
    /// and its thread, renewing it, would go on believing across the holders that came between.
    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError>;

    /// Starts listening for releases of `lock` on behalf of `owner` (for a kind that queues on
    /// the store, a waiter id: its turn comes on a channel of its own). The client subscribes
    /// *before* retrying an acquire that found the lock held, so a release in between is not
    /// missed. It may block (a networked backend waits for its server's confirmation); the
    /// client never calls it while holding a lock of its own.
    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError>;

    /// How many announcements of `lock`'s releases (for a kind that queues on the store, of
    /// waiter `owner`'s turns) this backend has heard, if it listens for them already, with
    /// no call: `None` when it does not, or cannot tell (the default).
    ///
    /// The client reads it before an acquire's first try and again once it has subscribed
    /// after that try was refused. The same number both times lets it skip the retry that
    /// covers a release between the try and the subscription: no announcement came between,
    /// and a later one reaches the subscription. So two reads may give the same number only
    /// if the backend listened all the while and heard no announcement that a subscription
    /// for `lock` and `owner` would have been woken by; the number is bumped, in the same
    /// critical section, before an announcement wakes the subscriptions registered by then.
    /// A number that moves for other reasons (another lock's announcement, a reconnect) only
    /// costs that retry. [`HeardCounts`] keeps such numbers. It is read on every acquire that
    /// may wait, contended or not: it never blocks, and costs little while the backend listens
    /// for nothing.
    fn releases_heard(&self, lock: LockRef<'_>, owner: &OwnerId) -> Option<u64> {
        let _ = (lock, owner);
        None
    }

    /// Takes the waiter `owner` ([`AcquireRequest::waiter`]) out of `lock`'s store-side queue,
    /// for a waiter that gives up (its wait ended, or a call failed) on a kind that waits on
    /// the store ([`LockKind::waits_on_store`]); `queue_slot` is the one its acquire gave. A
    /// read-write lock's waiter's mark is removed, and the waiters it held off are woken. Does
    /// nothing for other kinds (the default).
    ///
    /// If the waiter's hold was granted the lock meanwhile, the lock stays granted: the client
    /// then finds it held by that hold and releases it.
    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        let _ = (lock, owner, queue_slot);
        Ok(())
    }

    /// The clock this backend measures leases on; the client measures waits and watchdog ticks
    /// on the same one.
    fn clock(&self) -> Arc<dyn Clock> {
        Arc::new(SystemClock)
    }

    /// A step on a semaphore's permits or a latch's count ([`CounterStep`]), for backends that
    /// keep [`LockKind::Semaphore`] or [`LockKind::Latch`]. The default: unsupported.
    fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        Err(LockError::Unsupported {
            name: step.name().to_owned(),
            kind: step.kind(),
        })
    }

    /// The current leader of election `lock` ([`LockKind::Election`]), if any, for backends
    /// that keep elections. The default: unsupported.
    fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        Err(LockError::Unsupported {
            name: lock.name.to_owned(),
            kind: lock.kind,
        })
    }

    /// How much faster this store's clocks may run than the client's: the client keeps every
    /// local deadline this far (or its own setting's, if larger) from the store's expiry. The
    /// default: [`ClockDrift::DEFAULT`]. A backend over several servers' clocks (a quorum) may
    /// ask for more.
    fn clock_drift(&self) -> ClockDrift {
        ClockDrift::DEFAULT
    }

    /// Whether a step may block the calling thread (on a network, a disk, a sleep). Futures
    /// (the `async` surface) run the steps of a store that may block on the client's own
    /// threads, never on the thread that polls them, and guards they made give their releases
    /// to those threads when dropped; the steps of a store that never blocks (in-process, its
    /// steps taking short locks only) run in place. The default: yes.
    fn may_block(&self) -> bool {
        true
    }

    /// A short name for the store (`"redis"`, `"postgres"`, `"memory"`), the `backend` label
    /// of the client's metrics. The default: `"custom"`.
    fn backend_name(&self) -> &'static str {
        "custom"
    }

    /// Whether the store keeps client records ([`publish_client`](Self::publish_client)): a
    /// client publishes its record only then. The default: no.
    fn keeps_client_records(&self) -> bool {
        false
    }

    /// What the store holds, read without taking anything (who holds what, listings,
    /// synchronizers, client records), for tools that show any backend (`dlock status`). The
    /// default: the store cannot be inspected.
    fn inspection(&self) -> Option<&dyn Inspection> {
        None
    }

    /// Keeps `client`'s record with its current `holds` (each with when it was taken) for
    /// `ttl`, in place of what it kept for that client before: what inspection reads to say
    /// who holds a lock and since when. The client's presence thread calls it at its first
    /// hold, within a second of each change, and every third of `ttl`; a client that dies
    /// shows as such once `ttl` has run out. The default: kept nowhere.
    fn publish_client(
        &self,
        client: &ClientRecord,
        holds: &[HeldSince<'_>],
        ttl: Duration,
    ) -> Result<(), LockError> {
        let _ = (client, holds, ttl);
        Ok(())
    }
}

/// The whole answer of a renewal made by parts: what a backend that overrides
/// [`renew_parts`](DistributedLock::renew_parts) answers to [`renew`](DistributedLock::renew).
/// `renew_parts` is called with the collector; a hold it never tells is
/// [`Renewal::Unanswered`].
///
/// ```
/// use dlocks::backend::{renewal_of_parts, Renewal};
///
/// let found = renewal_of_parts(3, |answered| {
///     answered(&[2], &[Renewal::Renewed]);
///     answered(&[0], &[Renewal::Renewed]);
///     Ok(())
/// })?;
/// assert_eq!(found, [Renewal::Renewed, Renewal::Unanswered, Renewal::Renewed]);
/// # Ok::<(), dlocks::LockError>(())
/// ```
///
/// # Errors
///
/// What `renew_parts` returns.
pub fn renewal_of_parts(
    holds: usize,
    renew_parts: impl FnOnce(&(dyn Fn(&[usize], &[Renewal]) + Sync)) -> Result<(), LockError>,
) -> Result<Vec<Renewal>, LockError> {
    let found = parking_lot::Mutex::new(vec![Renewal::Unanswered; holds]);
    renew_parts(&|indexes, part| {
        let mut found = found.lock();
        for (&index, renewal) in indexes.iter().zip(part) {
            if let Some(slot) = found.get_mut(index) {
                *slot = *renewal;
            }
        }
    })?;
    Ok(found.into_inner())
}

/// A shared backend is a backend: several clients can use one `Arc<dyn DistributedLock>`.
impl<T: DistributedLock + ?Sized> DistributedLock for Arc<T> {
    fn supports(&self, kind: LockKind) -> bool {
        (**self).supports(kind)
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        (**self).try_acquire(request)
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        (**self).release(lock, owner)
    }

    fn hands_over(&self, kind: LockKind) -> bool {
        (**self).hands_over(kind)
    }

    fn keeps_turns(&self) -> bool {
        (**self).keeps_turns()
    }

    fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        (**self).release_to(lock, owner, successor)
    }

    fn try_acquire_many(&self, requests: &[AcquireRequest<'_>]) -> Result<Vec<Acquire>, LockError> {
        (**self).try_acquire_many(requests)
    }

    fn release_many(&self, holds: &[HoldRef<'_>]) -> Vec<Result<Release, LockError>> {
        (**self).release_many(holds)
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        (**self).renew(holds, lease)
    }

    fn renew_parts(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
        answered: &(dyn Fn(&[usize], &[Renewal]) + Sync),
    ) -> Result<(), LockError> {
        (**self).renew_parts(holds, lease, answered)
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        (**self).status(lock, owner)
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        (**self).force_unlock(lock)
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        (**self).subscribe(lock, owner)
    }

    fn releases_heard(&self, lock: LockRef<'_>, owner: &OwnerId) -> Option<u64> {
        (**self).releases_heard(lock, owner)
    }

    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        (**self).cancel_wait(lock, owner, queue_slot)
    }

    fn clock(&self) -> Arc<dyn Clock> {
        (**self).clock()
    }

    fn clock_drift(&self) -> ClockDrift {
        (**self).clock_drift()
    }

    fn backend_name(&self) -> &'static str {
        (**self).backend_name()
    }

    fn may_block(&self) -> bool {
        (**self).may_block()
    }

    fn keeps_client_records(&self) -> bool {
        (**self).keeps_client_records()
    }

    fn inspection(&self) -> Option<&dyn Inspection> {
        (**self).inspection()
    }

    fn publish_client(
        &self,
        client: &ClientRecord,
        holds: &[HeldSince<'_>],
        ttl: Duration,
    ) -> Result<(), LockError> {
        (**self).publish_client(client, holds, ttl)
    }

    fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        (**self).counter(step)
    }

    fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        (**self).leader(lock)
    }
}

impl fmt::Debug for dyn DistributedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dyn DistributedLock")
    }
}
