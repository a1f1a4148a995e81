//! A fair waiter's place in the name's queue: put by its refused attempt (or in its first
//! try's own transaction, on a name this backend waited on a moment ago), kept by each later
//! attempt, and deleted when its waiter gives up; and what this backend remembers of each
//! place it wrote.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;

use dlock_core::backend::{AcquireRequest, LockRef, OwnerId};
use dlock_core::LockError;

use crate::backend::{unknown, Inner};
use crate::keys::NameKeys;
use crate::place_lease::PlaceId;
use crate::steps::over::Over;
use crate::wire::{
    delete, empty, first_created, modified_before, nested, put, value_is, Json, Kv, Span, TxnAnswer,
};

impl Inner {
    /// A refused attempt: the waiter's place `key` kept for its queue slot, or made if it will
    /// wait, and the over holds under the name deleted, with the first live key under the
    /// name read after; [`Kept::Changed`] if something `compare` checks changed.
    pub(super) fn keep_place(
        &self,
        request: &AcquireRequest<'_>,
        over: &Over,
        key: &[u8],
        compare: Vec<Json>,
        turn: Option<i64>,
    ) -> Result<Kept, LockError> {
        if turn.is_none() && !request.will_wait {
            return Ok(Kept::Kept(None));
        }
        let keys = self.keys(request.lock.name);
        // Wanted for its slot: the waiter is back before it ends (see `place_lease`).
        let slot = Places::slot(request.waiter, &keys);
        let kept = self.place_lease.lease_for(
            slot.clone(),
            key,
            request.queue_slot.max(Duration::from_secs(1)),
        )?;
        // A put keeps the place's create revision, its turn.
        let mut success = over.deletes(&[key]);
        success.push(put(key, b"", kept.id));
        let first_at = success.len();
        success.push(first_created(&keys.all(), over.room()));
        let answer = self.write(compare, success, Vec::new());
        let place = |written, behind| Place {
            key: key.to_vec(),
            written,
            behind,
        };
        match answer {
            Ok(answer) if answer.succeeded => {
                over.done(self);
                // A new place is created by this write: its turn is the write's revision.
                let turn = turn.unwrap_or(answer.revision);
                self.place_lease.written(&slot, answer.revision);
                let first = over.live(answer.kvs(first_at)?).into_iter().next();
                let behind = first.as_ref().is_some_and(|first| first.key != key);
                self.places.note(
                    request.waiter,
                    &keys,
                    place(Some((turn, answer.revision)), behind),
                );
                Ok(Kept::Kept(first))
            }
            Ok(_) => Ok(Kept::Changed),
            Err(fail) => {
                // It may be there: no hint for a take in one call.
                self.places.note(request.waiter, &keys, place(None, false));
                if unknown(&fail) {
                    self.place_lease.write_unknown(kept.id);
                }
                Err(fail.into())
            }
        }
    }

    /// The place a waiter's first try puts in its own transaction should it be refused, as
    /// etcd's `Mutex` contender puts its key in the call that finds the lock held: one call
    /// where the refusal and the place were two. Only on a name this backend waited on within
    /// the last second (most tries there are refused, and etcd parses every branch it is
    /// sent), for a waiter that will wait with no place yet, no over hold under the name and
    /// no hold of this backend at its keys, and while the places' lease is kept (no lease is
    /// granted for a try that may take the lock).
    pub(super) fn placing(
        &self,
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
        over: &Over,
    ) -> Result<Option<Placing>, LockError> {
        if !request.will_wait
            || request.reentry
            || over.len() > 0
            || !self.watches.watched(&keys.prefix)
            || self.places.of(request.waiter, keys).is_some()
        {
            return Ok(None);
        }
        let places = keys.places(request.waiter);
        if places
            .iter()
            .any(|key| self.holds.holder_of_key(key).is_some())
        {
            return Ok(None);
        }
        let slot = Places::slot(request.waiter, keys);
        let wanted = request.queue_slot.max(Duration::from_secs(1));
        let Some(lease) = self
            .place_lease
            .kept_lease_for(slot.clone(), &places[0], wanted)?
        else {
            return Ok(None);
        };
        let tombstone = keys.ended(request.owner.as_str());
        let op = nested(
            vec![
                empty(&Span::key(&tombstone)),
                empty(&Span::key(&places[0])),
                empty(&Span::key(&places[1])),
            ],
            vec![
                put(&places[0], b"", lease.id),
                first_created(&keys.all(), over.room()),
            ],
            Vec::new(),
        );
        let [key, _] = places;
        Ok(Some(Placing {
            key,
            slot,
            lease: lease.id,
            op,
        }))
    }

    /// The first key under the name once `placing`'s place was put, if the refused try's answer
    /// `refused` (its failure branch's operation `at`) says it was; else the place is not
    /// wanted.
    pub(super) fn placed_with(
        &self,
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
        placing: &Placing,
        refused: &TxnAnswer,
        at: usize,
    ) -> Result<Option<Kv>, LockError> {
        let placed = refused.nested(at).and_then(|placed| {
            let first = placed.kvs(1)?.into_iter().next();
            Ok((placed.succeeded, first))
        });
        let first = match placed {
            Ok((true, first)) => first,
            Ok((false, _)) => {
                self.place_lease.release(&placing.slot);
                return Ok(None);
            }
            Err(error) => {
                // An answer not understood: the place may be there.
                self.places.note(request.waiter, keys, placing.unknown());
                return Err(error);
            }
        };
        // A new key: its turn is the write's revision.
        let revision = refused.revision;
        self.place_lease.written(&placing.slot, revision);
        let behind = first.as_ref().is_some_and(|first| first.key != placing.key);
        let place = Place {
            key: placing.key.clone(),
            written: Some((revision, revision)),
            behind,
        };
        self.places.note(request.waiter, keys, place);
        Ok(first)
    }

