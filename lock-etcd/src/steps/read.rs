//! A read-write lock's read: taken while no live key of the name is outside the readers'
//! folder (the caller's own write hold excepted), and, while a writer waits, only by a hold
//! that reads already, a read next to its own write hold, or a reader that waited behind a
//! writer's hold.

use std::time::Instant;

use dlock_core::backend::{Acquire, AcquireRequest, LockRef, LossReason};
use dlock_core::LockKind;

use crate::backend::Inner;
use crate::holds::hold_id;
use crate::leases::{Granted, SessionKey};
use crate::steps::acquire::{busy, CONFLICT_RETRIES};
use crate::steps::tries::Tried;
use crate::transport::Fail;
use crate::wire::{delete, empty, exists, first_created, put, range, Span};

impl Inner {
    /// A refusal with no call, if the name's watches, in step with the store, show a writer
    /// waiting (its mark) and no writer's hold: a try could only be refused by the writers'
    /// marks, with nothing to write (a reader marks itself behind a writer's hold only), or
    /// find the name in use as another kind, which the try made once the marks go reports. A
    /// reader that leaves while a writer waits and asks again at once, as a loop does, was
    /// refused by a transaction each time. Its wait is woken when a writer's mark goes (the
    /// writer went in, or gave up), and a mark gone before it subscribed counts as heard. Not
    /// for a reader next to its own write hold, one this backend marked (either goes in past
    /// the marks), nor on a name this backend has a hold of.
    pub(super) fn read_refused_seen(&self, request: &AcquireRequest<'_>) -> Option<Acquire> {
        let lock = request.lock;
        if !request.will_wait || request.reentry || request.write_hold.is_some() {
            return None;
        }
        let keys = self.keys(lock.name);
        let own_mark = keys.reader_mark(request.waiter);
        // The watches first: on a name nobody of this backend waited on lately, no stream.
        let refused = self
            .watches
            .reader_refused_seen(&keys.reader_watch(), &keys.writer_marks().key)?;
        let ours = self.reader_marks.has(&own_mark) || !self.holds.of_name(lock.name).is_empty();
        (refused && !ours).then_some(Acquire::Held {
            remaining_lease: None,
        })
    }

