//! The contract a storage backend implements, and the types it is written with.
//!
//! This is the implementor's side of dlock, as `lock_api::RawMutex` is for mutexes: programs
//! that only take locks never need it. A backend implements [`DistributedLock`]; the client in
//! the crate root does the rest.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use crate::clock::{Clock, SystemClock, Timer, TimerRole};
pub use crate::events::LossReason;
pub use crate::kind::{LockKind, LockRef};
pub use crate::lease::{ClockDrift, Lease};
pub use crate::limits::{
    instant_after, validate_count, validate_lease, validate_name, validate_setting, validate_wait,
    MAX_COUNT, MAX_DURATION, MAX_NAME_LEN, RESERVED_NAME_PREFIXES,
};
pub use crate::lock_info::{HeldAs, LockHolder, LockInfo};
pub use crate::owner::OwnerId;
pub use crate::signal::{Signal, Wake};
use crate::LockError;

/// What a single acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Acquire {
    /// The owner now holds the lock (it was free, or the owner already held it) with the
    /// requested lease, on the terms of the grant.
    Acquired(Grant),
    /// Another owner holds the lock; its remaining lease, when the backend knows one.
    Held {
        /// Time until the holder's lease ends, as seen by the backend (`None`: no expiry).
        remaining_lease: Option<Duration>,
    },
}

impl Acquire {
    /// Taken, with the requested lease and nothing more to say.
    pub const ACQUIRED: Acquire = Acquire::Acquired(Grant::PLAIN);

    /// Whether the lock was taken.
    pub fn is_acquired(&self) -> bool {
        matches!(self, Acquire::Acquired(_))
    }
}

/// The terms on which a lock was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Grant {
    /// How long the hold is known to be valid from when the request was sent, if less than
    /// the lease asked for (a quorum backend subtracts the time the quorum took and a clock
    /// drift allowance).
    pub valid_for: Option<Duration>,
    /// The fencing token of this hold, for kinds that issue one.
    pub fencing_token: Option<u64>,
}

impl Grant {
    /// The requested lease, no token.
    pub const PLAIN: Grant = Grant {
        valid_for: None,
        fencing_token: None,
    };

    /// Valid for `valid_for` only.
    pub fn valid_for(mut self, valid_for: Duration) -> Self {
        self.valid_for = Some(valid_for);
        self
    }

    /// With fencing token `token`.
    pub fn with_fencing_token(mut self, token: u64) -> Self {
        self.fencing_token = Some(token);
        self
    }
}

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

/// What a release that may hand the lock over ([`DistributedLock::release_to`]) found.
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

/// A snapshot of one lock, as the backend sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// Some owner holds the lock.
    pub locked: bool,
    /// The owner asked about holds it.
    pub held_by_owner: bool,
    /// The holder's remaining lease (`None` when the lock is free or has no expiry).
    pub remaining_lease: Option<Duration>,
}

impl LockStatus {
    /// The status of a lock nobody holds.
    pub const FREE: LockStatus = LockStatus {
        locked: false,
        held_by_owner: false,
        remaining_lease: None,
    };

    /// The status of a lock that is held.
    pub fn held(held_by_owner: bool, remaining_lease: Option<Duration>) -> Self {
        LockStatus {
            locked: true,
            held_by_owner,
            remaining_lease,
        }
    }
}

/// One acquire attempt: which lock, for whom, with which lease.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AcquireRequest<'a> {
    /// The lock to take.
    pub lock: LockRef<'a>,
    /// The hold it makes or extends: the id the store records as the holder. A hold's id is
    /// its own ([`OwnerId::hold`]): no other hold, of this thread or any other, ever has it.
    pub owner: &'a OwnerId,
    /// Who waits, for a kind that queues on the store ([`LockKind::queues_on_store`]): the id
    /// of the caller's place in the queue (the thread's, [`OwnerId::current_thread`]), kept
    /// across its attempts and told its turn on its own channel; the hold it takes is still
    /// [`owner`](AcquireRequest::owner). The same as `owner` unless set.
    pub waiter: &'a OwnerId,
    /// For a read lock ([`LockKind::Read`]): the caller's own write hold on the same name, if
    /// it has one. A writer may read (a downgrade); the store lets the read in next to this
    /// write hold and no other.
    pub write_hold: Option<&'a OwnerId>,
    /// The lease to set (from now) when it is taken. A lease the owner already has is never
    /// shortened: re-entering with a shorter lease keeps the longer one.
    pub lease: Duration,
    /// The owner already holds this lock, as far as the client knows: the request extends that
    /// hold. If it fails, or its effect must be taken back (replicas that did not acknowledge
    /// it, a quorum that was not reached), the existing hold must be left in place (never
    /// released): the client still relies on it.
    pub reentry: bool,
    /// What the store keeps with a new hold for everyone to read: a leader's candidate id
    /// ([`LockKind::Election`]). `None` for other kinds.
    pub value: Option<&'a str>,
    /// Whether the caller will wait if the lock is held: a kind that queues on the store
    /// ([`LockKind::queues_on_store`]) enqueues the owner only then.
    pub will_wait: bool,
    /// For a kind that queues on the store: how long this waiter's place is kept after the one
    /// ahead of it got the lock or timed out, before the waiter is taken for dead and dropped
    /// from the queue (Redisson's fair-lock `threadWaitTime`).
    pub queue_slot: Duration,
    /// For a kind that queues on the store: the waiter accepts being handed the lock by the
    /// release that frees it, on these terms (see [`GrantOffer`]).
    pub grant: Option<GrantOffer>,
}

