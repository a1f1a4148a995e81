//! What a store is asked, and what it answers: the steps of the backend contract, named with
//! the model's small ids.

use crate::few::Few;
use crate::kind::Kind;

/// A point on the store's clock (model ticks, or microseconds in a differential run).
pub type Time = u64;

/// A hold's id: its own, never reused (`<client>:<hold number>` on a real store).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HoldId(pub u32);

/// A waiter's place in a store-side queue: its thread's (`<client>:<thread number>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaiterId(pub u32);

/// A request's id: the same for a request and every copy of it sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u32);

/// A name, by its index.
pub type Name = u8;

/// A queued waiter's offer to be handed the lock by the release that frees it: its attempt's
/// secret number, the hold a grant makes, and the grant's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Offer {
    /// The attempt that made it (secret to the waiter and the store).
    pub attempt: u64,
    /// The hold a grant makes.
    pub hold: HoldId,
    /// The grant's lease.
    pub lease: Time,
}

/// How the store ends the hold an acquire makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tenure {
    /// `lease` from when the step lands (Redis's `PEXPIRE`, PostgreSQL's server clock, the
    /// in-process map).
    Landed,
    /// At this instant: a lease of its own, granted before the step was sent (etcd's fixed
    /// leases). A copy that lands after it ends makes nothing.
    Until(Time),
    /// On `client`'s session: one lease its watchdog keeps alive for all the client's holds on
    /// it (etcd's). Made only while the session's gate is still `gate`: the backend moves the
    /// gate when it resolves an attempt as not made, so a copy landing after that makes
    /// nothing.
    Session {
        /// The client.
        client: u8,
        /// The gate the step was sent with.
        gate: u64,
    },
}

/// An acquire: take (or extend) `kind` on `name` for `owner` with `lease`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Acquire {
    /// The name.
    pub name: Name,
    /// The kind.
    pub kind: Kind,
    /// The hold it makes or extends.
    pub owner: HoldId,
    /// Its place in a store-side queue.
    pub waiter: WaiterId,
    /// The lease, from when the store takes the step.
    pub lease: Time,
    /// An extend of a hold the owner has: never makes it.
    pub reentry: bool,
    /// For a read: the caller's own write hold on the name.
    pub write_hold: Option<HoldId>,
    /// The caller waits if refused (a fair waiter then queues; a writer then holds new readers
    /// off).
    pub will_wait: bool,
    /// A fair waiter's grant offer.
    pub offer: Option<Offer>,
    /// How the hold ends.
    pub tenure: Tenure,
}

/// A counter step of a semaphore or a latch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Sets the permits if never set: 1 if it did, else 0.
    TrySetPermits(u64),
    /// Adds permits: the permits available after.
    AddPermits(u64),
    /// The permits available.
    AvailablePermits,
    /// Sets the count if it has none: 1 if it did, else 0.
    TrySetCount(u64),
    /// Counts down by one: the count after.
    CountDown,
    /// The count.
    Count,
}

impl Counter {
    /// The kind it is a step of.
    pub fn kind(self) -> Kind {
        match self {
            Counter::TrySetPermits(_) | Counter::AddPermits(_) | Counter::AvailablePermits => {
                Kind::Semaphore
            }
            _ => Kind::Latch,
        }
    }

    /// Whether one sent again answers as its first attempt did (it is latched by its
    /// request id): the set-once steps.
    pub fn is_set_once(self) -> bool {
        matches!(self, Counter::TrySetPermits(_) | Counter::TrySetCount(_))
    }
}

