//! The [`DistributedLock`] steps of [`MemoryBackend`]: each one done on the name's entry
//! under its shard's lock, at the clock's time.

use std::sync::Arc;
use std::time::Duration;

use dlock_core::backend::{
    instant_after, Acquire, AcquireRequest, Clock, CounterStep, DistributedLock, Grant, Handover,
    HoldRef, Leader, LockRef, LockStatus, LossReason, OwnerId, Release, ReleaseSubscription,
    Renewal, Signal,
};
use dlock_core::{LockError, LockKind};

use super::entry::{Family, Holder, LockEntry, OwnerSignal};
use super::subscription::MemorySubscription;
use super::{remaining, MemoryBackend};

impl DistributedLock for MemoryBackend {
    fn backend_name(&self) -> &'static str {
        "memory"
    }

    /// Its steps take the store's lock for a moment and never wait: futures run them in place.
    fn may_block(&self) -> bool {
        false
    }

    fn supports(&self, kind: LockKind) -> bool {
        Family::of(kind).is_some()
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        let owner = request.owner;
        self.inner.with_entry(lock.name, |entry, now| {
            if entry.was_force_unlocked(owner, now) {
                // A copy of the request that made a hold since force-unlocked: never made again.
                return Ok(Acquire::Gone {
                    reason: LossReason::ForceUnlocked,
                });
            }
            if request.reentry && !entry.holds(lock, owner, now) {
                // An ended hold stays ended: an extend never makes it again.
                return Ok(Acquire::Gone {
                    reason: entry.loss_of(owner, now),
                });
            }
            entry.claim(lock, now)?;
            let expires_at = instant_after(now, request.lease);
            Ok(match lock.kind {
                LockKind::Read => entry.acquire_read(request, expires_at, now),
                LockKind::Write => entry.acquire_write(request, expires_at, now),
                LockKind::Fair => entry.acquire_fair(request, expires_at, now),
                LockKind::Semaphore => entry.acquire_permit(request, expires_at, now),
                LockKind::Latch => entry.pass_latch(),
                _ => entry.acquire_exclusive(request, expires_at, now),
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
            match lock.kind {
                LockKind::Fair => {
                    if !entry.grant_to_head(now) {
                        entry.wake_head(now);
                    }
                }
                // While other readers read, a waiting writer is still refused (and readers wait
                // for writers only): the last reader's release wakes them.
                LockKind::Read if !entry.readers.is_empty() => {}
                _ => entry.announce(),
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

    fn keeps_turns(&self) -> bool {
        true
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
        let handed = self.inner.with_entry(lock.name, |entry, now| {
            if entry.in_use_as_other(lock, now) {
                return Ok(Some(Handover::NotHeld));
            }
            if entry.lock_waiting.of_other(successor.waiter, now).is_some() {
                // Another waiter is marked first: it takes the lock once free.
                return Ok(None);
            }
            match entry.live_holder(now) {
                Some(holder) if holder.owner == *owner => {
                    // The hold changes hands in place: nobody else is woken, the lock stays held.
                    *holder = Holder::new(
                        successor.owner.clone(),
                        instant_after(now, successor.lease),
                        None,
                    );
                    // Its waiter's turn is taken, as by an acquire.
                    entry.lock_waiting.remove(successor.waiter);
                    Ok(Some(Handover::Granted(Grant::PLAIN)))
                }
                _ => Ok(Some(Handover::NotHeld)),
            }
        })?;
        match handed {
            Some(handed) => Ok(handed),
            None => self.release(lock, owner).map(Handover::from),
        }
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
            let mut ended = Vec::new();
            let held = match lock.kind {
                LockKind::Read => {
                    let held = entry.live_readers(now);
                    for (owner, _) in entry.readers.drain() {
                        entry.ended = Some((owner.clone(), LossReason::ForceUnlocked));
                        ended.push(owner);
                    }
                    held
                }
                _ => {
                    let held = entry.live_holder(now).is_some();
                    if let Some(holder) = entry.holder.take() {
                        entry.ended = Some((holder.owner.clone(), LossReason::ForceUnlocked));
                        ended.push(holder.owner);
                        if lock.kind == LockKind::Write {
                            // The readers next to a writer are its own (a writer may read):
                            // they end with it.
                            ended.extend(entry.readers.drain().map(|(owner, _)| owner));
                        }
                    }
                    held
                }
            };
            entry.note_force_unlocked(ended, now);
            if held {
                if lock.kind == LockKind::Fair {
                    entry.wake_head(now);
                } else {
                    entry.announce();
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

    fn releases_heard(&self, lock: LockRef<'_>, _owner: &OwnerId) -> Option<u64> {
        // Every announcement is made, and every subscription taken, under the entry's shard
        // lock, and the count is read under it too. A name with no entry is free, and nobody
        // waits on it: its first try, as a rule, takes it.
        self.inner.read_entry(lock.name, LockEntry::announcements)
    }

    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        if matches!(lock.kind, LockKind::Reentrant | LockKind::Fenced) {
            return self.inner.with_entry(lock.name, |entry, now| {
                if entry.lock_waiting.remove(owner) && entry.live_holder(now).is_none() {
                    // The waiters it held off try again.
                    entry.announce();
                }
                Ok(())
            });
        }
        if lock.kind.is_read_write() {
            return self.inner.with_entry(lock.name, |entry, now| {
                let marked = match lock.kind {
                    LockKind::Write => entry.writers_waiting.remove(owner),
                    _ => entry.readers_waiting.remove(owner),
                };
                if marked && entry.live_holder(now).is_none() {
                    // The waiters it held off try again.
                    entry.announce();
                }
                Ok(())
            });
        }
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
                        entry.announce();
                        1
                    }
                }
                CounterStep::AddPermits { permits, .. } => {
                    // Permits whose leases ran out are free again before more are counted.
                    entry.reclaim_permits(now);
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
                    entry.announce();
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
                        entry.announce();
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
                        entry.announce();
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

pub(super) fn unsupported(lock: LockRef<'_>) -> LockError {
    LockError::Unsupported {
        name: lock.name.to_owned(),
        kind: lock.kind,
    }
}