    /// A fair waiter gives up: its place goes, if it is still one (a hold it was granted stays
    /// granted: the client then finds it held by that hold and releases it). A read-write
    /// lock's waiter gives up: its mark goes (a writer's wakes the readers it held off: they
    /// watch the writers' marks).
    pub(crate) fn cancel_wait(&self, lock: LockRef<'_>, waiter: &OwnerId) -> Result<(), LockError> {
        let keys = self.keys(lock.name);
        let mut place = None;
        let deletes = match lock.kind {
            dlock_core::LockKind::Fair => {
                self.places.forget_all(waiter, &keys);
                place = Some(Places::slot(waiter, &keys));
                // Written no later than the newest revision this backend has seen: a copy of
                // this give-up that lands late deletes no place written after it was sent (a
                // later wait's, which its turn may have made a hold). Nor a place this
                // backend holds as its waiter's turn.
                let latest = self.revisions.latest();
                keys.places(waiter)
                    .iter()
                    .filter(|key| !self.is_turn_hold(key))
                    .map(|key| {
                        let mut place = vec![value_is(key, b"")];
                        if let Some(latest) = latest {
                            place.push(modified_before(&Span::key(key), latest + 1));
                        }
                        nested(place, vec![delete(&Span::key(key))], Vec::new())
                    })
                    .collect()
            }
            dlock_core::LockKind::Write
            | dlock_core::LockKind::Reentrant
            | dlock_core::LockKind::Fenced => {
                let Some((_, mark)) = keys.turn_marks(lock.kind, waiter) else {
                    return Ok(());
                };
                self.turns.forget(&mark);
                vec![delete(&Span::key(&mark))]
            }
            dlock_core::LockKind::Read => {
                let mark = keys.reader_mark(waiter);
                self.reader_marks.forget(&mark);
                vec![delete(&Span::key(&mark))]
            }
            _ => return Ok(()),
        };
        let written = self.write(Vec::new(), deletes, Vec::new());
        if let Some(place) = place {
            match &written {
                Ok(_) => self.place_lease.release(&place),
                // The place may still be there: its lease is let run out.
                Err(_) => self.place_lease.abandon(&place),
            }
        }
        written?;
        Ok(())
    }
}

/// What keeping a refused waiter's place found.
pub(super) enum Kept {
    /// Something the attempt compares changed: it reads the name again.
    Changed,
    /// Kept (or none was wanted), with the first live key under the name after, if read.
    Kept(Option<Kv>),
}

/// A waiter's place put in its first try's failure branch (see `Inner::placing`).
pub(super) struct Placing {
    /// The place's key: the one the try makes the hold if it takes the lock.
    pub(super) key: Vec<u8>,
    pub(super) slot: PlaceId,
    /// The places' lease the put is on.
    pub(super) lease: i64,
    /// The put, in a nested transaction: if neither of the waiter's keys nor its hold's
    /// tombstone is there, the place on the places' lease, and the first key under the name
    /// read after.
    pub(super) op: Json,
}

impl Placing {
    /// The place as a write of unknown outcome left it.
    pub(super) fn unknown(&self) -> Place {
        Place {
            key: self.key.clone(),
            written: None,
            behind: false,
        }
    }
}

/// A fair waiter's place as this backend last wrote it.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    /// The place's key (its hold's key once taken).
    pub(crate) key: Vec<u8>,
    /// Its create revision (its turn) and the revision of this backend's last write of it;
    /// `None` if that write's outcome is unknown.
    pub(super) written: Option<(i64, i64)>,
    /// That write's own read found a key created before it first under the name.
    pub(super) behind: bool,
}

/// Each fair waiter's place (by waiter id and name), as this backend last wrote it: for its
/// next attempt to take the lock in one call, its watch to wake it by its turn only, and its
/// give-up to delete it. A wrong one only fails a comparison (the attempt reads the name), or
/// leaves a place to end with its lease.
#[derive(Default)]
pub(crate) struct Places {
    places: Mutex<HashMap<PlaceId, Place>>,
}

impl Places {
    /// The most places remembered; past it the hints start over (a waiter removes its own when
    /// it takes the lock or gives up, so only a leak of the engine's could fill it).
    const MOST: usize = 1 << 16;

    pub(crate) fn slot(waiter: &OwnerId, keys: &NameKeys) -> PlaceId {
        (waiter.as_str().to_owned(), keys.prefix.clone())
    }

    pub(crate) fn of(&self, waiter: &OwnerId, keys: &NameKeys) -> Option<Place> {
        self.places.lock().get(&Self::slot(waiter, keys)).cloned()
    }

    pub(super) fn note(&self, waiter: &OwnerId, keys: &NameKeys, place: Place) {
        let mut places = self.places.lock();
        if places.len() >= Self::MOST {
            places.clear();
        }
        places.insert(Self::slot(waiter, keys), place);
    }

    /// Forgets the waiter's place `key` (taken: it is a hold now).
    pub(super) fn forget(&self, waiter: &OwnerId, keys: &NameKeys, key: &[u8]) {
        let slot = Self::slot(waiter, keys);
        let mut places = self.places.lock();
        if places.get(&slot).is_some_and(|place| place.key == key) {
            places.remove(&slot);
        }
    }

    /// Forgets the waiter's place under `keys`' name.
    pub(super) fn forget_all(&self, waiter: &OwnerId, keys: &NameKeys) {
        self.places.lock().remove(&Self::slot(waiter, keys));
    }
}
