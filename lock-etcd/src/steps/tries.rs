//! A lock's try and what its refusal leaves: the reads a refusal needs (in the try's own
//! transaction, or in a second call after a lean first try), and a read-write waiter's mark,
//! put in the refused transaction itself where the backend keeps a lease for marks.

use dlock_core::backend::AcquireRequest;

use crate::backend::Inner;
use crate::keys::{Family, NameKeys};
use crate::leases::{Granted, SessionKey};
use crate::steps::over::Over;
use crate::transport::Fail;
use crate::wire::{empty, exists, nested, put, value_is, Json, Span, TxnAnswer};
use dlock_core::LockKind;

impl Inner {
    /// Whether `request`'s first transaction goes without the reads a refusal needs: a first
    /// try that would wait anyway, on a name this backend has not waited on within the last
    /// second (most such tries are granted, and etcd parses every branch it is sent; on a
    /// contended name most are refused, and a refusal without its reads costs a second call).
    /// A single try keeps them: its refusal is its answer.
    pub(super) fn lean_first_try(&self, request: &AcquireRequest<'_>, keys: &NameKeys) -> bool {
        request.first_try
            && request.will_wait
            && !self.watches.watched(&keys.watch_of(request.lock.kind))
    }

    /// Sends a try through `send`, given the failure branch to put in its transaction: the
    /// reads `failure`, then `marking` (what a refusal writes: a waiter's mark, as a nested
    /// transaction, and the marks' lease it is on); or, once, while `lean`, the mark alone, and
    /// `failure` read in a second call if it was refused. That answer is as of the read, as
    /// true as one read with the refusal (the name may have changed between: then the caller
    /// tries again). A marks' lease etcd no longer has is forgotten.
    pub(super) fn try_with(
        &self,
        lean: &mut bool,
        failure: Vec<Json>,
        marking: Option<(Json, Granted)>,
        send: impl FnOnce(Vec<Json>) -> Result<TxnAnswer, Fail>,
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
    pub(super) fn try_writing(
        &self,
        lean: &mut bool,
        failure: Vec<Json>,
        writes: Vec<Json>,
        send: impl FnOnce(Vec<Json>) -> Result<TxnAnswer, Fail>,
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
    pub(super) fn mark_waits(
        &self,
        lease: Granted,
        session: Option<&SessionKey>,
        tombstone: &[u8],
    ) -> Result<Vec<Json>, Fail> {
        let mut waits = Vec::new();
        self.gated(&mut waits, lease, session)?;
        waits.push(empty(&Span::key(tombstone)));
        Ok(waits)
    }

    /// Whether the nested transaction answered at `at` took its success branch.
    pub(super) fn made(answer: &TxnAnswer, at: usize) -> Result<bool, Fail> {
        Ok(answer.nested(at).map_err(Fail::Lock)?.succeeded)
    }

    /// The failure branch's write that marks a writer, or a plain lock's waiter, that will
    /// wait, `mark` on the marks' lease, where `waits` holds (the session's gate passed, no
    /// tombstone of the hold) and no other kind uses the name (no key outside its kind's
    /// folder, but `over`'s): a refusal that is a wait, not an end. A waiter refused by holds,
    /// or by marks, is so marked in the refusal's own step; one refused by its own hold at
    /// `key` (asked again after an answer that was lost) is not: it is extended, not waiting,
    /// and a mark put in the refusal stayed when the reply was lost before the extend removed
    /// it.
    pub(super) fn waiter_mark(
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
        key: &[u8],
        over: &Over,
        mut waits: Vec<Json>,
        mark: &[u8],
        mark_lease: &Granted,
    ) -> Json {
        let family = Family::of(request.lock.kind).unwrap_or(Family::ReadWrite);
        for span in keys.others(family) {
            waits.extend(over.empty(&span));
        }
        let waiter = request.waiter.as_str().as_bytes();
        // The hold's value, as its try puts it.
        let hold = request.value.unwrap_or(request.owner.as_str()).as_bytes();
        // etcd compares no value of an absent key as unequal: "its own hold" is the success
        // branch, the mark the failure's.
        let unless_own = nested(
            vec![value_is(key, hold)],
            Vec::new(),
            vec![put(mark, waiter, mark_lease.id)],
        );
        nested(waits, vec![unless_own], Vec::new())
    }

    /// The failure branch's write that marks a reader that will wait behind a writer's hold,
    /// `mark` on the marks' lease, where `waits` holds (the session's gate passed, no
    /// tombstone of the hold), a key of a writer is under the name and none of another kind:
    /// the reader is so marked in the refusal's own step. `None` where the name has an over
    /// hold of this client's among the writers (a key that is no writer's hold any more: the
    /// reader is marked after its refusal if a writer's hold is there).
    pub(super) fn reader_mark(
        keys: &NameKeys,
        over: &Over,
        mut waits: Vec<Json>,
        request: &AcquireRequest<'_>,
        mark: &[u8],
        mark_lease: &Granted,
    ) -> Option<Json> {
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
    pub(super) fn mark_waiter(
        &self,
        request: &AcquireRequest<'_>,
        mark: Vec<u8>,
    ) -> Result<(), Fail> {
        let lease = self.leases.mark_lease(request.queue_slot)?;
        let waiter = request.waiter.as_str().as_bytes();
        self.write(Vec::new(), vec![put(&mark, waiter, lease.id)], Vec::new())
            .inspect_err(|fail| {
                if matches!(fail, Fail::LeaseNotFound) {
                    self.leases.forget_mark_lease(lease.id);
                }
            })?;
        if matches!(
            request.lock.kind,
            LockKind::Reentrant | LockKind::Fenced | LockKind::Write
        ) {
            self.turns.written(&mark, lease.ends_after);
        }
        Ok(())
    }
}

/// What a try's transaction came to.
pub(super) enum Tried {
    /// Granted: the transaction's answer.
    Granted(TxnAnswer),
    /// Refused: the answers of the reads that say why, in the order they were asked, and
    /// whether the refusal's writes (a nested transaction) were made.
    Refused(TxnAnswer, bool),
}
