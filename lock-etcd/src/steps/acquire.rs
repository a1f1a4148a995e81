//! Taking a hold: the exclusive kinds' and a read's first acquire, and the extend of a hold the
//! client has. Each is one transaction, which also refuses a hold an operator force-unlocked
//! (its tombstone is there) and deletes the name's holds this backend knows to be over.

use std::time::{Duration, Instant};

use dlock_core::backend::{Acquire, AcquireRequest, Grant, LockRef, LossReason};
use dlock_core::{LockError, LockKind};

use crate::backend::{unknown, Inner};
use crate::holds::{hold_id, PendingMove};
use crate::keys::{shares_key, Family, NameKeys};
use crate::leases::{whole_seconds, Granted, SessionKey};
use crate::steps::over::Over;
use crate::transport::Fail;
use crate::wire::{
    delete, empty, exists, first_created, modified_at, nested, put, range, rebind, Kv, Span,
    TxnAnswer,
};
use serde_json::Value;

/// Attempts of a step before it gives up on a name changing under it.
pub(crate) const CONFLICT_RETRIES: usize = 32;

/// The least time a waiter is told a hold has left (see [`Inner::wait_for`]).
const RETRY_AFTER_A_LAST_SECOND: Duration = Duration::from_millis(200);

impl Inner {
    pub(crate) fn acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        Self::family(lock)?;
        if request.reentry {
            return self.extend(request);
        }
        match lock.kind {
            LockKind::Read => self.retry_on_lost_session(request, Self::take_read),
            LockKind::Fair => self.take_fair(request),
            LockKind::Semaphore => self.take_permit(request),
            LockKind::Latch => self.latch_open(request),
            _ => self.retry_on_lost_session(request, Self::take_exclusive),
        }
    }

    /// Runs `take` with a lease for the request; once more with a new one if etcd no longer
    /// had the session (it ran out while the client held nothing on it).
    fn retry_on_lost_session(
        &self,
        request: &AcquireRequest<'_>,
        take: fn(&Self, &AcquireRequest<'_>, Granted, Option<SessionKey>) -> Result<Acquire, Fail>,
    ) -> Result<Acquire, LockError> {
        for _ in 0..2 {
            let (lease, session) = self.leases.lease_for(request.owner, request.lease)?;
            match take(self, request, lease, session.clone()) {
                Err(Fail::LeaseNotFound) => {
                    if let Some(session) = &session {
                        self.leases.forget_session(session);
                    }
                }
                // The key may be on the lease: it is not handed to another attempt.
                Err(fail) if unknown(&fail) => return Err(fail.into()),
                Err(fail) => {
                    self.drop_own(lease, session.as_ref());
                    return Err(fail.into());
                }
                Ok(acquire) => {
                    if !acquire.is_acquired() {
                        self.drop_own(lease, session.as_ref());
                    }
                    return Ok(acquire);
                }
            }
        }
        Err(LockError::protocol(
            "etcd lost the client's lease twice in a row",
        ))
    }

    /// A lease of the hold's own that no hold uses is kept for the next attempt of that TTL
    /// (a waiter tries again soon), while it lasts.
    pub(crate) fn drop_own(&self, lease: Granted, session: Option<&SessionKey>) {
        if session.is_none() {
            self.leases.spare(lease);
        }
    }

    /// The exclusive kinds (reentrant, fenced, write, election): taken when no live key of the
    /// name exists, etcd's create-if-absent on the whole prefix.
    fn take_exclusive(
        &self,
        request: &AcquireRequest<'_>,
        lease: Granted,
        session: Option<SessionKey>,
    ) -> Result<Acquire, Fail> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let key = keys.hold(lock, request.owner);
        // An election's key shows its candidate (etcd's `Election`); a lock's, its hold.
        let value = request.value.unwrap_or(request.owner.as_str()).as_bytes();
        let tombstone = keys.ended(request.owner.as_str());
        // A writer waits for the readers that waited behind the last writer.
        let readers_waiting = (lock.kind == LockKind::Write).then(|| keys.reader_marks());
        // A writer that will wait marks itself in its refusal's own transaction, on the lease
        // marks share if the backend keeps one (else in a call after the refusal, which keeps
        // one for the next: a writer taking a free lock waits for no lease).
        let mark = (lock.kind == LockKind::Write && request.will_wait)
            .then(|| keys.writer_mark(request.waiter));
        let mark_lease = mark
            .as_ref()
            .and_then(|_| self.leases.kept_mark_lease(request.queue_slot));
        let mut lean = self.lean_first_try(request, &keys);
        for _ in 0..CONFLICT_RETRIES {
            let over = self.over(lock.name)?;
            let mut compare = vec![empty(&Span::key(&tombstone))];
            compare.extend(over.empty(&keys.all()));
            compare.extend(readers_waiting.as_ref().map(empty));
            // The key of an over hold of its own is written over (etcd takes no delete and put
            // of one key in a transaction): the revision of this write is the new hold's.
            let mut success = over.deletes(&[&key]);
            success.push(put(&key, value, lease.id));
            if lock.kind == LockKind::Write {
                // A writer that waited stops holding readers off once it writes.
                success.push(delete(&Span::key(&keys.writer_mark(request.waiter))));
            }
            let creating = self.holds.creating(&key);
            let mut failure = vec![
                range(&Span::key(&tombstone)),
                first_created(&keys.all(), over.room()),
            ];
            failure.extend(
                readers_waiting
                    .as_ref()
                    .map(|marks| first_created(marks, 1)),
            );
            let marking = match (&mark, mark_lease) {
                (Some(mark), Some(mark_lease)) => {
                    let waits = self.mark_waits(lease, session.as_ref(), &tombstone)?;
                    let write = Self::writer_mark(request, &keys, &over, waits, mark, &mark_lease);
                    Some((write, mark_lease))
                }
                _ => None,
            };
            let tried = self.try_with(&mut lean, failure, marking, |failure| {
                let branches = [compare, success, failure];
                self.make_hold(request, &key, &over, branches, (lease, session.clone()))
            })?;
            let answer = match tried {
                Tried::Granted(answer) => return Ok(self.granted(lock.kind, answer.revision)),
                Tried::Refused(reads, _) => reads,
            };
            drop(creating);
            if !answer.kvs(0)?.is_empty() {
                return Ok(Acquire::Gone {
                    reason: LossReason::ForceUnlocked,
                });
            }
            let first = over.live(answer.kvs(1)?).into_iter().next();
            self.check_kind(lock, &keys, first.as_ref())?;
            match first {
                // Its own key: this very hold (made by an attempt whose answer was lost, or
                // asked again without the flag of a re-entry), extended; or another hold of the
                // same client.
                Some(first) if first.key == key && Self::is_mine(lock, request.owner, &first) => {
                    self.drop_own(lease, session.as_ref());
                    return self.extend(request).map_err(Fail::Lock);
                }
                Some(first) => {
                    let held = Acquire::Held {
                        remaining_lease: self.hint_for(request, &first)?,
                    };
                    if let (Some(mark), None) = (&mark, &mark_lease) {
                        self.mark_waiter(request, mark.clone())?;
                    }
                    return Ok(held);
                }
                None => {
                    if readers_waiting.is_some() && !answer.kvs(2)?.is_empty() {
                        // Free, but the readers that waited behind the last writer go first
                        // (their releases wake the writer).
                        if let (Some(mark), None) = (&mark, &mark_lease) {
                            self.mark_waiter(request, mark.clone())?;
                        }
                        return Ok(Acquire::Held {
                            remaining_lease: None,
                        });
                    }
                    // Only over keys, changed meanwhile: looked at again.
                }
            }
        }
        Err(Fail::Lock(busy(lock.name)))
    }

    /// Whether `request`'s first transaction goes without the reads a refusal needs: a first
    /// try that would wait anyway, on a name this backend has not waited on within the last
    /// second (most such tries are granted, and etcd parses every branch it is sent; on a
    /// contended name most are refused, and a refusal without its reads costs a second call).
    /// A single try keeps them: its refusal is its answer.
    fn lean_first_try(&self, request: &AcquireRequest<'_>, keys: &NameKeys) -> bool {
        request.first_try && request.will_wait && !self.watches.watched(&keys.prefix)
    }

    /// Sends a try through `send`, given the failure branch to put in its transaction: the
    /// reads `failure`, then `marking` (what a refusal writes: a waiter's mark, as a nested
    /// transaction, and the marks' lease it is on); or, once, while `lean`, the mark alone, and
    /// `failure` read in a second call if it was refused. That answer is as of the read, as
    /// true as one read with the refusal (the name may have changed between: then the caller
    /// tries again). A marks' lease etcd no longer has is forgotten.
    fn try_with(
        &self,
        lean: &mut bool,
        failure: Vec<Value>,
        marking: Option<(Value, Granted)>,
        send: impl FnOnce(Vec<Value>) -> Result<TxnAnswer, Fail>,
    ) -> Result<Tried, Fail> {
        let (writes, mark_lease) = match marking {
            Some((write, lease)) => (vec![write], Some(lease)),
            None => (Vec::new(), None),
        };
        self.try_writing(lean, failure, writes, send)
            .inspect_err(|fail| {
                if let (Fail::LeaseNotFound, Some(lease)) = (fail, mark_lease) {
                    self.leases.forget_mark_lease(lease.id);
                }
            })
    }

    /// [`try_with`](Self::try_with)'s sending, `writes` being the refusal's.
    fn try_writing(
        &self,
        lean: &mut bool,
        failure: Vec<Value>,
        writes: Vec<Value>,
        send: impl FnOnce(Vec<Value>) -> Result<TxnAnswer, Fail>,
    ) -> Result<Tried, Fail> {
        let wrote = !writes.is_empty();
        if !std::mem::take(lean) {
            let reads = failure.len();
            let mut branch = failure;
            branch.extend(writes);
            let answer = send(branch)?;
            if answer.succeeded {
                return Ok(Tried::Granted(answer));
            }
            let made = wrote && Self::made(&answer, reads)?;
            return Ok(Tried::Refused(answer, made));
        }
        let answer = send(writes)?;
        if answer.succeeded {
            return Ok(Tried::Granted(answer));
        }
        let made = wrote && Self::made(&answer, 0)?;
        // A transaction of reads alone "succeeds": never taken for a grant.
        Ok(Tried::Refused(
            self.read(failure).map_err(Fail::Lock)?,
            made,
        ))
    }

    /// What a refusal's mark is put under: the session's gate passed and the hold has no
    /// tombstone. Only a try that could have made its hold marks its waiter: one of a session
    /// whose gate moved since (sent before, landing late) makes nothing.
    fn mark_waits(
        &self,
        lease: Granted,
        session: Option<&SessionKey>,
        tombstone: &[u8],
    ) -> Result<Vec<Value>, Fail> {
        let mut waits = Vec::new();
        self.gated(&mut waits, lease, session)?;
        waits.push(empty(&Span::key(tombstone)));
        Ok(waits)
    }

    /// Whether the nested transaction answered at `at` took its success branch.
    fn made(answer: &TxnAnswer, at: usize) -> Result<bool, Fail> {
        Ok(answer.nested(at).map_err(Fail::Lock)?.succeeded)
    }

    /// The failure branch's write that marks a writer that will wait, `mark` on the marks'
    /// lease, where `waits` holds (the session's gate passed, no tombstone of the hold) and
    /// no other kind uses the name (no key outside the read-write folder, but `over`'s): a
    /// refusal that is a wait, not an end. A writer refused by holds, or by the readers'
    /// marks, is so marked in the refusal's own step.
    fn writer_mark(
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
        over: &Over,
        mut waits: Vec<Value>,
        mark: &[u8],
        mark_lease: &Granted,
    ) -> Value {
        for span in keys.others(Family::ReadWrite) {
            waits.extend(over.empty(&span));
        }
        let waiter = request.waiter.as_str().as_bytes();
        nested(waits, vec![put(mark, waiter, mark_lease.id)], Vec::new())
    }

    /// The failure branch's write that marks a reader that will wait behind a writer's hold,
    /// `mark` on the marks' lease, where `waits` holds (the session's gate passed, no
    /// tombstone of the hold), a key of a writer is under the name and none of another kind:
    /// the reader is so marked in the refusal's own step. `None` where the name has an over
    /// hold of this client's among the writers (a key that is no writer's hold any more: the
    /// reader is marked after its refusal if a writer's hold is there).
    fn reader_mark(
        keys: &NameKeys,
        over: &Over,
        mut waits: Vec<Value>,
        request: &AcquireRequest<'_>,
        mark: &[u8],
        mark_lease: &Granted,
    ) -> Option<Value> {
        let writers = keys.side(LockKind::Write);
        let (over_writers, _) = over.split(&writers);
        if !over_writers.is_empty() {
            return None;
        }
        waits.push(exists(&writers));
        for span in keys.others(Family::ReadWrite) {
            waits.extend(over.empty(&span));
        }
        let waiter = request.waiter.as_str().as_bytes();
        Some(nested(
            waits,
            vec![put(mark, waiter, mark_lease.id)],
            Vec::new(),
        ))
    }

    /// Marks the waiter of a read-write lock that will wait as waiting (`mark`: its key as a
    /// writer, or as a reader behind a writer's hold), on the lease marks share, which lasts
    /// its slot (whole seconds) and at most a second more. Its next try marks it again before
    /// its slot ends.
    fn mark_waiter(&self, request: &AcquireRequest<'_>, mark: Vec<u8>) -> Result<(), Fail> {
        let lease = self.leases.mark_lease(request.queue_slot)?;
        let waiter = request.waiter.as_str().as_bytes();
        self.write(Vec::new(), vec![put(&mark, waiter, lease.id)], Vec::new())
            .inspect_err(|fail| {
                if matches!(fail, Fail::LeaseNotFound) {
                    self.leases.forget_mark_lease(lease.id);
                }
            })?;
        Ok(())
    }

    /// Sends the transaction that makes `request`'s hold at `key` (its success branch puts the
    /// key), and remembers the hold it made, counted on until the request's sent-at plus its
    /// lease; or, if its outcome is unknown, the hold it may have made. `over`: the name's over
    /// holds the transaction deletes.
    fn make_hold(
        &self,
        request: &AcquireRequest<'_>,
        key: &[u8],
        over: &Over,
        [mut compare, success, failure]: [Vec<Value>; 3],
        (lease, session): (Granted, Option<SessionKey>),
    ) -> Result<TxnAnswer, Fail> {
        self.gated(&mut compare, lease, session.as_ref())?;
        let deadline = Instant::now() + request.lease;
        let (lock, owner) = (request.lock, request.owner);
        match self.write(compare, success, failure) {
            Ok(answer) => {
                if answer.succeeded {
                    over.done(self);
                    let made = (lease, session);
                    self.remember(lock, owner, key.to_vec(), answer.revision, made, deadline);
                }
                Ok(answer)
            }
            Err(fail) => {
                if unknown(&fail) {
                    self.remember_unknown(lock, owner, key.to_vec(), (lease, session), deadline);
                }
                Err(fail)
            }
        }
    }

    /// How long a waiter blocked by the hold at `kv` waits before it tries again (its watch
    /// wakes it sooner, when the key goes). etcd tells a lease's time left in whole seconds,
    /// cut down, and revokes a lease that ran out within half a second: told none left, a
    /// waiter would try again a round trip after another until the key goes.
    /// A hold of this backend is over at its deadline, and the waiter's next step deletes it:
    /// that wait is not lengthened.
    pub(crate) fn wait_for(&self, kv: &Kv) -> Result<Option<Duration>, LockError> {
        if let Some(left) = self.own_remaining(kv) {
            return Ok(Some(left));
        }
        Ok(self
            .leases
            .remaining(kv.lease)?
            .map(|left| left.max(RETRY_AFTER_A_LAST_SECOND)))
    }

    /// How long `request`, refused by the hold at `kv`, waits before it tries again: as
    /// [`wait_for`](Self::wait_for) says; but a read-write waiter that will wait tries again
    /// within half its slot whatever the hold's lease (its mark lives a slot), and its watch
    /// wakes it when the key goes, so etcd is not asked the lease's time left for it (a round
    /// trip on its way to waiting): `None`.
    fn hint_for(
        &self,
        request: &AcquireRequest<'_>,
        kv: &Kv,
    ) -> Result<Option<Duration>, LockError> {
        let read_write = matches!(request.lock.kind, LockKind::Read | LockKind::Write);
        match self.own_remaining(kv) {
            Some(left) => Ok(Some(left)),
            None if read_write && request.will_wait => Ok(None),
            None => self.wait_for(kv),
        }
    }

    /// How long the hold at `kv` lasts: to its deadline, for a hold of this backend; else as
    /// etcd tells its lease.
    pub(crate) fn remaining_of(&self, kv: &Kv) -> Result<Option<Duration>, LockError> {
        match self.own_remaining(kv) {
            Some(left) => Ok(Some(left)),
            None => self.leases.remaining(kv.lease),
        }
    }

    /// How long the hold at `kv` lasts, if it is one of this backend's as it last wrote it.
    fn own_remaining(&self, kv: &Kv) -> Option<Duration> {
        let (_, record) = self.holds.holder_of_key(&kv.key)?;
        record
            .written
            .is_some_and(|written| kv.mod_revision <= written)
            .then(|| record.deadline.saturating_duration_since(Instant::now()))
    }

    pub(crate) fn granted(&self, kind: LockKind, revision: i64) -> Acquire {
        if Self::fenced(kind) {
            Acquire::Acquired(Grant::PLAIN.with_fencing_token(revision.unsigned_abs()))
        } else {
            Acquire::ACQUIRED
        }
    }

    /// A read hold: taken while no live key of the name is outside the readers' folder, except
    /// the caller's own write hold (a writer may read).
    fn take_read(
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

    /// Extends a hold the client has (a re-entry with a longer lease, or onto the watchdog):
    /// only if the store still has it (its key with its id), never shortening its lease. A hold
    /// that is over, or not on the store, is gone: nothing is made again.
    pub(crate) fn extend(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        if lock.kind == LockKind::Latch {
            // A latch holds nothing to extend.
            return Ok(Acquire::Gone {
                reason: LossReason::Gone,
            });
        }
        let keys = self.keys(lock.name);
        let id = hold_id(lock, request.owner);
        let over = self.over(lock.name)?;
        if over.find(lock, request.owner).is_some() {
            return Ok(Acquire::Gone {
                reason: LossReason::Expired,
            });
        }
        let remembered = self.holds.lookup(&id);
        // The revision that made the hold (its fencing token), even when a write of it since
        // had an unknown outcome.
        let remembered_made_at = remembered.as_ref().and_then(|r| r.made_at);
        let record = remembered.filter(|r| r.written.is_some());
        let key = match &record {
            Some(record) => record.key.clone(),
            None => self.hold_key(lock, request.owner)?,
        };
        let now = Instant::now();
        // As long as asked, and no shorter than its holder already counts on it.
        let needed = record
            .as_ref()
            .map_or(now, |r| r.deadline)
            .max(now + request.lease);
        let current = record.as_ref().map(|record| {
            record
                .session
                .as_ref()
                .and_then(|s| self.leases.current_session(s))
                .filter(|s| s.id == record.lease.id)
                .unwrap_or(record.lease)
        });
        // The lease it stays on, or the one it moves to (a new lease of its own if the one it
        // would go on ends too soon).
        let (target, session, fresh) = match current {
            Some(current) if current.ends_after >= needed => (
                current,
                record.as_ref().and_then(|r| r.session.clone()),
                false,
            ),
            _ => {
                let (target, session) = self.leases.lease_for(request.owner, request.lease)?;
                if target.ends_after >= needed {
                    (target, session, true)
                } else {
                    self.drop_own(target, session.as_ref());
                    let lasting = needed.saturating_duration_since(now);
                    (self.leases.grant(whole_seconds(lasting))?, None, true)
                }
            }
        };
        let mut compare = vec![Self::mine(lock, request.owner, &key)];
        let rewrite = fresh || session.is_none();
        if let Some(written) = record.as_ref().and_then(|r| r.written).filter(|_| rewrite) {
            // As this backend last wrote it: a copy of this extend that lands after the backend
            // concluded it did not (and wrote the key again) changes nothing.
            compare.push(modified_at(&key, written));
        }
        match self.gated(&mut compare, target, session.as_ref()) {
            // A session etcd no longer has keeps no key, and takes none.
            Ok(()) | Err(Fail::LeaseNotFound) => {}
            Err(fail) => {
                if fresh {
                    self.drop_own(target, session.as_ref());
                }
                return Err(fail.into());
            }
        }
        let mut success = over.deletes(&[&key]);
        // What the key was before (a hold the backend does not know: made by a step whose
        // answer was lost, its fencing token the revision that wrote it).
        success.push(range(&Span::key(&key)));
        // Written even when it stays on a lease of its own: should the answer be lost, the
        // key's revision tells whether the extend landed. A hold that stays on its session
        // (a fair waiter's claim) is only read: the watchdog keeps it, and a lost answer
        // leaves it counted on as it was.
        if rewrite {
            success.push(rebind(&key, target.id));
        }
        let mut failure = over.deletes(&[]);
        failure.push(range(&Span::key(&keys.ended(request.owner.as_str()))));
        let answer = match self.write(compare, success, failure) {
            Ok(answer) => answer,
            Err(fail) => {
                if fresh && !unknown(&fail) {
                    self.drop_own(target, session.as_ref());
                }
                // Extended or not: the key is asked about when next met, and until the store
                // shows the extend landed the hold counts as it was (its caller learns that it
                // may not have grown). One that stays on its session wrote nothing: it counts
                // as it was.
                if let Some(mut record) = record.filter(|_| rewrite && unknown(&fail)) {
                    record.pending_move = Some(PendingMove {
                        from: record.written.unwrap_or_default(),
                        lease: target,
                        session: session.clone(),
                        deadline: record.deadline.max(now + request.lease),
                    });
                    record.written = None;
                    self.holds.record(id, record);
                }
                return Err(fail.into());
            }
        };
        over.done(self);
        if !answer.succeeded {
            if fresh {
                self.drop_own(target, session.as_ref());
            }
            if let Some(record) = &record {
                self.holds.forget_if(&id, record);
            }
            let tombstoned = answer
                .responses
                .len()
                .checked_sub(1)
                .is_some_and(|last| answer.kvs(last).is_ok_and(|kvs| !kvs.is_empty()));
            return Ok(Acquire::Gone {
                reason: if tombstoned {
                    LossReason::ForceUnlocked
                } else {
                    self.loss(&keys, request.owner)
                },
            });
        }
        let before = answer.kvs(answer.responses.len() - 1 - usize::from(rewrite))?;
        let made_at = match (&record, before.first()) {
            (Some(record), _) => record.made_at,
            (None, _) if remembered_made_at.is_some() => remembered_made_at,
            // A key of the hold's own was made by it.
            (None, Some(kv)) if !shares_key(lock.kind) => Some(kv.create_revision),
            (None, Some(kv)) => Some(kv.mod_revision),
            (None, None) => None,
        }
        .unwrap_or(answer.revision);
        let deadline = record
            .as_ref()
            .map_or(now, |r| r.deadline)
            .max(now + request.lease);
        if fresh {
            if let Some(old) = record.as_ref().filter(|old| old.session.is_none()) {
                if old.lease.id != target.id {
                    self.leases.revoke(old.lease.id);
                }
            }
        }
        self.holds.record(
            id,
            crate::holds::HoldRecord {
                key,
                made_at: Some(made_at),
                written: Some(if rewrite {
                    answer.revision
                } else {
                    record
                        .as_ref()
                        .and_then(|r| r.written)
                        .unwrap_or(answer.revision)
                }),
                lease: target,
                session,
                deadline,
                pending_move: None,
            },
        );
        Ok(self.granted(lock.kind, made_at))
    }
}

pub(crate) fn busy(name: &str) -> LockError {
    LockError::unavailable(
        format!("{name:?} kept changing under the step; try again"),
        std::io::Error::other("conflicting changes"),
    )
}

/// What a try's transaction came to.
enum Tried {
    /// Granted: the transaction's answer.
    Granted(TxnAnswer),
    /// Refused: the answers of the reads that say why, in the order they were asked, and
    /// whether the refusal's writes (a nested transaction) were made.
    Refused(TxnAnswer, bool),
}
