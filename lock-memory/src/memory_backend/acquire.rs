//! An acquire on a name's entry, one function per kind: what the store's step does once the
//! request has been checked (the name's kind, an extend of a hold that ended).

use std::time::Instant;

use dlock_core::backend::{instant_after, Acquire, AcquireRequest};
use dlock_core::LockKind;

use super::entry::{Holder, LockEntry};
use super::remaining;

impl LockEntry {
    /// Makes the request's owner the holder, until `expires_at`.
    fn take(&mut self, request: &AcquireRequest<'_>, expires_at: Instant) -> Acquire {
        self.holder = Some(Holder::new(
            request.owner.clone(),
            expires_at,
            request.value.map(str::to_owned),
        ));
        Acquire::ACQUIRED
    }

    /// A read lock: shared, unless another owner writes (a writer may read), or a writer
    /// waits; a reader that waited behind a writer's hold, and a hold that reads already, come
    /// in all the same.
    pub(super) fn acquire_read(
        &mut self,
        request: &AcquireRequest<'_>,
        expires_at: Instant,
        now: Instant,
    ) -> Acquire {
        let (owner, waiter) = (request.owner, request.waiter);
        self.live_readers(now);
        let reading = self.readers.contains_key(owner);
        self.readers_waiting.purge(now);
        let marked = self.readers_waiting.contains(waiter);
        let writers_wait = self.writers_waiting.longest(now);
        match self.live_holder(now) {
            // A writer may read: its own read comes in next to its write hold.
            Some(writer) if Some(&writer.owner) != request.write_hold => {
                let remaining_lease = Some(remaining(writer.expires_at, now));
                // Behind a writer's hold: it goes in before the next writer.
                self.readers_waiting.mark(request, now);
                Acquire::Held { remaining_lease }
            }
            None if writers_wait.is_some() && !reading && !marked => Acquire::Held {
                remaining_lease: writers_wait,
            },
            _ => {
                self.readers_waiting.remove(waiter);
                let reader = self.readers.entry(owner.clone()).or_insert_with(|| Holder {
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

    /// A write lock: alone, once every reader has left, and the readers that waited behind the
    /// last writer, and the writers marked before it, have gone in; re-entered by its writer.
    pub(super) fn acquire_write(
        &mut self,
        request: &AcquireRequest<'_>,
        expires_at: Instant,
        now: Instant,
    ) -> Acquire {
        let readers = self.live_readers(now);
        let longest_read = self.readers.values().map(|r| r.expires_at).max();
        let readers_wait = self.readers_waiting.longest(now);
        let held = match self.live_holder(now) {
            Some(writer) if writer.owner == *request.owner => {
                writer.count += 1;
                self.extend_holder(expires_at, now);
                return Acquire::ACQUIRED;
            }
            Some(writer) => Acquire::Held {
                remaining_lease: Some(remaining(writer.expires_at, now)),
            },
            None if readers => Acquire::Held {
                remaining_lease: longest_read.map(|at| remaining(at, now)),
            },
            // Readers that waited behind the last writer go first.
            None if readers_wait.is_some() => Acquire::Held {
                remaining_lease: readers_wait,
            },
            // Then the writers, in the order they were first refused.
            None => match self.writers_waiting.of_other(request.waiter, now) {
                Some(turn_of_other) => Acquire::Held {
                    remaining_lease: Some(turn_of_other),
                },
                None => {
                    self.writers_waiting.remove(request.waiter);
                    return self.take(request, expires_at);
                }
            },
        };
        // New readers wait behind it while its mark lives.
        self.writers_waiting.mark(request, now);
        held
    }

    /// A fair lock: the head of the queue of waiters (or anyone, when nobody waits) takes a
    /// free lock; anyone else who will wait joins the queue, its latest attempt's offer of a grant kept.
    pub(super) fn acquire_fair(
        &mut self,
        request: &AcquireRequest<'_>,
        expires_at: Instant,
        now: Instant,
    ) -> Acquire {
        let (owner, waiter, slot) = (request.owner, request.waiter, request.queue_slot);
        self.purge_queue(now);
        let head_or_none = self.queue.front().is_none_or(|(head, _)| head == waiter);
        match self.live_holder(now) {
            None if head_or_none => {
                // Everyone behind is re-anchored at this holder's lease end.
                self.offers.remove(waiter);
                if let Some((_, mine)) = self.queue.pop_front() {
                    let new_anchor = expires_at;
                    self.shift_queue(
                        new_anchor.saturating_duration_since(mine),
                        mine.saturating_duration_since(new_anchor),
                        now,
                    );
                }
                self.take(request, expires_at)
            }
            Some(holder) if holder.owner == *owner => {
                holder.count += 1;
                self.extend_holder(expires_at, now);
                Acquire::ACQUIRED
            }
            held => {
                let held = held.map(|h| remaining(h.expires_at, now));
                let queued = self.queue.iter().any(|(queued, _)| queued == waiter);
                if !queued && request.will_wait {
                    // Its place times out one slot after the place ahead of it.
                    let ahead = self
                        .queue
                        .back()
                        .map(|(_, timeout)| *timeout)
                        .unwrap_or_else(|| instant_after(now, held.unwrap_or_default()));
                    self.queue
                        .push_back((waiter.clone(), instant_after(ahead, slot)));
                }
                // The place keeps its latest attempt's offer (none drops an earlier one).
                if queued || request.will_wait {
                    match request.grant {
                        Some(offer) => {
                            self.offers.insert(waiter.clone(), (offer, owner.clone()));
                        }
                        None => {
                            self.offers.remove(waiter);
                        }
                    }
                }
                Acquire::Held {
                    remaining_lease: Some(self.queue_hint(waiter, now, slot)),
                }
            }
        }
    }

    /// A semaphore's permit: one of those available, kept under the request's owner (asked
    /// again, the same permit).
    pub(super) fn acquire_permit(
        &mut self,
        request: &AcquireRequest<'_>,
        expires_at: Instant,
        now: Instant,
    ) -> Acquire {
        self.reclaim_permits(now);
        if let Some(end) = self.permits_held.get_mut(request.owner) {
            // The same permit asked again (a retried request): nothing more taken.
            *end = (*end).max(expires_at);
            Acquire::ACQUIRED
        } else if self.permits.unwrap_or(0) > 0 {
            self.permits = self.permits.map(|available| available - 1);
            self.permits_held.insert(request.owner.clone(), expires_at);
            Acquire::ACQUIRED
        } else {
            Acquire::Held {
                remaining_lease: self.soonest_permit_end(now),
            }
        }
    }

    /// A latch lets through once its count is zero (or was never set).
    pub(super) fn pass_latch(&self) -> Acquire {
        match self.count {
            Some(count) if count > 0 => Acquire::Held {
                remaining_lease: None,
            },
            _ => Acquire::ACQUIRED,
        }
    }

    /// A reentrant or fenced lock, or a leadership: one holder, re-entered by its owner; a
    /// fenced kind's new hold gets the next token, a new leader wakes the observers. A plain
    /// lock's waiter refused marks itself, and a free plain lock goes to the waiter marked
    /// first.
    pub(super) fn acquire_exclusive(
        &mut self,
        request: &AcquireRequest<'_>,
        expires_at: Instant,
        now: Instant,
    ) -> Acquire {
        let kind = request.lock.kind;
        let fenced = kind.is_fenced();
        // The plain lock's waiters take it free in the order they were first refused.
        let plain = matches!(kind, LockKind::Reentrant | LockKind::Fenced);
        let turn_of_other = match plain && self.live_holder(now).is_none() {
            true => self.lock_waiting.of_other(request.waiter, now),
            false => None,
        };
        let acquired = match self.live_holder(now) {
            None if turn_of_other.is_some() => {
                self.lock_waiting.mark(request, now);
                Acquire::Held {
                    remaining_lease: turn_of_other,
                }
            }
            None => {
                if plain {
                    self.lock_waiting.remove(request.waiter);
                }
                self.take(request, expires_at);
                if fenced {
                    self.fencing_token += 1;
                }
                if kind == LockKind::Election {
                    // A new leader: observers look.
                    self.announce();
                }
                Acquire::ACQUIRED
            }
            Some(holder) if holder.owner == *request.owner => {
                holder.count += 1;
                self.extend_holder(expires_at, now);
                Acquire::ACQUIRED
            }
            Some(holder) => {
                let remaining_lease = Some(remaining(holder.expires_at, now));
                if plain {
                    self.lock_waiting.mark(request, now);
                }
                Acquire::Held { remaining_lease }
            }
        };
        match acquired {
            Acquire::Acquired(grant) if fenced => {
                Acquire::Acquired(grant.with_fencing_token(self.fencing_token))
            }
            other => other,
        }
    }
}
