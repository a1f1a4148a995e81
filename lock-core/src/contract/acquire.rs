//! The acquire step: what a backend is asked and what it answers.

use std::time::Duration;

use crate::contract::kind::LockRef;
use crate::contract::loss::LossReason;
use crate::contract::owner::OwnerId;

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
    /// The hold the request names is gone for good: it extended a hold
    /// ([`AcquireRequest::reentry`]) the store no longer has (released, expired,
    /// force-unlocked, lost with the store's data), or it would make a hold under the id of
    /// one an operator force-unlocked (a copy of the request that made it, arriving late).
    /// Nothing was changed: an ended hold is never made again under its id.
    Gone {
        /// How the hold ended, as far as the store can tell ([`LossReason::Gone`] if it
        /// cannot).
        reason: LossReason,
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

/// One acquire attempt: which lock, for whom, with which lease.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AcquireRequest<'a> {
    /// The lock to take.
    pub lock: LockRef<'a>,
    /// The hold it makes or extends: the id the store records as the holder. A hold's id is
    /// its own ([`OwnerId::hold`]): no other hold, of this thread or any other, ever has it.
    pub owner: &'a OwnerId,
    /// Who waits, for a kind that queues on the store ([`LockKind::queues_on_store`](crate::backend::LockKind::queues_on_store)): the id
    /// of the caller's place in the queue (the thread's, [`OwnerId::current_thread`]), kept
    /// across its attempts and told its turn on its own channel; the hold it takes is still
    /// [`owner`](AcquireRequest::owner). The same as `owner` unless set.
    pub waiter: &'a OwnerId,
    /// For a read lock ([`LockKind::Read`](crate::backend::LockKind::Read)): the caller's own write hold on the same name, if
    /// it has one. A writer may read (a downgrade); the store lets the read in next to this
    /// write hold and no other.
    pub write_hold: Option<&'a OwnerId>,
    /// The lease to set (from now) when it is taken. A lease the owner already has is never
    /// shortened: re-entering with a shorter lease keeps the longer one.
    pub lease: Duration,
    /// The owner already holds this lock, as far as the client knows: the request extends that
    /// hold, and only that hold. A store that no longer has it answers [`Acquire::Gone`] and
    /// changes nothing: an ended hold is never made again under its id, whoever holds the lock
    /// now (else its old guards would go on believing, across another owner's hold). If the
    /// step fails, or its effect must be taken back (replicas that did not acknowledge it, a
    /// quorum that was not reached), the existing hold must be left in place (never released):
    /// the client still relies on it.
    pub reentry: bool,
    /// The acquire's first attempt: the caller has no sign yet that the lock is held. A
    /// backend may then send the step in the form that costs least when it is granted, and
    /// read what a refusal needs in a second call (a waiter's later attempts, made when a
    /// release was announced, are the ones that meet a held lock). A hint only: the answer is
    /// the same either way. `false` unless set.
    pub first_try: bool,
    /// What the store keeps with a new hold for everyone to read: a leader's candidate id
    /// ([`LockKind::Election`](crate::backend::LockKind::Election)). `None` for other kinds.
    pub value: Option<&'a str>,
    /// Whether the caller will wait if the lock is held: a kind that queues on the store
    /// ([`LockKind::queues_on_store`](crate::backend::LockKind::queues_on_store)) enqueues the
    /// owner only then.
    ///
    /// A [`Reentrant`](crate::backend::LockKind::Reentrant) or
    /// [`Fenced`](crate::backend::LockKind::Fenced) acquire refused then marks its waiter as
    /// waiting for the name's plain lock, after the waiters marked before it. While marks
    /// live, a free plain lock goes to the waiter of the oldest live mark alone: every other
    /// acquire, a new one included, is refused (answered with the time that mark has left), and
    /// marks itself if it will wait. A hold taken removes its waiter's mark. So a waiter waits
    /// for at most the holds of the waiters marked before it, however fast other processes
    /// ask. A store that does not mark plain waiters lets whoever asks first take a free lock.
    ///
    /// A read-write lock goes to readers and writers by turns:
    ///
    /// - A [`Write`](crate::backend::LockKind::Write) refused then marks its waiter as a writer
    ///   waiting. While a writer's mark lives, no new reader is let in, so readers coming and
    ///   going never starve a writer. A write hold taken removes its waiter's mark.
    /// - A [`Read`](crate::backend::LockKind::Read) refused by a writer's hold then marks its
    ///   waiter as a reader waiting. Such a reader goes in past the writers' marks, and no
    ///   writer takes the lock while a reader's mark lives, so writers one after another never
    ///   starve readers. A read hold taken removes its waiter's mark.
    ///
    /// A hold that reads already, and the write holder's own read, always come in.
    pub will_wait: bool,
    /// For a kind that queues on the store: how long this waiter's place is kept after the one
    /// ahead of it got the lock or timed out, before the waiter is taken for dead and dropped
    /// from the queue (Redisson's fair-lock `threadWaitTime`). For a kind that marks its
    /// waiters ([`LockKind::marks_waiters`](crate::backend::LockKind::marks_waiters)): how
    /// long its mark lives after this attempt (it tries again before then, so a waiter that
    /// died holds the others off for no longer).
    pub queue_slot: Duration,
    /// For a kind that queues on the store: the waiter accepts being handed the lock by the
    /// release that frees it, on these terms (see [`GrantOffer`]).
    pub grant: Option<GrantOffer>,
    /// The client's watchdog renews the hold this request makes (`lease` is the watchdog's):
    /// a backend may then grant it for less than `lease` ([`Grant::valid_for`]) when its
    /// first renewal completes the grant, which the client makes, for a hold granted for less
    /// than two thirds of its lease, once half of what it was granted has passed (at once if
    /// that is under a second). `false` unless set.
    pub renewed: bool,
}

