//! One name's state in the store: what it is in use as, its holders, permits, count, fair
//! queue and fencing token, and the rules every step applies to it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::backend::{instant_after, GrantOffer, LockRef, LossReason, OwnerId, Signal};
use dlock_core::{LockError, LockKind};
use rustc_hash::FxHashMap as HashMap;

use super::marks::Marks;
use super::remaining;
use super::steps::unsupported;

/// What a name is in use as: kinds that share a family share the store's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    Reentrant,
    Fair,
    ReadWrite,
    Semaphore,
    Latch,
    Election,
}

impl Family {
    pub(super) fn of(kind: LockKind) -> Option<Family> {
        match kind {
            // A fenced lock is the reentrant lock plus its token counter.
            LockKind::Reentrant | LockKind::Fenced => Some(Family::Reentrant),
            LockKind::Fair => Some(Family::Fair),
            LockKind::Read | LockKind::Write => Some(Family::ReadWrite),
            LockKind::Semaphore => Some(Family::Semaphore),
            LockKind::Latch => Some(Family::Latch),
            LockKind::Election => Some(Family::Election),
            _ => None,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Family::Reentrant => "a reentrant lock",
            Family::Fair => "a fair lock",
            Family::ReadWrite => "a read-write lock",
            Family::Semaphore => "a semaphore",
            Family::Latch => "a count-down latch",
            Family::Election => "a leader election",
        }
    }
}

#[derive(Default)]
pub(super) struct LockEntry {
    /// The exclusive holder: of the reentrant or fair lock, or the writer of a read-write lock.
    pub(super) holder: Option<Holder>,
    /// The readers of a read-write lock, each with its own lease.
    pub(super) readers: HashMap<OwnerId, Holder>,
    /// The fair lock's waiters (waiter ids) in arrival order, each with the instant its place
    /// times out.
    pub(super) queue: VecDeque<(OwnerId, Instant)>,
    /// What the name is in use as, while it is.
    family: Option<Family>,
    /// The last holder whose hold ended other than by its own release, and how: what a
    /// renewal by that owner reports.
    pub(super) ended: Option<(OwnerId, LossReason)>,
    /// Notified on each release of the reentrant lock or either side of a read-write lock.
    pub(super) signal: Arc<Signal>,
    pub(super) subscribers: usize,
    /// The fair lock's waiters' own signals: a release wakes the head of the queue alone.
    pub(super) owner_signals: HashMap<OwnerId, OwnerSignal>,
    /// The grant offers of the fair lock's queued waiters, each with the hold a grant makes.
    pub(super) offers: HashMap<OwnerId, (GrantOffer, OwnerId)>,
    /// The last fencing token issued under this name (0: none yet). It outlives the holds, as
    /// the token key does on Redis: an entry that has issued tokens is kept.
    pub(super) fencing_token: u64,
    /// A semaphore's available permits (`None`: never set).
    pub(super) permits: Option<u64>,
    /// A semaphore's permits held, by permit id, each with its lease end.
    pub(super) permits_held: HashMap<OwnerId, Instant>,
    /// A count-down latch's count (`None`: open, never set or counted down to zero).
    pub(super) count: Option<u64>,
    /// Holds an operator force-unlocked, each with the instant it is forgotten: never made
    /// again under their ids (see [`ENDED_KEPT`]).
    pub(super) force_unlocked: Vec<(OwnerId, Instant)>,
    /// The plain lock's waiters in turn: a free lock goes to the first live mark alone.
    pub(super) lock_waiting: Marks,
    /// The writers waiting for the read-write lock, in turn: while one lives, no new reader is
    /// let in, and a free lock goes to the first live writer's mark alone.
    pub(super) writers_waiting: Marks,
    /// The readers waiting behind a writer's hold (waiter ids), each with the instant its mark
    /// runs out: they go in before the next writer, which waits while one lives.
    pub(super) readers_waiting: Marks,
    /// This entry's number in its shard: an entry made again after one was swept out counts
    /// its announcements anew, under another number.
    pub(super) serial: u64,
    /// How many times a release was announced or a fair waiter told of its turn.
    announced: u64,
}

/// How long a force-unlocked hold's id is remembered: a copy of the request that made it,
/// arriving later than this, could make it again.
pub(super) const ENDED_KEPT: Duration = Duration::from_secs(600);

/// A fair waiter's own signal and its subscriptions.
pub(super) struct OwnerSignal {
    pub(super) signal: Arc<Signal>,
    pub(super) subscriptions: usize,
}

pub(super) struct Holder {
    pub(super) owner: OwnerId,
    pub(super) count: u32,
    pub(super) expires_at: Instant,
    /// What the holder shows everyone: a leader's candidate id.
    pub(super) value: Option<String>,
}

impl Holder {
    /// One hold of `owner` until `expires_at`, showing `value`.
    pub(super) fn new(owner: OwnerId, expires_at: Instant, value: Option<String>) -> Self {
        Holder {
            owner,
            count: 1,
            expires_at,
            value,
        }
    }
}

