//! The fair lock: a holder key and a queue, in the name's `fair/` folder.
//!
//! `fair/h` is the holder (its value the holding hold's id, bound to its lease); each waiter
//! queued has a place `fair/q/<waiter id>`, bound to a lease that keeps it for the waiter's
//! queue slot, whose create revision is its turn. The lock is taken when there is no holder
//! and the queue is empty or the taker's place is at its head. A release deletes `fair/h` as
//! any exclusive hold's key goes (`release.rs`); the head takes the lock with an acquire of its
//! own once the watch tells it. This backend makes no grants (`hands_over` is false for the
//! fair lock), and keeps no offers: a grant would put two calls on the release's path (a read
//! of the head's offer, and a lease for the grant), where the head's own acquire costs one.
//!
//! Each step reads the name, decides, and writes only if nothing it read changed (read again
//! if it did).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use dlock_core::backend::{Acquire, AcquireRequest, LockRef, LossReason, OwnerId};
use dlock_core::LockError;
use serde_json::Value;

use crate::backend::{unknown, Inner};
use crate::keys::{Family, NameKeys};
use crate::steps::acquire::{busy, CONFLICT_RETRIES};
use crate::steps::over::Over;
use crate::wire::{
    created_at, delete, empty, first_created, modified_at, put, range, Span, TxnAnswer,
};

/// `create_revision(every key of span) >= revision`: nothing in the span is older.
fn none_older(span: &Span, revision: i64) -> Value {
    let mut compare = created_at(span, revision.saturating_sub(1));
    compare["result"] = Value::from("GREATER");
    compare
}

impl Inner {
    /// An attempt at the fair lock: taken, extended (the same hold asked again), or refused
    /// with the waiter's place made or kept, and its offer set.
    pub(crate) fn take_fair(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let holder_key = keys.hold(lock, request.owner);
        let place = keys.place(request.waiter);
        let queue = keys.queue();
        let others = keys.others(Family::Fair);
        let tombstone = keys.ended(request.owner.as_str());
        // The first attempt takes the lock in one call if the store is as this backend last
        // saw it (the waiter's place at the head, or no queue, and no holder); the reads that
        // say otherwise come back with its refusal.
        let mut at_once = true;
        for _ in 0..CONFLICT_RETRIES {
            let over = self.over(lock.name)?;
            let reads = vec![
                range(&Span::key(&tombstone)),
                first_created(&keys.all(), over.room()),
                range(&Span::key(&holder_key)),
                range(&Span::key(&place)),
                first_created(&queue, 1),
            ];
            let read = if std::mem::take(&mut at_once) {
                match self.take_at_once(request, &keys, &over, reads)? {
                    Ok(taken) => return Ok(taken),
                    Err(refused) => refused,
                }
            } else {
                self.read(reads)?
            };
            if !read.kvs(0)?.is_empty() {
                return Ok(Acquire::Gone {
                    reason: LossReason::ForceUnlocked,
                });
            }
            let first = over.live(read.kvs(1)?).into_iter().next();
            self.check_kind(lock, &keys, first.as_ref())?;
            let holder = over.live(read.kvs(2)?).into_iter().next();
            if holder
                .as_ref()
                .is_some_and(|h| Self::is_mine(lock, request.owner, h))
            {
                return self.extend(request);
            }
            let placed = read.kvs(3)?.into_iter().next();
            let head = read.kvs(4)?.into_iter().next();
            let mut compare = vec![empty(&Span::key(&tombstone))];
            compare.extend(over.empty(&others[0]));
            compare.extend(over.empty(&others[1]));
            compare.push(match &placed {
                Some(placed) => modified_at(&place, placed.mod_revision),
                None => empty(&Span::key(&place)),
            });
            let my_turn = head.as_ref().is_none_or(|head| head.key == place);
            if holder.is_none() && my_turn {
                compare.extend(over.empty(&Span::key(&holder_key)));
                compare.push(match &head {
                    Some(head) => none_older(&queue, head.create_revision),
                    None => empty(&queue),
                });
                let placed = placed.is_some();
                if let Ok(taken) = self.take_turn(request, &over, compare, placed, Vec::new())? {
                    return Ok(taken);
                }
                continue;
            }
            compare.push(match &holder {
                Some(holder) => modified_at(&holder_key, holder.mod_revision),
                None => empty(&Span::key(&holder_key)),
            });
            compare.push(match &head {
                Some(head) => created_at(&Span::key(&head.key), head.create_revision),
                None => empty(&queue),
            });
            let turn = placed.as_ref().map(|placed| placed.create_revision);
            if !self.keep_place(request, &keys, &over, compare, turn)? {
                continue;
            }
            let mut remaining = match &holder {
                Some(holder) => self.wait_for(holder)?,
                None => None,
            };
            if placed.is_some() || request.will_wait {
                // Back before the place's lease could run out, to keep it.
                let keep = request.queue_slot / 2;
                remaining = Some(remaining.map_or(keep, |r| r.min(keep)));
            }
            return Ok(Acquire::Held {
                remaining_lease: remaining,
            });
        }
        Err(busy(lock.name))
    }