/// A store-queued waiter's offer to be handed the lock directly: when the release that frees
/// the lock finds this waiter at the head of the queue, it makes the request's hold
/// ([`AcquireRequest::owner`]) the holder with `lease` in the same step and tells the waiter
/// on its subscription ([`ReleaseSubscription::granted`] with `attempt`), so the waiter
/// returns without an acquire of its own. The lease is short: the waiter confirms the hold at
/// once with its first renewal, and a waiter that died meanwhile keeps the lock no longer than
/// `lease`.
///
/// Each attempt makes its own offer, which replaces the waiter's earlier one on the store. A
/// grant is believed only for the attempt it names, and only while that attempt is the
/// waiter's latest: a grant message that arrives after a later attempt was refused is about a
/// grant that had ended by then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GrantOffer {
    /// The lease a grant sets, until the waiter confirms it.
    pub lease: Duration,
    /// The attempt that made the offer: unique within the process (hold ids are unique across
    /// processes), so a grant made to another attempt is never taken for this one's.
    pub attempt: u64,
}

impl GrantOffer {
    /// An offer to be granted the lock with `lease`, made by the attempt `attempt`.
    pub fn new(lease: Duration, attempt: u64) -> Self {
        GrantOffer { lease, attempt }
    }
}

impl<'a> AcquireRequest<'a> {
    /// A request for `owner` to take `lock` with `lease`, trying once.
    pub fn new(lock: LockRef<'a>, owner: &'a OwnerId, lease: Duration) -> Self {
        AcquireRequest {
            lock,
            owner,
            waiter: owner,
            write_hold: None,
            lease,
            will_wait: false,
            queue_slot: DEFAULT_QUEUE_SLOT,
            grant: None,
            reentry: false,
            value: None,
        }
    }

    /// The same request, keeping `value` with the hold it makes (see
    /// [`value`](AcquireRequest::value)).
    pub fn with_value(mut self, value: Option<&'a str>) -> Self {
        self.value = value;
        self
    }

    /// The same request from `waiter`'s place in a store-side queue (see
    /// [`waiter`](AcquireRequest::waiter)).
    pub fn queued_as(mut self, waiter: &'a OwnerId) -> Self {
        self.waiter = waiter;
        self
    }

    /// The same request from a caller whose write hold on the name is `write_hold` (see
    /// [`write_hold`](AcquireRequest::write_hold)).
    pub fn under_write_hold(mut self, write_hold: Option<&'a OwnerId>) -> Self {
        self.write_hold = write_hold;
        self
    }

    /// The same request from an owner that already holds the lock (see
    /// [`reentry`](AcquireRequest::reentry)).
    pub fn reentering(mut self, reentry: bool) -> Self {
        self.reentry = reentry;
        self
    }

    /// The same request from a waiter that accepts a direct grant on `offer`'s terms.
    pub fn accepting_grant(mut self, offer: GrantOffer) -> Self {
        self.grant = Some(offer);
        self
    }

    /// The same request from a caller that will wait if the lock is held, keeping its place in
    /// a store-side queue for `queue_slot`.
    pub fn waiting(mut self, will_wait: bool, queue_slot: Duration) -> Self {
        self.will_wait = will_wait;
        self.queue_slot = queue_slot;
        self
    }
}

/// The queue slot of a request made with [`AcquireRequest::new`]: Redisson's default fair-lock
/// wait timeout, five minutes.
pub const DEFAULT_QUEUE_SLOT: Duration = Duration::from_secs(300);