impl LockEntry {
    /// Gives back the semaphore permits whose lease ran out at `now`, and wakes the waiters
    /// if any came back.
    pub(super) fn reclaim_permits(&mut self, now: Instant) {
        let before = self.permits_held.len();
        let ended = &mut self.ended;
        self.permits_held.retain(|owner, expires_at| {
            let live = *expires_at > now;
            if !live {
                *ended = Some((owner.clone(), LossReason::Expired));
            }
            live
        });
        let back = (before - self.permits_held.len()) as u64;
        if back > 0 {
            self.permits = Some(self.permits.unwrap_or(0) + back);
            self.announce();
        }
    }

    /// How long until the soonest permit lease ends.
    pub(super) fn soonest_permit_end(&self, now: Instant) -> Option<Duration> {
        self.permits_held
            .values()
            .min()
            .map(|at| remaining(*at, now))
    }

    /// The holder whose lease has not run out at `now`.
    pub(super) fn live_holder(&mut self, now: Instant) -> Option<&mut Holder> {
        if self.holder.as_ref().is_some_and(|h| h.expires_at <= now) {
            if let Some(holder) = self.holder.take() {
                self.ended = Some((holder.owner, LossReason::Expired));
            }
        }
        self.holder.as_mut()
    }

    /// Drops readers whose lease has run out at `now`; returns whether any reader is left.
    pub(super) fn live_readers(&mut self, now: Instant) -> bool {
        let ended = &mut self.ended;
        self.readers.retain(|owner, reader| {
            let live = reader.expires_at > now;
            if !live {
                *ended = Some((owner.clone(), LossReason::Expired));
            }
            live
        });
        !self.readers.is_empty()
    }

    /// Drops fair-lock waiters at the head whose place timed out.
    pub(super) fn purge_queue(&mut self, now: Instant) {
        while self
            .queue
            .front()
            .is_some_and(|(_, timeout)| *timeout <= now)
        {
            if let Some((dead, _)) = self.queue.pop_front() {
                self.offers.remove(&dead);
            }
        }
    }

    /// Gives the freed fair lock to the head waiter if it offered to take a grant: it becomes
    /// the holder on the offer's lease, everyone behind is re-anchored at that lease's end, it
    /// is told, and the waiter behind re-reads its wait. Returns whether it did.
    pub(super) fn grant_to_head(&mut self, now: Instant) -> bool {
        self.purge_queue(now);
        let Some((offer, hold)) = self
            .queue
            .front()
            .and_then(|(head, _)| self.offers.get(head).cloned())
        else {
            return false;
        };
        let Some((head, mine)) = self.queue.pop_front() else {
            return false;
        };
        self.offers.remove(&head);
        let expires_at = instant_after(now, offer.lease);
        self.shift_queue(
            expires_at.saturating_duration_since(mine),
            mine.saturating_duration_since(expires_at),
            now,
        );
        self.holder = Some(Holder::new(hold, expires_at, None));
        // A wake-up: the waiter claims the grant with an acquire of its own.
        self.announced += 1;
        if let Some(own) = self.owner_signals.get(&head) {
            own.signal.notify();
        }
        // The new head re-reads its wait, in case the granted waiter is dead. In process a look
        // costs no round trip; the network stores tell it when the grant runs out instead
        // (`dlock_core::backend::Reminders`).
        if let Some(own) = self
            .queue
            .front()
            .and_then(|(next, _)| self.owner_signals.get(next))
        {
            own.signal.notify();
        }
        true
    }

    /// What the name is in use as at `now`, if anything.
    fn family_in_use(&mut self, now: Instant) -> Option<Family> {
        let held = self.live_holder(now).is_some();
        let read = self.live_readers(now);
        self.purge_queue(now);
        let counters =
            self.permits.is_some() || !self.permits_held.is_empty() || self.count.is_some();
        if held || read || counters || !self.queue.is_empty() {
            self.family
        } else {
            self.family = None;
            None
        }
    }

    /// Refuses `lock` if the name is in use as another kind; else marks it in use as `lock`'s.
    pub(super) fn claim(&mut self, lock: LockRef<'_>, now: Instant) -> Result<(), LockError> {
        let wanted = Family::of(lock.kind).ok_or_else(|| unsupported(lock))?;
        match self.family_in_use(now) {
            Some(family) if family != wanted => Err(LockError::WrongKind {
                name: lock.name.to_owned(),
                expected: lock.kind,
                found: family.describe().to_owned(),
            }),
            _ => {
                self.family = Some(wanted);
                Ok(())
            }
        }
    }

    /// Whether the name is in use at `now` as another kind than `lock`'s: then no hold of
    /// `lock`'s kind can be there (a step on a hold acts on that hold alone, and changes nothing
    /// when it finds none).
    pub(super) fn in_use_as_other(&mut self, lock: LockRef<'_>, now: Instant) -> bool {
        let wanted = Family::of(lock.kind);
        self.family_in_use(now)
            .is_some_and(|family| Some(family) != wanted)
    }

