//! Waiters in turn: the plain lock's and a read-write lock's writers. A waiter refused marks
//! itself under `dlock-waiting:<N>:<waiter id>` (a writer under `dlock-writers:<N>:`; outside
//! the name's keys: a wait is not a use of the name, and `etcdctl lock` never sees it), on the
//! marks' short lease, and a free lock goes to the waiter of its kind whose mark was created
//! first. A try compares that no mark is older than its own (by create revision) or, with no
//! mark of its own, that no mark is there at all.
//!
//! A waiter learns its mark's create revision when a refusal reads its mark first among the
//! name's: this backend remembers it by the mark's key until the waiter takes the lock or
//! gives up.
//!
//! A release wakes every waiter, and only the first marked may take the lock: the others'
//! tries are refused. So a waiter whose mark lasts long enough asks the name's watches first,
//! and is refused with no call while they show the lock held (for a writer, by a reader too)
//! or an older mark of its kind (see [`Inner::turn_refused_seen`]); it still writes its mark
//! in a try of its own well within the mark's life.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dlock_core::backend::{Acquire, AcquireRequest};
use dlock_core::LockError;
use parking_lot::Mutex;

use crate::backend::Inner;
use crate::keys::Family;
use crate::watch::TurnSeen;
use crate::wire::{created_after, created_at, delete, empty, Json, Span, TxnAnswer};

/// At most this many marks are remembered; past them, all are forgotten, and each waiter learns
/// its own again at its next refusal (a try more).
const LIMIT: usize = 65_536;

/// How long a waiter refused unsure ([`TurnSeen::Unsure`]) waits for the news that settles it
/// before it looks again (and tries, if it is still unsure). The hold it waits to see is
/// written in the step that deleted the mark, so the name's stream shows it within a moment of
/// the marks' stream, unless etcd delivers that stream late (up to its 100 ms sync round):
/// then the store is asked.
const UNSURE_FOR: Duration = Duration::from_millis(10);

/// What this backend knows of its plain waiters' marks.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    /// The create revision of each mark seen first among its name's.
    first: Mutex<HashMap<Vec<u8>, i64>>,
    /// Until when each mark lasts at least: the end of the lease it was last written on.
    lasts: Mutex<HashMap<Vec<u8>, Instant>>,
    /// Each waiter's last look at its name's watches: the deletions they had heard, and
    /// whether it was refused unsure ([`TurnSeen::Unsure`]).
    looks: Mutex<HashMap<Vec<u8>, Look>>,
}

/// A waiter's look at its name's watches.
#[derive(Debug, Clone, Copy)]
struct Look {
    heard: Option<u64>,
    refused_unsure: bool,
}

/// Keeps `key` at `value` in `map`, which is cleared first when full.
fn keep<V>(map: &Mutex<HashMap<Vec<u8>, V>>, key: &[u8], value: V) {
    let mut map = map.lock();
    if map.len() >= LIMIT && !map.contains_key(key) {
        map.clear();
    }
    map.insert(key.to_vec(), value);
}

impl Turns {
    /// The mark at `mark` was read first among its name's, created at `revision`.
    pub(crate) fn first(&self, mark: &[u8], revision: i64) {
        keep(&self.first, mark, revision);
    }

    /// The mark at `mark` is not first.
    pub(crate) fn not_first(&self, mark: &[u8]) {
        self.first.lock().remove(mark);
    }

    /// The mark at `mark` was written on a lease that lasts until `until` at least.
    pub(crate) fn written(&self, mark: &[u8], until: Instant) {
        keep(&self.lasts, mark, until);
    }

    /// Whether no mark is known to last (a waiter's first try, or nobody waits).
    fn none_lasts(&self) -> bool {
        self.lasts.lock().is_empty()
    }

    /// Whether the mark at `mark` lasts `left` more at least.
    fn lasts(&self, mark: &[u8], left: Duration) -> bool {
        self.lasts
            .lock()
            .get(mark)
            .is_some_and(|until| until.saturating_duration_since(Instant::now()) >= left)
    }

    /// The waiter whose mark is `mark` looks at its name's watches, which have heard `heard`
    /// deletions; its last look.
    fn look(&self, mark: &[u8], look: Look) -> Option<Look> {
        let mut looks = self.looks.lock();
        if looks.len() >= LIMIT && !looks.contains_key(mark) {
            looks.clear();
        }
        looks.insert(mark.to_vec(), look)
    }

