//! Taking a hold: the exclusive kinds' and a read's first acquire, and the extend of a hold the
//! client has. Each is one transaction, which also refuses a hold an operator force-unlocked
//! (its tombstone is there) and deletes the name's holds this backend knows to be over.

use std::time::{Duration, Instant};

use dlock_core::backend::{Acquire, AcquireRequest, Grant, LossReason};
use dlock_core::{LockError, LockKind};

use crate::backend::{unknown, Inner};
use crate::holds::{hold_id, PendingMove};
use crate::keys::{shares_key, NameKeys};
use crate::leases::{whole_seconds, Granted, SessionKey};
use crate::steps::over::Over;
use crate::steps::tries::Tried;
use crate::transport::Fail;
use crate::wire::{
    delete, empty, first_created, modified_at, put, range, rebind, Json, Kv, Span, TxnAnswer,
};

/// How a refused try marked its waiter: the mark put in a call after the refusal (`after`),
/// or whether the refusal's own step put it (`made`).
pub(crate) struct Marking<'a> {
    pub(crate) after: Option<&'a [u8]>,
    pub(crate) made: bool,
}

/// Attempts of a step before it gives up on a name changing under it.
pub(crate) const CONFLICT_RETRIES: usize = 32;

/// The least time a waiter is told a hold has left (see [`Inner::wait_for`]).
const RETRY_AFTER_A_LAST_SECOND: Duration = Duration::from_millis(200);