/// A step on a synchronizer's counter: a semaphore's permits or a latch's count. Each is one
/// atomic step on the store, answered with a number (see each variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CounterStep<'a> {
    /// Sets semaphore `name`'s permits to `permits` if they were never set. Answers 1 if it
    /// did, 0 if they were set already.
    TrySetPermits {
        /// The semaphore.
        name: &'a str,
        /// Its number of permits.
        permits: u64,
    },
    /// Makes `permits` more permits of semaphore `name` available (setting them if they were
    /// never set), waking its waiters. Answers the permits available after.
    AddPermits {
        /// The semaphore.
        name: &'a str,
        /// How many permits are added.
        permits: u64,
    },
    /// Answers the permits of semaphore `name` available now; permits whose lease ran out
    /// count as given back.
    AvailablePermits {
        /// The semaphore.
        name: &'a str,
    },
    /// Sets latch `name`'s count to `count` if it has none (a latch that reached zero has
    /// none). Answers 1 if it did, 0 otherwise.
    TrySetCount {
        /// The latch.
        name: &'a str,
        /// Its count.
        count: u64,
    },
    /// Counts latch `name` down by one; at zero the latch opens and its waiters are woken.
    /// Answers the count after (0 for a latch that was open already).
    CountDown {
        /// The latch.
        name: &'a str,
    },
    /// Answers latch `name`'s count (0: open).
    Count {
        /// The latch.
        name: &'a str,
    },
}

impl CounterStep<'_> {
    /// The synchronizer the step is on.
    pub fn name(&self) -> &str {
        match self {
            CounterStep::TrySetPermits { name, .. }
            | CounterStep::AddPermits { name, .. }
            | CounterStep::AvailablePermits { name }
            | CounterStep::TrySetCount { name, .. }
            | CounterStep::CountDown { name }
            | CounterStep::Count { name } => name,
        }
    }

    /// The kind of synchronizer the step is on.
    pub fn kind(&self) -> LockKind {
        match self {
            CounterStep::TrySetPermits { .. }
            | CounterStep::AddPermits { .. }
            | CounterStep::AvailablePermits { .. } => LockKind::Semaphore,
            _ => LockKind::Latch,
        }
    }
}

/// The holder of a leader election, as the store has it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The candidate id the leader campaigned with.
    pub candidate: String,
    /// The fencing token of its leadership.
    pub token: u64,
    /// Its remaining lease (`None`: no expiry).
    pub remaining_lease: Option<Duration>,
}

impl Leader {
    /// A leader `candidate` with `token`, whose lease has `remaining_lease` left.
    pub fn new(
        candidate: impl Into<String>,
        token: u64,
        remaining_lease: Option<Duration>,
    ) -> Self {
        Leader {
            candidate: candidate.into(),
            token,
            remaining_lease,
        }
    }
}

/// One hold to renew in a batch: the lock and its owner.
#[derive(Debug, Clone, Copy)]
pub struct HoldRef<'a> {
    /// The lock.
    pub lock: LockRef<'a>,
    /// The owner whose lease is to be extended.
    pub owner: &'a OwnerId,
}

/// A backend's registration of interest in one lock's releases.
///
/// While it is alive, every release of the lock (by any client, in any process the backend can
/// see) notifies [`signal`](ReleaseSubscription::signal). Dropping it ends the interest.
pub trait ReleaseSubscription: Send {
    /// The signal notified on each release of the lock.
    fn signal(&self) -> &Arc<Signal>;

    /// Whether the store has handed the lock over on the offer of attempt `attempt` (see
    /// [`GrantOffer`]), as announced on this subscription's channel. The default: never.
    fn granted(&self, attempt: u64) -> bool {
        let _ = attempt;
        false
    }

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
/// leases with [`validate_lease`].
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

    /// Removes `owner`'s hold as [`release`](Self::release) does and, in the same atomic step,
    /// gives the lock to `successor` (a waiter of the same client) with its lease, waking
    /// nobody: the client tells the successor itself, so a hand-off costs the release's round
    /// trip and no acquire. The default releases without handing over. A retried call must not
    /// act twice.
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

    /// Reports whether `lock` is held, whether `owner` holds it, and the remaining lease.
    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError>;

    /// Deletes `lock` whoever holds it and wakes its waiters. Returns whether it was held.
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

    /// Takes the waiter `owner` ([`AcquireRequest::waiter`]) out of `lock`'s store-side queue,
    /// for a waiter that gives up (its wait ended, or a call failed) on a kind that queues on
    /// the store; `queue_slot` is the one its acquire gave. Does nothing for other kinds (the
    /// default).
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