/// A store-queued waiter's offer to be handed the lock directly: when the release that frees
/// the lock finds this waiter at the head of the queue, it makes the request's hold
/// ([`AcquireRequest::owner`]) the holder with `lease` in the same step and wakes the waiter
/// on its subscription, so no other process can take the lock in between. The lease is short:
/// a waiter that died meanwhile keeps the lock no longer than `lease`.
///
/// The waiter believes the grant only from the store's answer to its own step: woken, it makes
/// an acquire as the offered hold, which the store answers by re-entering the granted hold
/// (with the request's full lease) or by saying who holds. The wake-up message alone proves
/// nothing: anyone may publish on a channel (Redis `PUBLISH`, PostgreSQL `NOTIFY` need no
/// right on the lock's data), and a role that may read the lock's data may read the offer.
/// A backend whose store keeps a secret of the offer from the lock's readers, and sends it
/// back with the grant, may answer that acquire itself (PostgreSQL does, for a
/// [`renewed`](AcquireRequest::renewed) hold): granted, for what is left of `lease` counted
/// from when the offer's attempt was sent ([`Grant::valid_for`]).
///
/// Each attempt makes its own offer, numbered, which replaces the waiter's earlier one on the
/// store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GrantOffer {
    /// The lease a grant sets, until the waiter claims it.
    pub lease: Duration,
    /// The attempt that made the offer: a number in `1..2^63` of its own, which the store
    /// keeps with the offer and names in the grant's wake-up.
    pub attempt: u64,
}

impl GrantOffer {
    /// The longest lease the client's waiters offer to be granted (or their own lease, if
    /// shorter): long enough for the grant's message and the waiter's claim, short enough
    /// that a waiter that died just then holds the lock up no longer than this.
    pub const MAX_LEASE: Duration = Duration::from_secs(2);

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
            first_try: false,
            value: None,
            renewed: false,
        }
    }

    /// The same request, for a hold the client's watchdog renews or not (see
    /// [`renewed`](AcquireRequest::renewed)).
    pub fn renewed_by_watchdog(mut self, renewed: bool) -> Self {
        self.renewed = renewed;
        self
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

    /// The same request, as the acquire's first attempt or not (see
    /// [`first_try`](AcquireRequest::first_try)).
    pub fn as_first_try(mut self, first_try: bool) -> Self {
        self.first_try = first_try;
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