impl Inner {
    pub(crate) fn acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        Self::family(lock)?;
        // A hold this backend holds live, asked for again (another thread of its guard, say),
        // is extended in one call, as re-entries are: a try first would be refused by the
        // hold's own key and extend in a second call, and should the try's reply be lost, the
        // extend it stood for would never be sent.
        if request.reentry || self.holds_live(request) {
            return self.extend(request);
        }
        match lock.kind {
            LockKind::Read => match self.read_refused_seen(request) {
                Some(refused) => Ok(refused),
                None => self.retry_on_lost_session(request, Self::take_read),
            },
            LockKind::Reentrant | LockKind::Fenced | LockKind::Write => {
                match self.turn_refused_seen(request) {
                    Some(refused) => Ok(refused),
                    None => self.retry_on_lost_session(request, Self::take_exclusive),
                }
            }
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

    /// Whether `request`'s very hold is one this backend made and counts on now, as it last
    /// wrote it (no write of it with an unknown outcome since). A latch holds nothing.
    fn holds_live(&self, request: &AcquireRequest<'_>) -> bool {
        request.lock.kind != LockKind::Latch
            && self
                .holds
                .lookup(&hold_id(request.lock, request.owner))
                .is_some_and(|record| {
                    record.written.is_some()
                        && record.pending_move.is_none()
                        && !record.is_over(Instant::now())
                })
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
        let tombstone = keys.ended(request.owner.as_str());
        // A writer or a plain lock's waiter that will wait marks itself in its refusal's own
        // transaction, on the lease marks share if the backend keeps one (else in a call after
        // the refusal, which keeps one for the next: a lock taken free waits for no lease).
        let mark = match lock.kind {
            LockKind::Write => Some(keys.writer_mark(request.waiter)),
            LockKind::Reentrant | LockKind::Fenced => Some(keys.lock_waiter(request.waiter)),
            _ => None,
        }
        .filter(|_| request.will_wait);
        let mark_lease = mark
            .as_ref()
            .and_then(|_| self.leases.kept_mark_lease(request.queue_slot));
        // The mark a refusal puts in a call of its own.
        let mark_after = mark.as_deref().filter(|_| mark_lease.is_none());
        let mut lean = self.lean_first_try(request, &keys);
        for _ in 0..CONFLICT_RETRIES {
            let over = self.over(lock.name)?;
            let [compare, success, failure] =
                self.exclusive_try(request, &keys, &key, &over, lease);
            let creating = self.holds.creating(&key);
            let marking = match (&mark, mark_lease) {
                (Some(mark), Some(mark_lease)) => {
                    let waits = self.mark_waits(lease, session.as_ref(), &tombstone)?;
                    let write =
                        Self::waiter_mark(request, &keys, &key, &over, waits, mark, &mark_lease);
                    Some((write, mark_lease))
                }
                _ => None,
            };
            let mark_ends = marking.as_ref().map(|(_, lease)| lease.ends_after);
            let tried = self.try_with(&mut lean, failure, marking, |failure| {
                let branches = [compare, success, failure];
                self.make_hold(request, &key, &over, branches, (lease, session.clone()))
            })?;
            let (answer, marked) = match tried {
                Tried::Granted(answer) => {
                    if let Some((_, mark)) = keys.turn_marks(lock.kind, request.waiter) {
                        self.turns.forget(&mark);
                    }
                    return Ok(self.granted(lock.kind, answer.revision));
                }
                Tried::Refused(reads, marked) => (reads, marked),
            };
            if let (Some(mark), Some(ends), true) = (&mark, mark_ends, marked) {
                self.turns.written(mark, ends);
            }
            drop(creating);
            let made = (lease, session.as_ref());
            let marking = Marking {
                after: mark_after,
                made: marked,
            };
            if let Some(found) = self.exclusive_refused(request, &over, &answer, made, marking)? {
                return Ok(found);
            }
        }
        Err(Fail::Lock(busy(lock.name)))
    }

    /// An exclusive kind's try of `request`'s hold at `key` (before the session's gate): its
    /// comparisons, its writes, and the reads that tell why it was refused. `over`: the name's
    /// over holds, which it deletes.
    ///
    /// A plain lock's or a writer's try also compares that no waiter of its kind is marked
    /// before its own (see [`Turns`](crate::turns::Turns)), deletes its waiter's mark if it has
    /// one, and reads the first mark if refused (at [`turn_read`](Self::turn_read)).
    pub(super) fn exclusive_try(
        &self,
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
        key: &[u8],
        over: &Over,
        lease: Granted,
    ) -> [Vec<Json>; 3] {
        let lock = request.lock;
        // An election's key shows its candidate (etcd's `Election`); a lock's, its hold.
        let value = request.value.unwrap_or(request.owner.as_str()).as_bytes();
        let tombstone = keys.ended(request.owner.as_str());
        // A writer waits for the readers that waited behind the last writer.
        let readers_waiting = (lock.kind == LockKind::Write).then(|| keys.reader_marks());
        let mut compare = vec![empty(&Span::key(&tombstone))];
        compare.extend(over.empty(&keys.all()));
        compare.extend(readers_waiting.as_ref().map(empty));
        // The key of an over hold of its own is written over (etcd takes no delete and put
        // of one key in a transaction): the revision of this write is the new hold's.
        let mut success = over.deletes(&[key]);
        success.push(put(key, value, lease.id));
        let mut failure = vec![
            range(&Span::key(&tombstone)),
            first_created(&keys.all(), over.room()),
        ];
        failure.extend(
            readers_waiting
                .as_ref()
                .map(|marks| first_created(marks, 1)),
        );
        if let Some((marks, mark)) = keys.turn_marks(lock.kind, request.waiter) {
            // A writer that waited stops holding readers off once it writes.
            compare.extend(self.turns.compares(&marks, &mark));
            success.extend(self.turns.unmark(&mark));
            failure.push(first_created(&marks, 1));
        }
        [compare, success, failure]
    }

    /// Where an exclusive try of `kind` refused reads the first mark of its waiters in turn
    /// (see [`exclusive_try`](Self::exclusive_try)): after the tombstone, the name's first
    /// key and, for a writer, the first waiting reader's mark.
    pub(crate) fn turn_read(kind: LockKind) -> usize {
        if kind == LockKind::Write {
            3
        } else {
            2
        }
    }

    /// What the reads of an exclusive try refused (`answer`, as [`exclusive_try`] asks them)
    /// say: the hold was force-unlocked; the lock is held (`marking.after`, the waiter's mark,
    /// is then put); the key is `request`'s own hold, which is extended; a free plain lock is
    /// another waiter's turn; or, `None`, only over holds were in the way and changed
    /// meanwhile, or the turn is the waiter's own: the try is to be made again.
    ///
    /// [`exclusive_try`]: Self::exclusive_try
    pub(super) fn exclusive_refused(
        &self,
        request: &AcquireRequest<'_>,
        over: &Over,
        answer: &TxnAnswer,
        (lease, session): (Granted, Option<&SessionKey>),
        marking: Marking<'_>,
    ) -> Result<Option<Acquire>, Fail> {
        let mark_after = marking.after;
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let key = keys.hold(lock, request.owner);
        if !answer.kvs(0)?.is_empty() {
            return Ok(Some(Acquire::Gone {
                reason: LossReason::ForceUnlocked,
            }));
        }
        let first = over.live(answer.kvs(1)?).into_iter().next();
        self.check_kind(lock, &keys, first.as_ref())?;
        let turn_marks = keys.turn_marks(lock.kind, request.waiter);
        if let Some((_, mark)) = &turn_marks {
            self.note_turn(mark, answer, Self::turn_read(lock.kind), marking.made)?;
        }
        match first {
            // Its own key: this very hold (made by an attempt whose answer was lost, or
            // asked again without the flag of a re-entry), extended; or another hold of the
            // same client.
            Some(first) if first.key == key && Self::is_mine(lock, request.owner, &first) => {
                self.drop_own(lease, session);
                self.extend(request).map(Some).map_err(Fail::Lock)
            }
            Some(first) => {
                let held = Acquire::Held {
                    remaining_lease: self.hint_for(request, &first)?,
                };
                if let Some(mark) = mark_after {
                    self.mark_waiter(request, mark.to_vec())?;
                }
                Ok(Some(held))
            }
            None if lock.kind == LockKind::Write && !answer.kvs(2)?.is_empty() => {
                // Free, but the readers that waited behind the last writer go first (their
                // releases wake the writer).
                if let Some(mark) = mark_after {
                    self.mark_waiter(request, mark.to_vec())?;
                }
                Ok(Some(Acquire::Held {
                    remaining_lease: None,
                }))
            }
            None => {
                let Some((_, mark)) = turn_marks else {
                    // Only over keys, changed meanwhile: looked at again.
                    return Ok(None);
                };
                if self.turns.of(&mark).is_some() {
                    // Its own turn (its mark first, or none older): taken on the next try.
                    return Ok(None);
                }
                match answer.kvs(Self::turn_read(lock.kind))?.into_iter().next() {
                    // Free, another waiter's turn: its take, or its mark's end, wakes this one
                    // (the latter by the waiter's own retry, within half its mark's life).
                    Some(_) => {
                        if let Some(mark) = mark_after {
                            self.mark_waiter(request, mark.to_vec())?;
                        }
                        Ok(Some(Acquire::Held {
                            remaining_lease: None,
                        }))
                    }
                    // Only over keys, changed meanwhile: looked at again.
                    None => Ok(None),
                }
            }
        }
    }

    /// Sends the transaction that makes `request`'s hold at `key` (its success branch puts the
    /// key), and remembers the hold it made, counted on until the request's sent-at plus its
    /// lease; or, if its outcome is unknown, the hold it may have made. `over`: the name's over
    /// holds the transaction deletes.
    pub(super) fn make_hold(
        &self,
        request: &AcquireRequest<'_>,
        key: &[u8],
        over: &Over,
        [mut compare, success, failure]: [Vec<Json>; 3],
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
            .remaining_for_waiter(kv.lease)?
            .map(|left| left.max(RETRY_AFTER_A_LAST_SECOND)))
    }

