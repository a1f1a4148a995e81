//! The in-process backend: a sharded map of lock states with real leases.

use rustc_hash::{FxHashMap as HashMap, FxHasher};
use std::collections::VecDeque;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::backend::{
    instant_after, Acquire, AcquireRequest, Clock, CounterStep, DistributedLock, Grant, GrantOffer,
    Handover, HoldRef, Leader, LockRef, LockStatus, LossReason, OwnerId, Release,
    ReleaseSubscription, Renewal, Signal, SystemClock,
};
use dlock_core::{LockError, LockKind};
use parking_lot::Mutex;

/// Independent shards, so threads working on different names rarely share a mutex.
const SHARDS: usize = 32;

/// An in-process lock store with the same semantics as a networked one: leases expire,
/// releases wake subscribers, renewals only extend holds that are still there.
///
/// Clones share the same locks, so several [`LockClient`](dlock_core::LockClient)s on clones of
/// one backend behave like several processes on one Redis. With a
/// [`ManualClock`](crate::ManualClock), time (and so every expiry and timed-out wait) moves only
/// when the test says.
///
/// # Examples
///
/// ```
/// use dlocks::{LockClient, MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let service_a = LockClient::new(backend.clone());
/// let service_b = LockClient::new(backend);
/// let held = service_a.lock("invoice:7").lock()?;
/// assert!(service_b.lock("invoice:7").try_lock()?.is_none()); // excluded across clients
/// drop(held);
/// assert!(service_b.lock("invoice:7").try_lock()?.is_some());
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

struct Inner {
    clock: Arc<dyn Clock>,
    shards: Box<[Mutex<Shard>]>,
}

#[derive(Default)]
struct Shard {
    locks: HashMap<String, LockEntry>,
    /// Size at which expired entries are next swept out.
    sweep_at: usize,
}

/// What a name is in use as: kinds that share a family share the store's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Reentrant,
    Fair,
    ReadWrite,
    Semaphore,
    Latch,
    Election,
}