    /// One call that takes the fair lock if the waiter's place is where this backend last saw
    /// it, at the head of the queue (or it has none and nobody queues), with no holder and no
    /// other kind under the name; refused, the answers of `reads`, in their order.
    fn take_at_once(
        &self,
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
        over: &Over,
        reads: Vec<Value>,
    ) -> Result<Result<Acquire, TxnAnswer>, LockError> {
        let lock = request.lock;
        let place = keys.place(request.waiter);
        let queue = keys.queue();
        let others = keys.others(Family::Fair);
        let mut compare = vec![empty(&Span::key(&keys.ended(request.owner.as_str())))];
        compare.extend(over.empty(&others[0]));
        compare.extend(over.empty(&others[1]));
        compare.extend(over.empty(&Span::key(&keys.hold(lock, request.owner))));
        let turn = self.turns.of(&place);
        match turn {
            Some(turn) => {
                compare.push(created_at(&Span::key(&place), turn));
                compare.push(none_older(&queue, turn));
            }
            None => {
                compare.push(empty(&Span::key(&place)));
                compare.push(empty(&queue));
            }
        }
        self.take_turn(request, over, compare, turn.is_some(), reads)
    }

    /// Takes the fair lock for the request's hold (its place, if it had one, goes), if nothing
    /// `compare` checks changed; refused, the answers of `failure`.
    fn take_turn(
        &self,
        request: &AcquireRequest<'_>,
        over: &Over,
        compare: Vec<Value>,
        placed: bool,
        failure: Vec<Value>,
    ) -> Result<Result<Acquire, TxnAnswer>, LockError> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let holder_key = keys.hold(lock, request.owner);
        let (lease, session) = self.leases.lease_for(request.owner, request.lease)?;
        let mut success = over.deletes(&[&holder_key]);
        success.push(put(
            &holder_key,
            request.owner.as_str().as_bytes(),
            lease.id,
        ));
        if placed {
            success.push(delete(&Span::key(&keys.place(request.waiter))));
        }
        let mut compare = compare;
        if let Err(fail) = self.gated(&mut compare, lease, session.as_ref()) {
            self.drop_own(lease, session.as_ref());
            return Err(fail.into());
        }
        let sent_at = Instant::now();
        let answer = match self.write(compare, success, failure) {
            Ok(answer) => answer,
            Err(fail) => {
                if unknown(&fail) {
                    self.remember_unknown(
                        lock,
                        request.owner,
                        holder_key,
                        (lease, session),
                        sent_at + request.lease,
                    );
                } else {
                    self.drop_own(lease, session.as_ref());
                }
                return Err(fail.into());
            }
        };
        if !answer.succeeded {
            self.drop_own(lease, session.as_ref());
            return Ok(Err(answer));
        }
        self.turns.forget(&keys.place(request.waiter));
        over.done(self);
        self.remember(
            lock,
            request.owner,
            holder_key,
            answer.revision,
            (lease, session),
            sent_at + request.lease,
        );
        Ok(Ok(Acquire::ACQUIRED))
    }

    /// A refused attempt: the waiter's place kept for its queue slot, or made if it will wait;
    /// false if something `compare` checks changed.
    fn keep_place(
        &self,
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
        over: &Over,
        compare: Vec<Value>,
        turn: Option<i64>,
    ) -> Result<bool, LockError> {
        let place = keys.place(request.waiter);
        if turn.is_none() && !request.will_wait {
            return Ok(true);
        }
        let kept = self
            .leases
            .shared(request.queue_slot.max(Duration::from_secs(1)))?;
        // A put keeps the place's create revision, its turn.
        let mut success = over.deletes(&[]);
        success.push(put(&place, b"", kept.id));
        let answer = self.write(compare, success, Vec::new())?;
        if answer.succeeded {
            // A new place is created by this write: its turn is the write's revision.
            self.turns.note(place, turn.unwrap_or(answer.revision));
        }
        Ok(answer.succeeded)
    }

    /// A fair waiter gives up: its place goes (a hold it was granted stays granted: the client
    /// then finds it held by that hold and releases it). A read-write lock's waiter gives up:
    /// its mark goes (a writer's wakes the readers it held off: they watch the writers' marks).
    pub(crate) fn cancel_wait(&self, lock: LockRef<'_>, waiter: &OwnerId) -> Result<(), LockError> {
        let place = match lock.kind {
            dlock_core::LockKind::Fair => {
                let place = self.keys(lock.name).place(waiter);
                self.turns.forget(&place);
                place
            }
            dlock_core::LockKind::Write => self.keys(lock.name).writer_mark(waiter),
            dlock_core::LockKind::Read => self.keys(lock.name).reader_mark(waiter),
            _ => return Ok(()),
        };
        self.write(Vec::new(), vec![delete(&Span::key(&place))], Vec::new())?;
        Ok(())
    }
}

/// The turn (create revision) of each fair waiter's place as this backend last wrote or read
/// it: a hint for its next attempt to take the lock in one call. A wrong one only fails that
/// call's comparison.
#[derive(Default)]
pub(crate) struct Turns {
    places: Mutex<HashMap<Vec<u8>, i64>>,
}

impl Turns {
    /// The most places remembered; past it the hints start over.
    const MOST: usize = 4096;

    fn of(&self, place: &[u8]) -> Option<i64> {
        self.places.lock().get(place).copied()
    }

    fn note(&self, place: Vec<u8>, turn: i64) {
        let mut places = self.places.lock();
        if places.len() >= Self::MOST {
            places.clear();
        }
        places.insert(place, turn);
    }

    fn forget(&self, place: &[u8]) {
        self.places.lock().remove(place);
    }
}