    /// The mark at `mark` went: its waiter took the lock or gave up.
    pub(crate) fn forget(&self, mark: &[u8]) {
        self.first.lock().remove(mark);
        self.lasts.lock().remove(mark);
        self.looks.lock().remove(mark);
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
    /// What a refused try of a waiter in turn (`answer`, whose read at `read` is the first
    /// mark of the waiters of its kind) says of its turn, the waiter's mark being `mark`: its
    /// mark is first (remembered), or it has just put the only one, in this refusal's own step
    /// after the reads (`made`): its revision is the step's; or it is not first (forgotten).
    pub(crate) fn note_turn(
        &self,
        mark: &[u8],
        answer: &TxnAnswer,
        read: usize,
        made: bool,
    ) -> Result<(), LockError> {
        match answer.kvs(read)?.into_iter().next() {
            Some(first) if first.key == mark => self.turns.first(mark, first.create_revision),
            None if made => self.turns.first(mark, answer.revision),
            _ => self.turns.not_first(mark),
        }
        Ok(())
    }

    /// A plain lock's or a writer's try refused with no call, if its waiter's mark lasts three
    /// quarters of a slot more (the waiter tries again within half a slot, so a try of its own writes the
    /// mark again at least a quarter of a slot before its end) and the name's watches, in step with the store, show
    /// the try refused: the lock held by another, or free with an older mark; or a waiter
    /// woken by a mark going, first now, while the name's keys are older than that (see
    /// [`TurnSeen::Unsure`]): the waiter that took the lock deleted it, as a rule, and the
    /// turn is not this one's until that hold's release. Such a refusal lasts [`UNSURE_FOR`]
    /// at most: a name's stream that lags its marks' (etcd delivers it late) does not keep
    /// the waiter whose turn it is from the free lock. Where they show the lock free and the
    /// mark first, its create revision is remembered for the try: a waiter that never read
    /// its mark first would otherwise be refused once more to learn it. Not on a name this
    /// backend has a hold of. (A writer's view leaves out the readers that waited behind the
    /// last writer's hold, which it does not watch: where it shows the writer first, the try
    /// is made, and refused by their marks if they are there.)
    pub(crate) fn turn_refused_seen(&self, request: &AcquireRequest<'_>) -> Option<Acquire> {
        let lock = request.lock;
        let slot = request.queue_slot;
        if !request.will_wait || request.reentry || slot.is_zero() || self.turns.none_lasts() {
            return None;
        }
        let keys = self.keys(lock.name);
        let (marks, own_mark) = keys.turn_marks(lock.kind, request.waiter)?;
        let family = Family::of(lock.kind)?;
        if !self.turns.lasts(&own_mark, slot - slot / 4)
            || !self.holds.of_name(lock.name).is_empty()
        {
            return None;
        }
        let own_hold = keys.hold(lock, request.owner);
        let marks = marks.key;
        let heard = self
            .watches
            .heard(|| vec![marks.clone(), keys.prefix.clone()]);
        let seen = self.watches.turn_try_seen(
            &keys.prefix,
            &keys.holds_of(family),
            &own_hold,
            &marks,
            &own_mark,
        );
        // Unsure, a waiter woken by news (a mark went) waits a moment for the hold that may
        // come: its release wakes it, and if none comes (the mark's waiter gave up or died,
        // or the name's stream lags), the next look, with no news or right after such a
        // refusal, is a try.
        let last = self.turns.look(
            &own_mark,
            Look {
                heard,
                refused_unsure: false,
            },
        );
        let news = heard.is_some() && last.is_some_and(|last| last.heard != heard);
        let wait_unsure = news && !last.is_some_and(|last| last.refused_unsure);
        match seen? {
            TurnSeen::Refused => Some(Acquire::Held {
                remaining_lease: None,
            }),
            TurnSeen::Unsure if wait_unsure => {
                let look = Look {
                    heard,
                    refused_unsure: true,
                };
                self.turns.look(&own_mark, look);
                Some(Acquire::Held {
                    remaining_lease: Some(UNSURE_FOR),
                })
            }
            TurnSeen::Unsure => None,
            TurnSeen::First { created } => {
                self.turns.first(&own_mark, created);
                None
            }
        }
    }
}