impl Family {
    fn of(kind: LockKind) -> Option<Family> {
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
struct LockEntry {
    /// The exclusive holder: of the reentrant or fair lock, or the writer of a read-write lock.
    holder: Option<Holder>,
    /// The readers of a read-write lock, each with its own lease.
    readers: HashMap<OwnerId, Holder>,
    /// The fair lock's waiters (waiter ids) in arrival order, each with the instant its place
    /// times out.
    queue: VecDeque<(OwnerId, Instant)>,
    /// What the name is in use as, while it is.
    family: Option<Family>,
    /// The last holder whose hold ended other than by its own release, and how: what a
    /// renewal by that owner reports.
    ended: Option<(OwnerId, LossReason)>,
    /// Notified on each release of the reentrant lock or either side of a read-write lock.
    signal: Arc<Signal>,
    subscribers: usize,
    /// The fair lock's waiters' own signals: a release wakes the head of the queue alone.
    owner_signals: HashMap<OwnerId, OwnerSignal>,
    /// The grant offers of the fair lock's queued waiters, each with the hold a grant makes.
    offers: HashMap<OwnerId, (GrantOffer, OwnerId)>,
    /// The last fencing token issued under this name (0: none yet). It outlives the holds, as
    /// the token key does on Redis: an entry that has issued tokens is kept.
    fencing_token: u64,
    /// A semaphore's available permits (`None`: never set).
    permits: Option<u64>,
    /// A semaphore's permits held, by permit id, each with its lease end.
    permits_held: HashMap<OwnerId, Instant>,
    /// A count-down latch's count (`None`: open, never set or counted down to zero).
    count: Option<u64>,
}

/// A fair waiter's own signal, its subscriptions, and the waits it was granted the lock for.
struct OwnerSignal {
    signal: Arc<Signal>,
    subscriptions: usize,
    granted: Vec<u64>,
}

struct Holder {
    owner: OwnerId,
    count: u32,
    expires_at: Instant,
    /// What the holder shows everyone: a leader's candidate id.
    value: Option<String>,
}

impl Holder {
    /// One hold of `owner` until `expires_at`, showing `value`.
    fn new(owner: OwnerId, expires_at: Instant, value: Option<String>) -> Self {
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
    fn reclaim_permits(&mut self, now: Instant) {
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
            self.signal.notify();
        }
    }

    /// How long until the soonest permit lease ends.
    fn soonest_permit_end(&self, now: Instant) -> Option<Duration> {
        self.permits_held
            .values()
            .min()
            .map(|at| remaining(*at, now))
    }

    /// The holder whose lease has not run out at `now`.
    fn live_holder(&mut self, now: Instant) -> Option<&mut Holder> {
        if self.holder.as_ref().is_some_and(|h| h.expires_at <= now) {
            if let Some(holder) = self.holder.take() {
                self.ended = Some((holder.owner, LossReason::Expired));
            }
        }
        self.holder.as_mut()
    }

    /// Drops readers whose lease has run out at `now`; returns whether any reader is left.
    fn live_readers(&mut self, now: Instant) -> bool {
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
    fn purge_queue(&mut self, now: Instant) {
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
    fn grant_to_head(&mut self, now: Instant) -> bool {
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
        if let Some(own) = self.owner_signals.get_mut(&head) {
            own.granted.push(offer.attempt);
            own.signal.notify();
        }
        // The new head re-reads its wait, in case the granted waiter is dead.
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
    fn claim(&mut self, lock: LockRef<'_>, now: Instant) -> Result<(), LockError> {
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
    fn in_use_as_other(&mut self, lock: LockRef<'_>, now: Instant) -> bool {
        let wanted = Family::of(lock.kind);
        self.family_in_use(now)
            .is_some_and(|family| Some(family) != wanted)
    }

    /// Why `owner`'s hold ended, if the store knows (else `Gone`).
    fn ended_reason(&self, owner: &OwnerId) -> LossReason {
        match &self.ended {
            Some((ended, reason)) if ended == owner => *reason,
            _ => LossReason::Gone,
        }
    }

    /// Why `owner`, who does not hold the lock now, lost it.
    fn loss_of(&mut self, owner: &OwnerId, now: Instant) -> LossReason {
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
    fn wake_head(&mut self, now: Instant) {
        self.purge_queue(now);
        for (waiter, _) in self.queue.iter().take(2) {
            if let Some(own) = self.owner_signals.get(waiter) {
                own.signal.notify();
            }
        }
    }

    /// Moves every queued waiter's time-out later by `later` and earlier by `earlier`.
    fn shift_queue(&mut self, later: Duration, earlier: Duration, now: Instant) {
        for (_, timeout) in self.queue.iter_mut() {
            *timeout = instant_after(*timeout, later)
                .checked_sub(earlier)
                .unwrap_or(now);
        }
    }

    /// Extends the holder's lease to end no earlier than `expires_at`, never shortening it (its
    /// owner may rely on a longer one); a fair lock's waiters' places move with it.
    fn extend_holder(&mut self, expires_at: Instant, now: Instant) {
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
    fn queue_hint(&mut self, owner: &OwnerId, now: Instant, slot: Duration) -> Duration {
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

    fn is_idle(&mut self, now: Instant) -> bool {
        self.subscribers == 0
            && self.owner_signals.is_empty()
            && self.fencing_token == 0
            && self.family_in_use(now).is_none()
    }
}

impl MemoryBackend {
    /// A backend on the system's monotonic clock.
    pub fn new() -> Self {
        Self::with_clock(SystemClock)
    }

    /// A backend on `clock`, usually a [`ManualClock`](crate::ManualClock) in tests.
    pub fn with_clock(clock: impl Clock) -> Self {
        MemoryBackend {
            inner: Arc::new(Inner {
                clock: Arc::new(clock),
                shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            }),
        }
    }

    /// How many names currently have state (a holder or subscribers). Released and expired
    /// locks do not count: this returns to 0 when everything is released.
    pub fn len(&self) -> usize {
        let now = self.inner.clock.now();
        self.inner
            .shards
            .iter()
            .map(|shard| {
                let mut shard = shard.lock();
                shard
                    .locks
                    .values_mut()
                    .map(|e| !e.is_idle(now))
                    .filter(|busy| *busy)
                    .count()
            })
            .sum()
    }

    /// Whether no name has state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The owner holding `name` now, if any (for tests that check who holds what).
    pub fn holder(&self, name: &str) -> Option<OwnerId> {
        self.inner.with_entry(name, |entry, now| {
            entry.live_holder(now).map(|holder| holder.owner.clone())
        })
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn shard(&self, name: &str) -> &Mutex<Shard> {
        let mut hasher = FxHasher::default();
        name.hash(&mut hasher);
        // The high bits are the best mixed.
        &self.shards[((hasher.finish() >> 32) as usize) % self.shards.len()]
    }

    /// Runs `f` on `name`'s entry (made if missing); idle entries are swept out as the shard
    /// grows, so memory stays proportional to the locks in use.
    fn with_entry<R>(&self, name: &str, f: impl FnOnce(&mut LockEntry, Instant) -> R) -> R {
        let now = self.clock.now();
        let mut shard = self.shard(name).lock();
        let result;
        let idle;
        // Look up by `&str` first: the key is only allocated for a new entry. An entry that
        // becomes idle stays for reuse until the next sweep.
        if let Some(entry) = shard.locks.get_mut(name) {
            result = f(entry, now);
            idle = entry.is_idle(now);
        } else {
            let mut entry = LockEntry::default();
            result = f(&mut entry, now);
            idle = entry.is_idle(now);
            if !idle {
                shard.locks.insert(name.to_owned(), entry);
            }
        }
        if !idle && shard.locks.len() >= shard.sweep_at {
            shard.locks.retain(|_, entry| !entry.is_idle(now));
            shard.sweep_at = (shard.locks.len() * 2).max(64);
        }
        result
    }
}

fn remaining(expires_at: Instant, now: Instant) -> Duration {
    expires_at.saturating_duration_since(now)
}

impl DistributedLock for MemoryBackend {
    fn supports(&self, kind: LockKind) -> bool {
        Family::of(kind).is_some()
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        let owner = request.owner;
        self.inner.with_entry(lock.name, |entry, now| {
            entry.claim(lock, now)?;
            let expires_at = instant_after(now, request.lease);
            let take = |entry: &mut LockEntry| {
                entry.holder = Some(Holder::new(
                    owner.clone(),
                    expires_at,
                    request.value.map(str::to_owned),
                ));
                Acquire::ACQUIRED
            };
            Ok(match lock.kind {
                LockKind::Read => {
                    entry.live_readers(now);
                    match entry.live_holder(now) {
                        // A writer may read: its own read comes in next to its write hold.
                        Some(writer) if Some(&writer.owner) != request.write_hold => {
                            Acquire::Held {
                                remaining_lease: Some(remaining(writer.expires_at, now)),
                            }
                        }
                        _ => {
                            let reader =
                                entry
                                    .readers
                                    .entry(owner.clone())
                                    .or_insert_with(|| Holder {
                                        count: 0,
                                        ..Holder::new(owner.clone(), expires_at, None)
                                    });
                            reader.count += 1;
                            // A lease is never shortened: the owner may rely on the longer one.
                            reader.expires_at = reader.expires_at.max(expires_at);
                            Acquire::ACQUIRED
                        }
                    }
                }
                LockKind::Write => {
                    let readers = entry.live_readers(now);
                    let longest_read = entry.readers.values().map(|r| r.expires_at).max();
                    match entry.live_holder(now) {
                        Some(writer) if writer.owner == *owner => {
                            writer.count += 1;
                            entry.extend_holder(expires_at, now);
                            Acquire::ACQUIRED
                        }
                        Some(writer) => Acquire::Held {
                            remaining_lease: Some(remaining(writer.expires_at, now)),
                        },
                        None if readers => Acquire::Held {
                            remaining_lease: longest_read.map(|at| remaining(at, now)),
                        },
                        None => take(entry),
                    }
                }
                LockKind::Fair => {
                    // The queue is of waiters; the holder is the request's hold.
                    let waiter = request.waiter;
                    let slot = request.queue_slot;
                    entry.purge_queue(now);
                    let head_or_none = entry.queue.front().is_none_or(|(head, _)| head == waiter);
                    match entry.live_holder(now) {
                        None if head_or_none => {
                            // Everyone behind is re-anchored at this holder's lease end.
                            entry.offers.remove(waiter);
                            if let Some((_, mine)) = entry.queue.pop_front() {
                                let new_anchor = expires_at;
                                entry.shift_queue(
                                    new_anchor.saturating_duration_since(mine),
                                    mine.saturating_duration_since(new_anchor),
                                    now,
                                );
                            }
                            take(entry)
                        }
                        Some(holder) if holder.owner == *owner => {
                            holder.count += 1;
                            entry.extend_holder(expires_at, now);
                            Acquire::ACQUIRED
                        }
                        held => {
                            let held = held.map(|h| remaining(h.expires_at, now));
                            let queued = entry.queue.iter().any(|(queued, _)| queued == waiter);
                            if !queued && request.will_wait {
                                // Its place times out one slot after the place ahead of it.
                                let ahead = entry
                                    .queue
                                    .back()
                                    .map(|(_, timeout)| *timeout)
                                    .unwrap_or_else(|| {
                                        instant_after(now, held.unwrap_or_default())
                                    });
                                entry
                                    .queue
                                    .push_back((waiter.clone(), instant_after(ahead, slot)));
                            }
                            if let Some(offer) = request.grant {
                                if queued || request.will_wait {
                                    entry.offers.insert(waiter.clone(), (offer, owner.clone()));
                                }
                            }
                            Acquire::Held {
                                remaining_lease: Some(entry.queue_hint(waiter, now, slot)),
                            }
                        }
                    }
                }
                LockKind::Semaphore => {
                    entry.reclaim_permits(now);
                    if let Some(end) = entry.permits_held.get_mut(owner) {
                        // The same permit asked again (a retried request): nothing more taken.
                        *end = (*end).max(expires_at);
                        Acquire::ACQUIRED
                    } else if entry.permits.unwrap_or(0) > 0 {
                        entry.permits = entry.permits.map(|available| available - 1);
                        entry.permits_held.insert(owner.clone(), expires_at);
                        Acquire::ACQUIRED
                    } else {
                        Acquire::Held {
                            remaining_lease: entry.soonest_permit_end(now),
                        }
                    }
                }
                LockKind::Latch => match entry.count {
                    Some(count) if count > 0 => Acquire::Held {
                        remaining_lease: None,
                    },
                    _ => Acquire::ACQUIRED,
                },
                _ => {
                    let fenced = lock.kind.is_fenced();
                    let acquired = match entry.live_holder(now) {
                        None => {
                            take(entry);
                            if fenced {
                                entry.fencing_token += 1;
                            }
                            if lock.kind == LockKind::Election {
                                // A new leader: observers look.
                                entry.signal.notify();
                            }
                            Acquire::ACQUIRED
                        }
                        Some(holder) if holder.owner == *owner => {
                            holder.count += 1;
                            entry.extend_holder(expires_at, now);
                            Acquire::ACQUIRED
                        }
                        Some(holder) => Acquire::Held {
                            remaining_lease: Some(remaining(holder.expires_at, now)),
                        },
                    };
                    match acquired {
                        Acquire::Acquired(grant) if fenced => {
                            Acquire::Acquired(grant.with_fencing_token(entry.fencing_token))
                        }
                        other => other,
                    }
                }
            })
        })
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        self.inner.with_entry(lock.name, |entry, now| {
            if entry.in_use_as_other(lock, now) {
                return Ok(Release::NotHeld);
            }
            let released = match lock.kind {
                LockKind::Read => {
                    entry.live_readers(now);
                    entry.readers.remove(owner).is_some()
                }
                LockKind::Semaphore => {
                    entry.reclaim_permits(now);
                    let released = entry.permits_held.remove(owner).is_some();
                    if released {
                        entry.permits = Some(entry.permits.unwrap_or(0) + 1);
                    }
                    released
                }
                LockKind::Latch => false,
                _ => match entry.live_holder(now) {
                    Some(holder) if holder.owner == *owner => {
                        let unused = remaining(holder.expires_at, now);
                        entry.holder = None;
                        // The lock is free for the head now, not at the lease's end.
                        entry.shift_queue(Duration::ZERO, unused, now);
                        true
                    }
                    _ => false,
                },
            };
            if !released {
                return Ok(Release::NotHeld);
            }
            if lock.kind == LockKind::Fair {
                if !entry.grant_to_head(now) {
                    entry.wake_head(now);
                }
            } else {
                entry.signal.notify();
            }
            Ok(Release::Released)
        })
    }

    fn hands_over(&self, kind: LockKind) -> bool {
        matches!(
            kind,
            LockKind::Reentrant | LockKind::Fair | LockKind::Semaphore
        )
    }

    fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        if lock.kind == LockKind::Semaphore {
            return self.inner.with_entry(lock.name, |entry, now| {
                if entry.in_use_as_other(lock, now) {
                    return Ok(Handover::NotHeld);
                }
                entry.reclaim_permits(now);
                if entry.permits_held.remove(owner).is_none() {
                    return Ok(Handover::NotHeld);
                }
                // The permit changes hands: none comes free, nobody is woken.
                entry
                    .permits_held
                    .insert(successor.owner.clone(), instant_after(now, successor.lease));
                Ok(Handover::Granted(Grant::PLAIN))
            });
        }
        if lock.kind != LockKind::Reentrant {
            return self.release(lock, owner).map(Handover::from);
        }
        self.inner.with_entry(lock.name, |entry, now| {
            if entry.in_use_as_other(lock, now) {
                return Ok(Handover::NotHeld);
            }
            match entry.live_holder(now) {
                Some(holder) if holder.owner == *owner => {
                    // The hold changes hands in place: nobody else is woken, the lock stays held.
                    *holder = Holder::new(
                        successor.owner.clone(),
                        instant_after(now, successor.lease),
                        None,
                    );
                    Ok(Handover::Granted(Grant::PLAIN))
                }
                _ => Ok(Handover::NotHeld),
            }
        })
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        holds
            .iter()
            .map(|hold| {
                self.inner.with_entry(hold.lock.name, |entry, now| {
                    if entry.in_use_as_other(hold.lock, now) {
                        return Ok(Renewal::Lost(LossReason::TakenOver));
                    }
                    let expires_at = instant_after(now, lease);
                    Ok(match hold.lock.kind {
                        LockKind::Read => {
                            entry.live_readers(now);
                            match entry.readers.get_mut(hold.owner) {
                                Some(reader) => {
                                    reader.expires_at = reader.expires_at.max(expires_at);
                                    Renewal::Renewed
                                }
                                None => Renewal::Lost(entry.ended_reason(hold.owner)),
                            }
                        }
                        LockKind::Semaphore => {
                            entry.reclaim_permits(now);
                            match entry.permits_held.get_mut(hold.owner) {
                                Some(end) => {
                                    *end = (*end).max(expires_at);
                                    Renewal::Renewed
                                }
                                None => Renewal::Lost(entry.ended_reason(hold.owner)),
                            }
                        }
                        LockKind::Latch => Renewal::Lost(LossReason::Gone),
                        _ => match entry.live_holder(now) {
                            Some(holder) if holder.owner == *hold.owner => {
                                // A late renewal may meet a newer hold of the same owner, on
                                // a longer lease: never shortened.
                                entry.extend_holder(expires_at, now);
                                Renewal::Renewed
                            }
                            _ => Renewal::Lost(entry.loss_of(hold.owner, now)),
                        },
                    })
                })
            })
            .collect()
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        self.inner.with_entry(lock.name, |entry, now| {
            entry.claim(lock, now)?;
            Ok(match lock.kind {
                LockKind::Semaphore => {
                    entry.reclaim_permits(now);
                    match entry.permits_held.get(owner) {
                        Some(end) => LockStatus::held(true, Some(remaining(*end, now))),
                        None if entry.permits_held.is_empty() => LockStatus::FREE,
                        None => LockStatus::held(false, entry.soonest_permit_end(now)),
                    }
                }
                LockKind::Latch => match entry.count {
                    Some(count) if count > 0 => LockStatus::held(false, None),
                    _ => LockStatus::FREE,
                },
                LockKind::Read => {
                    if entry.live_readers(now) {
                        let longest = entry.readers.values().map(|r| r.expires_at).max();
                        LockStatus::held(
                            entry.readers.contains_key(owner),
                            longest.map(|at| remaining(at, now)),
                        )
                    } else {
                        LockStatus::FREE
                    }
                }
                _ => match entry.live_holder(now) {
                    Some(holder) => LockStatus::held(
                        holder.owner == *owner,
                        Some(remaining(holder.expires_at, now)),
                    ),
                    None => LockStatus::FREE,
                },
            })
        })
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        if matches!(lock.kind, LockKind::Semaphore | LockKind::Latch) {
            return Err(unsupported(lock));
        }
        self.inner.with_entry(lock.name, |entry, now| {
            entry.claim(lock, now)?;
            let held = match lock.kind {
                LockKind::Read => {
                    let held = entry.live_readers(now);
                    for (owner, _) in entry.readers.drain() {
                        entry.ended = Some((owner, LossReason::ForceUnlocked));
                    }
                    held
                }
                _ => {
                    let held = entry.live_holder(now).is_some();
                    if let Some(holder) = entry.holder.take() {
                        entry.ended = Some((holder.owner, LossReason::ForceUnlocked));
                    }
                    held
                }
            };
            if held {
                if lock.kind == LockKind::Fair {
                    entry.wake_head(now);
                } else {
                    entry.signal.notify();
                }
            }
            Ok(held)
        })
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let own = lock.kind.queues_on_store();
        let signal = self.inner.with_entry(lock.name, |entry, now| {
            entry.claim(lock, now)?;
            Ok::<_, LockError>(if own {
                let own = entry
                    .owner_signals
                    .entry(owner.clone())
                    .or_insert_with(|| OwnerSignal {
                        signal: Arc::new(Signal::new()),
                        subscriptions: 0,
                        granted: Vec::new(),
                    });
                own.subscriptions += 1;
                own.signal.clone()
            } else {
                entry.subscribers += 1;
                entry.signal.clone()
            })
        })?;
        Ok(Box::new(MemorySubscription {
            backend: self.inner.clone(),
            name: lock.name.to_owned(),
            owner: own.then(|| owner.clone()),
            signal,
        }))
    }

    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        if !lock.kind.queues_on_store() {
            return Ok(());
        }
        self.inner.with_entry(lock.name, |entry, now| {
            let Some(at) = entry.queue.iter().position(|(waiter, _)| waiter == owner) else {
                return;
            };
            // Everyone behind it moves up a place.
            for (_, timeout) in entry.queue.iter_mut().skip(at + 1) {
                *timeout = timeout.checked_sub(queue_slot).unwrap_or(now);
            }
            entry.queue.remove(at);
            entry.offers.remove(owner);
            if at == 0 && entry.live_holder(now).is_none() {
                entry.wake_head(now);
            }
        });
        Ok(())
    }

    fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        let lock = LockRef::new(step.name(), step.kind());
        self.inner.with_entry(lock.name, |entry, now| {
            entry.claim(lock, now)?;
            Ok(match step {
                CounterStep::TrySetPermits { permits, .. } => {
                    if entry.permits.is_some() {
                        0
                    } else {
                        entry.permits = Some(permits);
                        entry.signal.notify();
                        1
                    }
                }
                CounterStep::AddPermits { permits, .. } => {
                    let available = entry
                        .permits
                        .unwrap_or(0)
                        .checked_add(permits)
                        .filter(|available| *available <= dlock_core::MAX_COUNT)
                        .ok_or_else(|| {
                            LockError::invalid(
                                "permits",
                                "the permits would exceed what a store counts (2^63 - 1)",
                            )
                        })?;
                    entry.permits = Some(available);
                    entry.signal.notify();
                    available
                }
                CounterStep::AvailablePermits { .. } => {
                    entry.reclaim_permits(now);
                    entry.permits.unwrap_or(0)
                }
                CounterStep::TrySetCount { count, .. } => {
                    if entry.count.is_some() {
                        0
                    } else {
                        entry.count = (count > 0).then_some(count);
                        entry.signal.notify();
                        1
                    }
                }
                CounterStep::CountDown { .. } => match entry.count {
                    Some(count) if count > 1 => {
                        entry.count = Some(count - 1);
                        count - 1
                    }
                    Some(_) => {
                        entry.count = None;
                        entry.signal.notify();
                        0
                    }
                    None => 0,
                },
                CounterStep::Count { .. } => entry.count.unwrap_or(0),
                _ => return Err(unsupported(lock)),
            })
        })
    }

    fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        if lock.kind != LockKind::Election {
            return Err(unsupported(lock));
        }
        self.inner.with_entry(lock.name, |entry, now| {
            entry.claim(lock, now)?;
            let token = entry.fencing_token;
            Ok(entry.live_holder(now).map(|holder| {
                Leader::new(
                    holder.value.clone().unwrap_or_default(),
                    token,
                    Some(remaining(holder.expires_at, now)),
                )
            }))
        })
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock.clone()
    }
}

fn unsupported(lock: LockRef<'_>) -> LockError {
    LockError::Unsupported {
        name: lock.name.to_owned(),
        kind: lock.kind,
    }
}

/// Interest in one name's releases (or, for a fair lock, in one waiter's turn); dropping it
/// lets the entry go once idle.
struct MemorySubscription {
    backend: Arc<Inner>,
    name: String,
    /// The waiter whose own signal this is, for a fair lock.
    owner: Option<OwnerId>,
    signal: Arc<Signal>,
}

impl ReleaseSubscription for MemorySubscription {
    fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }

    fn granted(&self, attempt: u64) -> bool {
        let Some(owner) = &self.owner else {
            return false;
        };
        self.backend.with_entry(&self.name, |entry, _| {
            entry
                .owner_signals
                .get(owner)
                .is_some_and(|own| own.granted.contains(&attempt))
        })
    }
}

impl Drop for MemorySubscription {
    fn drop(&mut self) {
        self.backend
            .with_entry(&self.name, |entry, _| match &self.owner {
                Some(owner) => {
                    if let Some(own) = entry.owner_signals.get_mut(owner) {
                        own.subscriptions -= 1;
                        if own.subscriptions == 0 {
                            entry.owner_signals.remove(owner);
                        }
                    }
                }
                None => entry.subscribers = entry.subscribers.saturating_sub(1),
            });
    }
}