    /// Whether `owner` has a live hold of `lock` at `now` (as its kind keeps holds).
    pub(super) fn holds(&mut self, lock: LockRef<'_>, owner: &OwnerId, now: Instant) -> bool {
        if self.in_use_as_other(lock, now) {
            return false;
        }
        match lock.kind {
            LockKind::Read => {
                self.live_readers(now);
                self.readers.contains_key(owner)
            }
            LockKind::Semaphore => {
                self.reclaim_permits(now);
                self.permits_held.contains_key(owner)
            }
            LockKind::Latch => false,
            _ => self
                .live_holder(now)
                .is_some_and(|holder| holder.owner == *owner),
        }
    }

    /// Remembers that the holds `ended` were force-unlocked at `now`.
    pub(super) fn note_force_unlocked(&mut self, ended: Vec<OwnerId>, now: Instant) {
        let until = instant_after(now, ENDED_KEPT);
        self.force_unlocked
            .extend(ended.into_iter().map(|owner| (owner, until)));
    }

    /// Whether `owner`'s hold was force-unlocked (lately enough to be remembered).
    pub(super) fn was_force_unlocked(&mut self, owner: &OwnerId, now: Instant) -> bool {
        self.force_unlocked.retain(|(_, until)| *until > now);
        self.force_unlocked.iter().any(|(ended, _)| ended == owner)
    }

    /// Why `owner`'s hold ended, if the store knows (else `Gone`).
    pub(super) fn ended_reason(&self, owner: &OwnerId) -> LossReason {
        match &self.ended {
            Some((ended, reason)) if ended == owner => *reason,
            _ => LossReason::Gone,
        }
    }

    /// Why `owner`, who does not hold the lock now, lost it.
    pub(super) fn loss_of(&mut self, owner: &OwnerId, now: Instant) -> LossReason {
        if self.live_holder(now).is_some() {
            return LossReason::TakenOver;
        }
        match &self.ended {
            Some((ended, reason)) if ended == owner => *reason,
            _ => LossReason::Gone,
        }
    }

    /// Wakes the fair lock's head waiter and the one behind it, each on its own signal (the
    /// second re-reads when the head's place times out, in case the head is dead).
    pub(super) fn wake_head(&mut self, now: Instant) {
        self.purge_queue(now);
        self.announced += 1;
        for (waiter, _) in self.queue.iter().take(2) {
            if let Some(own) = self.owner_signals.get(waiter) {
                own.signal.notify();
            }
        }
    }

    /// What [`releases_heard`](dlock_core::backend::DistributedLock::releases_heard) reads:
    /// this entry's number, with how many times it announced a release or told a turn. An
    /// entry only ever announces under its own number, so the same value twice means no
    /// announcement between.
    pub(super) fn announcements(&self) -> u64 {
        (self.serial << 32) | (self.announced & 0xffff_ffff)
    }

    /// Wakes everyone waiting on the name (not a fair waiter, who has its own signal), and
    /// counts it.
    pub(super) fn announce(&mut self) {
        self.announced += 1;
        self.signal.notify();
    }

    /// Moves every queued waiter's time-out later by `later` and earlier by `earlier`.
    pub(super) fn shift_queue(&mut self, later: Duration, earlier: Duration, now: Instant) {
        for (_, timeout) in self.queue.iter_mut() {
            *timeout = instant_after(*timeout, later)
                .checked_sub(earlier)
                .unwrap_or(now);
        }
    }

    /// Extends the holder's lease to end no earlier than `expires_at`, never shortening it (its
    /// owner may rely on a longer one); a fair lock's waiters' places move with it.
    pub(super) fn extend_holder(&mut self, expires_at: Instant, now: Instant) {
        let Some(holder) = self.holder.as_mut() else {
            return;
        };
        let before = holder.expires_at;
        holder.expires_at = before.max(expires_at);
        self.shift_queue(
            expires_at.saturating_duration_since(before),
            Duration::ZERO,
            now,
        );
    }

    /// How long the waiter `owner` should wait before trying again, without a wake-up: until the
    /// holder's lease ends, or the head of the queue is dropped if it is dead.
    pub(super) fn queue_hint(&mut self, owner: &OwnerId, now: Instant, slot: Duration) -> Duration {
        let held = self.live_holder(now).map(|h| remaining(h.expires_at, now));
        let head = match self.queue.front() {
            Some((head, timeout)) if head != owner => Some(remaining(*timeout, now)),
            _ => None,
        };
        let hint = match (held, head) {
            (Some(held), Some(head)) => held.min(head),
            (held, head) => held.or(head).unwrap_or(slot),
        };
        hint.max(Duration::from_millis(1))
    }

    pub(super) fn is_idle(&mut self, now: Instant) -> bool {
        self.force_unlocked.retain(|(_, until)| *until > now);
        self.writers_waiting.purge(now);
        self.readers_waiting.purge(now);
        self.lock_waiting.purge(now);
        self.subscribers == 0
            && self.lock_waiting.is_empty()
            && self.writers_waiting.is_empty()
            && self.readers_waiting.is_empty()
            && self.owner_signals.is_empty()
            && self.fencing_token == 0
            && self.force_unlocked.is_empty()
            && self.family_in_use(now).is_none()
    }
}