    /// How long `request`, refused by the hold at `kv`, waits before it tries again: as
    /// [`wait_for`](Self::wait_for) says; but a read-write waiter that will wait tries again
    /// within half its slot whatever the hold's lease (its mark lives a slot), and its watch
    /// wakes it when the key goes, so etcd is not asked the lease's time left for it (a round
    /// trip on its way to waiting): `None`.
    pub(super) fn hint_for(
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
        // A hold its waiter's turn made: its place, empty, on the places' lease, which the
        // extend writes with the hold's id onto a lease of the hold's.
        let turn_of = record.as_ref().and_then(|r| r.turn_of.clone());
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
            Some(current) if current.ends_after >= needed && turn_of.is_none() => (
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
        let mut compare = Self::mine_as_recorded(lock, request.owner, &key, record.as_ref());
        let rewrite = fresh || session.is_none();
        let as_written = record
            .as_ref()
            .filter(|r| rewrite && r.turn_of.is_none())
            .and_then(|r| r.written);
        if let Some(written) = as_written {
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
        // A writer's waiting mark is left as it is: a try that finds its own hold puts none
        // (`writer_mark`), and one its waiter put while waiting goes when that waiter takes
        // the lock or gives up, not when another hold is extended.
        let mut success = over.deletes(&[&key]);
        // A reader that waited behind a writer's hold is in: its mark goes, as a new read
        // hold's take deletes it (the next writer no longer waits for that reader).
        let reader_mark = (lock.kind == LockKind::Read).then(|| keys.reader_mark(request.waiter));
        if let Some(mark) = &reader_mark {
            success.push(delete(&Span::key(mark)));
        }
        // What the key was before (a hold the backend does not know: made by a step whose
        // answer was lost, its fencing token the revision that wrote it).
        success.push(range(&Span::key(&key)));
        // Written even when it stays on a lease of its own: should the answer be lost, the
        // key's revision tells whether the extend landed. A hold that stays on its session
        // (a fair waiter's claim) is only read: the watchdog keeps it, and a lost answer
        // leaves it counted on as it was.
        match &turn_of {
            Some(_) => success.push(put(&key, request.owner.as_str().as_bytes(), target.id)),
            None if rewrite => success.push(rebind(&key, target.id)),
            None => {}
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
                        anew: false,
                    });
                    record.written = None;
                    self.holds.record(id, record);
                    self.resolve_now(&[lock.name]);
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
        if let Some(mark) = &reader_mark {
            self.reader_marks.forget(mark);
        }
        if let Some(place) = &turn_of {
            // Written with the hold's id: a hold like any other, no longer a place.
            self.place_lease.let_go(place, &key);
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
            if let Some(old) = record.as_ref().filter(|old| old.owns_lease()) {
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
                turn_of: None,
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