/// One step of the backend contract.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// `try_acquire`.
    Acquire(Acquire),
    /// `release`: the hold `owner` of `kind` on `name`.
    Release {
        /// The name.
        name: Name,
        /// The kind.
        kind: Kind,
        /// The hold.
        owner: HoldId,
    },
    /// `release_to`: the hold `owner` handed to the hold `successor` with `lease`.
    ReleaseTo {
        /// The name.
        name: Name,
        /// The kind.
        kind: Kind,
        /// The hold released.
        owner: HoldId,
        /// The hold it goes to.
        successor: HoldId,
        /// The successor's lease.
        lease: Time,
    },
    /// `renew`: each hold extended to `lease` from now if its owner still has it.
    Renew {
        /// The holds: name, kind, owner.
        holds: Few<(Name, Kind, HoldId)>,
        /// The lease.
        lease: Time,
        /// On a store with sessions, the client whose session the holds are on, or move
        /// onto: a hold on the session is not extended by the step (its client's keep-alive
        /// does that) but found there, and one on a lease of its own (a fair turn's) moves
        /// onto the session, lasting what the session does.
        session: Option<u8>,
    },
    /// `status` of `name` as `kind` for `owner`.
    Status {
        /// The name.
        name: Name,
        /// The kind.
        kind: Kind,
        /// Whose hold is asked about.
        owner: HoldId,
    },
    /// `force_unlock`.
    ForceUnlock {
        /// The name.
        name: Name,
        /// The kind.
        kind: Kind,
    },
    /// `counter`.
    Counter {
        /// The name.
        name: Name,
        /// The step.
        step: Counter,
    },
    /// `leader`: the current leader's hold.
    Leader {
        /// The name.
        name: Name,
    },
    /// `cancel_wait`: the waiter leaves the fair queue, or (a writer) stops holding new
    /// readers off.
    CancelWait {
        /// The name.
        name: Name,
        /// The kind it waited for.
        kind: Kind,
        /// The waiter.
        waiter: WaiterId,
    },
}

impl Step {
    /// Whether a backend may send it again after its reply was lost: every step whose second
    /// run changes nothing the first did not (an acquire re-enters the hold the first made, a
    /// renewal or a read repeats) or answers as the first (a latched step); not a count-down,
    /// permits added, or a force unlock (whose answer tells what it ended).
    pub fn may_be_sent_again(&self) -> bool {
        !matches!(
            self,
            Step::ForceUnlock { .. }
                | Step::Counter {
                    step: Counter::CountDown | Counter::AddPermits(_),
                    ..
                }
        )
    }

    /// Whether one sent again answers as its first attempt did because the store keeps its
    /// answer by request id: releases and set-once counter steps.
    pub fn is_latched(&self) -> bool {
        match self {
            Step::Release { .. } | Step::ReleaseTo { .. } => true,
            Step::Counter { step, .. } => step.is_set_once(),
            _ => false,
        }
    }
}

/// What a step answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// Taken (a latch: open), with the new or kept token for kinds that issue one.
    Acquired {
        /// The hold's token.
        token: Option<u64>,
    },
    /// Another owner holds it (or the latch is closed, or no permit is free).
    Held,
    /// The extended hold is gone: nothing changed.
    Gone,
    /// The name is in use as another kind.
    WrongKind,
    /// The store does not do this step for this kind.
    Unsupported,
    /// The hold was removed.
    Released,
    /// The hold was not there: nothing changed.
    NotHeld,
    /// The hold was removed and the successor holds the lock.
    Handed,
    /// For each hold of a renewal: whether it was renewed.
    Renewed(Few<bool>),
    /// Whether the lock is held, and by the owner asked about.
    Status {
        /// Held by anyone.
        locked: bool,
        /// Held by the owner asked about.
        mine: bool,
    },
    /// Whether the force unlock ended a hold.
    Forced(bool),
    /// A counter step's number.
    Count(u64),
    /// The leader's hold.
    Leader(Option<HoldId>),
    /// A queue left.
    Done,
}

/// A grant the store made on a fair release: told on the waiter's own channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Grant {
    /// The waiter told.
    pub waiter: WaiterId,
    /// The attempt whose offer was granted.
    pub attempt: u64,
    /// The hold that holds now.
    pub hold: HoldId,
    /// The message carries the offer's secret, which the store keeps from its readers
    /// ([`Settings::proofs`](crate::store::Settings::proofs)): only the store's own release
    /// can send it.
    pub proven: bool,
}