    /// A read hold: taken while no live key of the name is outside the readers' folder, except
    /// the caller's own write hold (a writer may read).
    pub(super) fn take_read(
        &self,
        request: &AcquireRequest<'_>,
        lease: Granted,
        session: Option<SessionKey>,
    ) -> Result<Acquire, Fail> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let key = keys.hold(lock, request.owner);
        let readers = keys.side(LockKind::Read);
        let reader_end = readers.end.clone().unwrap_or_default();
        let tombstone = keys.ended(request.owner.as_str());
        let marks = keys.writer_marks();
        let own_mark = keys.reader_mark(request.waiter);
        let write_key = request
            .write_hold
            .map(|writer| keys.hold(LockRef::new(lock.name, LockKind::Write), writer));
        // A reader that will wait behind another's write hold marks itself in its refusal's
        // own transaction, on the lease marks share if the backend keeps one (else in a call
        // after the refusal, which keeps one for the next).
        let mark_lease = (request.will_wait && write_key.is_none())
            .then(|| self.leases.kept_mark_lease(request.queue_slot))
            .flatten();
        // While a writer waits, the read comes in only as a hold that reads already, next to
        // the caller's own write hold, or as a reader that waited behind a writer's hold: as
        // long as that key is there. A reader this backend marked compares its mark at once.
        let mut vouched = self.reader_marks.has(&own_mark).then(|| own_mark.clone());
        let mut lean = self.lean_first_try(request, &keys);
        for _ in 0..CONFLICT_RETRIES {
            let over = self.over(lock.name)?;
            let live = self
                .holds
                .lookup(&hold_id(lock, request.owner))
                .is_some_and(|record| record.written.is_some() && !record.is_over(Instant::now()));
            if live {
                // Its own live hold asked again (a try made again after its answer was lost):
                // extended, never shortened, as the exclusive kinds' is.
                self.drop_own(lease, session.as_ref());
                return self.extend(request).map_err(Fail::Lock);
            }
            let mut compare = vec![empty(&Span::key(&tombstone))];
            compare.extend(over.empty(&Span::between(&keys.prefix, &readers.key)));
            let after_readers = Span::between(&reader_end, &crate::wire::prefix_end(&keys.prefix));
            match &write_key {
                Some(write_key) => {
                    let mut after = write_key.clone();
                    after.push(0);
                    compare.extend(over.empty(&Span::between(&reader_end, write_key)));
                    compare.extend(over.empty(&Span::between(
                        &after,
                        &crate::wire::prefix_end(&keys.prefix),
                    )));
                }
                None => compare.extend(over.empty(&after_readers)),
            }
            compare.push(match vouched.take() {
                Some(vouching) => exists(&Span::key(&vouching)),
                None => empty(&marks),
            });
            let mut success = over.deletes(&[&key]);
            success.push(put(&key, request.owner.as_str().as_bytes(), lease.id));
            success.push(delete(&Span::key(&own_mark)));
            let failure = vec![
                range(&Span::key(&tombstone)),
                first_created(&keys.all(), over.room()),
                first_created(&keys.side(LockKind::Write), over.room()),
                first_created(&marks, 1),
                range(&Span::key(&key)),
                range(&Span::key(&own_mark)),
            ];
            let marking = match mark_lease {
                Some(mark_lease) => {
                    let waits = self.mark_waits(lease, session.as_ref(), &tombstone)?;
                    Self::reader_mark(&keys, &over, waits, request, &own_mark, &mark_lease)
                        .map(|write| (write, mark_lease))
                }
                None => None,
            };
            let tried = self.try_with(&mut lean, failure, marking, |failure| {
                let branches = [compare, success, failure];
                self.make_hold(request, &key, &over, branches, (lease, session.clone()))
            })?;
            let (answer, marked) = match tried {
                Tried::Granted(_) => {
                    self.reader_marks.forget(&own_mark);
                    return Ok(Acquire::ACQUIRED);
                }
                Tried::Refused(reads, marked) => (reads, marked),
            };
            if marked {
                self.reader_marks.put(&own_mark);
            } else if answer.kvs(5)?.is_empty() {
                self.reader_marks.forget(&own_mark);
            }
            if !answer.kvs(0)?.is_empty() {
                return Ok(Acquire::Gone {
                    reason: LossReason::ForceUnlocked,
                });
            }
            let first = over.live(answer.kvs(1)?).into_iter().next();
            self.check_kind(lock, &keys, first.as_ref())?;
            let writer = over.live(answer.kvs(2)?).into_iter().next();
            let own_write = writer.as_ref().filter(|writer| {
                let (write_key, owner) = (write_key.as_ref(), request.write_hold);
                write_key.is_some_and(|key| *key == writer.key)
                    && owner.is_some_and(|owner| {
                        Self::is_mine(LockRef::new(lock.name, LockKind::Write), owner, writer)
                    })
            });
            let other_writer = writer.as_ref().filter(|_| own_write.is_none());
            if other_writer.is_none() && !answer.kvs(3)?.is_empty() {
                let reading = over.live(answer.kvs(4)?).into_iter().next();
                let waited = answer.kvs(5)?.into_iter().next();
                vouched = match (reading, own_write, waited) {
                    (Some(reading), _, _) => Some(reading.key),
                    (None, Some(own_write), _) => Some(own_write.key.clone()),
                    (None, None, Some(waited)) => Some(waited.key),
                    // How long the writers' marks last is not asked (a round trip): the
                    // reader watches them, and tries again within half a slot.
                    (None, None, None) => {
                        return Ok(Acquire::Held {
                            remaining_lease: None,
                        })
                    }
                };
                continue;
            }
            if other_writer.is_some() && request.will_wait && !marked {
                // Behind a writer's hold: it goes in before the next writer.
                self.mark_waiter(request, own_mark.clone())?;
                self.reader_marks.put(&own_mark);
            }
            if first.is_none() {
                continue;
            }
            let remaining = match other_writer {
                Some(writer) => self.hint_for(request, writer)?,
                None => None,
            };
            return Ok(Acquire::Held {
                remaining_lease: remaining,
            });
        }
        Err(Fail::Lock(busy(lock.name)))
    }
}
