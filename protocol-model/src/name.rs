//! One name's state on the store: its holds and their leases, its fair queue, its counters and
//! tombstones; which kind it is in use as, and what its holds are.

use crate::few::Few;
use crate::kind::{Family, Kind};
use crate::records::Tombstone;
use crate::step::Offer;
use crate::step::{Grant, HoldId, Time, WaiterId};

/// A hold on the store and the end of its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lease {
    /// The hold.
    pub hold: HoldId,
    /// When its lease ends (the hold is over at this instant).
    pub until: Time,
    /// The client whose session it is on (kept alive with the session), if any.
    pub session: Option<u8>,
    /// Made by a fair release for the head waiter's place, which its waiter has not written
    /// since (etcd's turn): only such a hold moves onto its waiter's session when renewed.
    pub unclaimed: bool,
}

/// A fair waiter in the queue, with its latest attempt's offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Queued {
    /// The waiter.
    pub waiter: WaiterId,
    /// Its offer, if it made one.
    pub offer: Option<Offer>,
}

/// One name's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NameState {
    /// What it was taken as, while in use.
    pub family: Option<Family>,
    /// The exclusive holder (lock, fair lock, writer, leader).
    pub holder: Option<Lease>,
    /// A read-write lock's readers, by hold.
    pub readers: Few<Lease>,
    /// A semaphore's available permits (`None`: never set).
    pub permits: Option<u64>,
    /// A semaphore's permits held, by hold.
    pub permits_held: Few<Lease>,
    /// A latch's count (`None`: open).
    pub count: Option<u64>,
    /// The last token issued under the name (outlives its holds).
    pub token: u64,
    /// The fair lock's queue, in arrival order.
    pub queue: Few<Queued>,
    /// The waiters of the plain lock (reentrant or fenced) refused while they wait, in the
    /// order they were first refused: a free lock goes to the first alone, so nobody waits
    /// for more than the holds of those marked before it. Not a use of the name.
    pub lock_waiting: Few<WaiterId>,
    /// The writers waiting for a read-write lock, in the order they were first refused: while
    /// any waits, no new reader is let in, so readers coming and going cannot starve a writer,
    /// and a free lock goes to the first writer alone (with turns kept), so writers cannot
    /// starve one another either. Not a use of the name: a wait alone does not keep another
    /// kind out.
    pub writers_waiting: Few<WaiterId>,
    /// The readers waiting behind a writer's hold, by waiter: they go in before the next
    /// writer (while any waits, no writer takes the lock), so writers one after another cannot
    /// starve readers either. The lock goes to readers and writers by turns.
    pub readers_waiting: Few<WaiterId>,
    /// Tombstones of holds an operator force-unlocked: never made again under their ids while
    /// kept (a copy of their acquire that arrives late finds them gone).
    pub ended: Few<Tombstone>,
}

impl NameState {
    /// Whether it is in use (so another family is refused).
    pub(crate) fn in_use(&self) -> bool {
        self.holder.is_some()
            || !self.readers.is_empty()
            || self.permits.is_some()
            || !self.permits_held.is_empty()
            || self.count.is_some()
            || !self.queue.is_empty()
    }

    /// Takes the name as `kind`'s family, unless it is in use as another.
    pub(crate) fn claim(&mut self, kind: Kind) -> bool {
        let wanted = kind.family();
        if !self.in_use() {
            self.family = None;
        }
        match self.family {
            Some(family) if family != wanted => false,
            _ => {
                self.family = Some(wanted);
                true
            }
        }
    }

    /// Whether the name is in use as another family than `kind`'s.
    pub(crate) fn used_as_other(&self, kind: Kind) -> bool {
        self.in_use() && self.family.is_some_and(|family| family != kind.family())
    }

    /// Whether `owner` has a hold of `kind` here.
    pub fn holds(&self, kind: Kind, owner: HoldId) -> bool {
        if self.used_as_other(kind) {
            return false;
        }
        match kind {
            Kind::Read => self.readers.iter().any(|r| r.hold == owner),
            Kind::Semaphore => self.permits_held.iter().any(|p| p.hold == owner),
            Kind::Latch => false,
            _ => self.holder.is_some_and(|h| h.hold == owner),
        }
    }

    /// The lease end of `owner`'s hold of `kind`, if it has one.
    pub fn lease_of(&self, kind: Kind, owner: HoldId) -> Option<Time> {
        if !self.holds(kind, owner) {
            return None;
        }
        let of = |leases: &[Lease]| leases.iter().find(|l| l.hold == owner).map(|l| l.until);
        match kind {
            Kind::Read => of(&self.readers),
            Kind::Semaphore => of(&self.permits_held),
            _ => self.holder.map(|h| h.until),
        }
    }

    /// Ends `hold` of `kind` if the name has it (a permit comes back); whether it did.
    pub(crate) fn end(&mut self, kind: Kind, hold: HoldId) -> bool {
        match kind {
            Kind::Read => remove(&mut self.readers, hold),
            Kind::Semaphore => {
                let ended = remove(&mut self.permits_held, hold);
                if ended {
                    self.permits = Some(self.permits.unwrap_or(0) + 1);
                }
                ended
            }
            _ => {
                let ended = self.holder.is_some_and(|h| h.hold == hold);
                if ended {
                    self.holder = None;
                }
                ended
            }
        }
    }
}

/// Sets `hold`'s lease in `leases` to end no earlier than `until` (adding it if absent, on
/// `session` if it names one: a hold stays on the lease it was made on).
pub(crate) fn extend(leases: &mut Few<Lease>, hold: HoldId, until: Time, session: Option<u8>) {
    match leases.iter_mut().find(|l| l.hold == hold) {
        Some(lease) => lease.until = lease.until.max(until),
        None => {
            leases.push(Lease {
                hold,
                until,
                session,
                unclaimed: false,
            });
            leases.sort();
        }
    }
}

/// Extends the exclusive holder's lease to end no earlier than `until` (it stays on the lease
/// it was made on).
pub(crate) fn extend_holder(state: &mut NameState, until: Time) {
    if let Some(holder) = &mut state.holder {
        holder.until = holder.until.max(until);
        holder.unclaimed = false;
    }
}

/// Marks `waiter` as waiting (once), keeping `marks` sorted: their order tells nothing.
pub(crate) fn mark(marks: &mut Few<WaiterId>, waiter: WaiterId) {
    if !marks.contains(&waiter) {
        marks.push(waiter);
        marks.sort();
    }
}

/// Marks `waiter` as waiting (once), after those marked before it: `marks` is a turn order.
pub(crate) fn mark_in_turn(marks: &mut Few<WaiterId>, waiter: WaiterId) {
    if !marks.contains(&waiter) {
        marks.push(waiter);
    }
}

/// Removes `hold` from `leases`; whether it was there.
pub(crate) fn remove(leases: &mut Few<Lease>, hold: HoldId) -> bool {
    let before = leases.len();
    leases.retain(|l| l.hold != hold);
    leases.len() < before
}

/// Gives the freed fair lock to the head waiter if it made an offer: its offer's hold holds
/// on the offer's lease, and it is told.
pub(crate) fn grant_to_head(state: &mut NameState, now: Time) -> Option<Grant> {
    let head = *state.queue.first()?;
    let offer = head.offer?;
    state.queue.remove(0);
    state.holder = Some(Lease {
        hold: offer.hold,
        until: now + offer.lease,
        session: None,
        unclaimed: true,
    });
    Some(Grant {
        waiter: head.waiter,
        attempt: offer.attempt,
        hold: offer.hold,
        proven: false,
    })
}
