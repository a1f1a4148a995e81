//! The fair lock: a holder key and a queue, in the name's `fair/` folder.
//!
//! `fair/h` is the holder (its value the holding hold's id, bound to its lease); each waiter
//! queued has a place `fair/q/<waiter id>`, bound to a lease that keeps it for the waiter's
//! queue slot, whose create revision is its turn and whose value is the grant offer of the
//! waiter's latest attempt (empty if it made none). The lock is taken when there is no holder
//! and the queue is empty or the taker's place is at its head. A release that finds the head
//! with an offer makes the offer's hold the holder on the offer's lease in the same
//! transaction, as the model's store grants; without one, the head takes the lock with an
//! acquire of its own once the watch tells it.
//!
//! Each step reads the name, decides, and writes only if nothing it read changed (read again
//! if it did).

use std::time::{Duration, Instant};

use dlock_core::backend::{Acquire, AcquireRequest, LockRef, LossReason, OwnerId, Release};
use dlock_core::LockError;
use serde_json::Value;

use crate::backend::{unknown, Inner};
use crate::holds::hold_id;
use crate::keys::{Family, NameKeys};
use crate::leases::whole_seconds;
use crate::steps::acquire::{busy, CONFLICT_RETRIES};
use crate::wire::{created_at, delete, empty, first_created, modified_at, put, range, Kv, Span};

/// A queued waiter's grant offer, as its place keeps it: `<attempt> <lease in ms> <hold id>`.
struct Offer {
    lease: Duration,
    hold: String,
}

impl Offer {
    fn text(offer: Option<dlock_core::backend::GrantOffer>, hold: &OwnerId) -> String {
        offer.map_or_else(String::new, |offer| {
            format!(
                "{} {} {}",
                offer.attempt,
                offer.lease.as_millis(),
                hold.as_str()
            )
        })
    }

    fn parse(kv: &Kv) -> Option<Offer> {
        let text = kv.value_text();
        let mut parts = text.splitn(3, ' ');
        let _attempt: u64 = parts.next()?.parse().ok()?;
        let lease: u64 = parts.next()?.parse().ok()?;
        let hold = parts.next()?.to_owned();
        Some(Offer {
            lease: Duration::from_millis(lease),
            hold,
        })
    }
}

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
        for _ in 0..CONFLICT_RETRIES {
            let over = self.over(lock.name)?;
            let read = self.read(vec![
                range(&Span::key(&tombstone)),
                first_created(&keys.all(), over.room()),
                range(&Span::key(&holder_key)),
                range(&Span::key(&place)),
                first_created(&queue, 1),
            ])?;
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
                if let Some(taken) = self.take_turn(request, &over, compare, placed.is_some())? {
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
            if !self.keep_place(request, &keys, &over, compare, placed.is_some())? {
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

    /// Takes the fair lock for the request's hold (its place, if it had one, goes), if nothing
    /// `compare` checks changed: `None` if something did.
    fn take_turn(
        &self,
        request: &AcquireRequest<'_>,
        over: &crate::steps::over::Over,
        compare: Vec<Value>,
        placed: bool,
    ) -> Result<Option<Acquire>, LockError> {
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
        let answer = match self.write(compare, success, Vec::new()) {
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
            return Ok(None);
        }
        over.done(self);
        self.remember(
            lock,
            request.owner,
            holder_key,
            answer.revision,
            (lease, session),
            sent_at + request.lease,
        );
        Ok(Some(Acquire::ACQUIRED))
    }

    /// A refused attempt: the waiter's place kept for its queue slot with the attempt's offer
    /// (none drops an earlier one), or made if it will wait; false if something
    /// `compare` checks changed.
    fn keep_place(
        &self,
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
        over: &crate::steps::over::Over,
        compare: Vec<Value>,
        placed: bool,
    ) -> Result<bool, LockError> {
        let place = keys.place(request.waiter);
        if !placed && !request.will_wait {
            return Ok(true);
        }
        let kept = self
            .leases
            .shared(request.queue_slot.max(Duration::from_secs(1)))?;
        let offer = Offer::text(request.grant, request.owner);
        // A put keeps the place's create revision, its turn.
        let mut success = over.deletes(&[]);
        success.push(put(&place, offer.as_bytes(), kept.id));
        Ok(self.write(compare, success, Vec::new())?.succeeded)
    }

    /// Releases the fair hold `owner`: the holder key goes, or, if the queue's head made an
    /// offer, becomes the offer's hold on the offer's lease (and the head's place goes).
    pub(crate) fn release_fair(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Release, LockError> {
        let keys = self.keys(lock.name);
        let holder_key = keys.hold(lock, owner);
        let queue = keys.queue();
        let id = hold_id(lock, owner);
        for _ in 0..CONFLICT_RETRIES {
            let over = self.over(lock.name)?;
            let read = self.read(vec![
                range(&Span::key(&holder_key)),
                first_created(&queue, 1),
            ])?;
            let holder = over
                .live(read.kvs(0)?)
                .into_iter()
                .find(|holder| Self::is_mine(lock, owner, holder));
            let Some(holder) = holder else {
                if over.find(lock, owner).is_some() {
                    self.drop_over(&over, &id);
                } else {
                    self.forget_released(&id);
                }
                return Ok(Release::NotHeld);
            };
            let head = read.kvs(1)?.into_iter().next();
            let offer = head.as_ref().and_then(Offer::parse);
            let grant = match &offer {
                Some(offer) => Some(self.leases.grant(whole_seconds(offer.lease))?),
                None => None,
            };
            let mut success = over.deletes(&[&holder_key]);
            match (&head, &offer, grant) {
                (Some(head), Some(offer), Some(grant)) => {
                    success.push(put(&holder_key, offer.hold.as_bytes(), grant.id));
                    success.push(delete(&Span::key(&head.key)));
                }
                _ => success.push(delete(&Span::key(&holder_key))),
            }
            let compare = vec![
                modified_at(&holder_key, holder.mod_revision),
                match &head {
                    Some(head) => modified_at(&head.key, head.mod_revision),
                    None => empty(&queue),
                },
            ];
            let answer = self.write(compare, success, Vec::new())?;
            if answer.succeeded {
                over.done(self);
                self.forget_released(&id);
                return Ok(Release::Released);
            }
            if let Some(grant) = grant {
                self.leases.spare(grant);
            }
        }
        Err(busy(lock.name))
    }

    /// A fair waiter gives up: its place goes (a hold it was granted stays granted: the client
    /// then finds it held by that hold and releases it). A read-write lock's waiter gives up:
    /// its mark goes (a writer's wakes the readers it held off: they watch the writers' marks).
    pub(crate) fn cancel_wait(&self, lock: LockRef<'_>, waiter: &OwnerId) -> Result<(), LockError> {
        let place = match lock.kind {
            dlock_core::LockKind::Fair => self.keys(lock.name).place(waiter),
            dlock_core::LockKind::Write => self.keys(lock.name).writer_mark(waiter),
            dlock_core::LockKind::Read => self.keys(lock.name).reader_mark(waiter),
            _ => return Ok(()),
        };
        self.write(Vec::new(), vec![delete(&Span::key(&place))], Vec::new())?;
        Ok(())
    }
}
