//! The plain lock's waiters in turn: a waiter refused marks itself under
//! `dlock-waiting:<N>:<waiter id>` (outside the name's keys: a wait is not a use of the name,
//! and `etcdctl lock` never sees it), on the marks' short lease, and a free lock goes to the
//! waiter whose mark was created first. A try compares that no mark is older than its own (by
//! create revision) or, with no mark of its own, that no mark is there at all.
//!
//! A waiter learns its mark's create revision when a refusal reads its mark first among the
//! name's: this backend remembers it by the mark's key until the waiter takes the lock or
//! gives up.

use std::collections::HashMap;

use dlock_core::backend::AcquireRequest;
use dlock_core::LockError;
use parking_lot::Mutex;

use crate::backend::Inner;
use crate::keys::NameKeys;
use crate::wire::{created_after, created_at, delete, empty, Json, Span, TxnAnswer};

/// At most this many marks are remembered; past them, all are forgotten, and each waiter learns
/// its own again at its next refusal (a try more).
const LIMIT: usize = 65_536;

/// The create revision of each plain waiter's mark this backend saw first among its name's.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    first: Mutex<HashMap<Vec<u8>, i64>>,
}

impl Turns {
    /// The mark at `mark` was read first among its name's, created at `revision`.
    pub(crate) fn first(&self, mark: &[u8], revision: i64) {
        let mut first = self.first.lock();
        if first.len() >= LIMIT && !first.contains_key(mark) {
            first.clear();
        }
        first.insert(mark.to_vec(), revision);
    }

    /// The mark at `mark` went (its waiter took the lock or gave up), or is not first.
    pub(crate) fn forget(&self, mark: &[u8]) {
        self.first.lock().remove(mark);
    }

    /// The create revision of the mark at `mark`, if it was seen first.
    pub(crate) fn of(&self, mark: &[u8]) -> Option<i64> {
        self.first.lock().get(mark).copied()
    }

    /// The comparisons of a take by the waiter whose mark is `mark` (among `marks`): the mark
    /// there as first seen and none older; or, if it was never seen first, no mark at all.
    pub(crate) fn compares(&self, marks: &Span, mark: &[u8]) -> Vec<Json> {
        match self.of(mark) {
            Some(revision) => vec![
                created_at(&Span::key(mark), revision),
                created_after(marks, revision - 1),
            ],
            None => vec![empty(marks)],
        }
    }

    /// What a take that succeeds writes besides its hold: its waiter's mark goes.
    pub(crate) fn unmark(&self, mark: &[u8]) -> Option<Json> {
        self.of(mark).map(|_| delete(&Span::key(mark)))
    }
}

impl Inner {
    /// What a plain lock's refused try (`answer`, whose read at 2 is the name's first mark)
    /// says of its waiter's turn: its mark is first (remembered), or it has just put the only
    /// one, in this refusal's own step after the reads (`made`): its revision is the step's; or
    /// it is not first (forgotten).
    pub(crate) fn note_turn(
        &self,
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
        answer: &TxnAnswer,
        made: bool,
    ) -> Result<(), LockError> {
        let mark = keys.lock_waiter(request.waiter);
        match answer.kvs(2)?.into_iter().next() {
            Some(first) if first.key == mark => self.turns.first(&mark, first.create_revision),
            None if made => self.turns.first(&mark, answer.revision),
            _ => self.turns.forget(&mark),
        }
        Ok(())
    }
}
