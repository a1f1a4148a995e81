//! The fair lock: etcd's `Mutex` queue, in the name's `queue/` folder.
//!
//! Each waiter has a key `queue/<waiter id>`, its place, made when it first waits
//! (empty, bound to a lease that keeps it for the waiter's queue slot) and kept by each attempt
//! of the waiter, which comes back at least every half slot; its create revision is its turn.
//! As in etcd's `concurrency.Mutex`, the key under the name created first holds: the waiter
//! whose place is first takes the lock in one transaction that writes its hold id into the
//! place and binds it to the hold's lease (a put keeps the create revision, so the turn is
//! kept), if nothing under the name is older. A taker of a free name with no place puts its
//! key as the hold at once. `etcdctl lock` and Go `Mutex` contenders of the name are keys under
//! it too: they queue with dlock's waiters, each served in the order its key was made.
//!
//! A release deletes the hold's key as any exclusive hold's key goes (`release.rs`); the watch
//! wakes the waiter whose place is now first, not the queue. The head's place,
//! first under the name now, is its hold: the head takes it with no call when the watch shows
//! it so (`turn_seen`), for as long as the places' lease lasts, and its first renewal writes
//! its id into it; a head on a fixed lease takes it with a transaction. No message grants
//! anything: a watch event is etcd's own change. A waiter that gives up deletes its place if it
//! is still one; a dead waiter's place ends with its lease. How a place is put, kept and
//! deleted, and what this backend remembers of it: `places.rs`.

use std::time::{Duration, Instant};

use dlock_core::backend::{Acquire, AcquireRequest, Grant, LossReason};
use dlock_core::LockError;

use crate::backend::{unknown, Inner};
use crate::holds::{hold_id, HoldRecord};
use crate::keys::NameKeys;
use crate::steps::acquire::{busy, CONFLICT_RETRIES};
use crate::steps::over::Over;
use crate::steps::places::{Kept, Place, Places};
use crate::watch::{KeyRevisions, PlaceSeen};
use crate::wire::{
    created_after, empty, first_created, modified_at, nested, put, range, Json, Kv, Span, TxnAnswer,
};

/// `create_revision(every key of span) >= revision`: nothing in the span is older. The span
/// must hold a key (etcd compares a span with none as a key created at revision 0).
fn none_older(span: &Span, revision: i64) -> Json {
    created_after(span, revision.saturating_sub(1))
}

/// Whether `kv` is a fair waiter's place (empty, in the fair lock's folder), not a hold.
pub(crate) fn is_place(keys: &NameKeys, kv: &Kv) -> bool {
    kv.value.is_empty() && keys.family_of_key(&kv.key) == Some(crate::keys::Family::Fair)
}

/// The least a place's lease must have left for its turn, seen on the watch, to be taken with
/// no call: room for the renewal that writes the hold's id into it (else the waiter takes its
/// turn with a transaction).
const TURN_AT_LEAST: Duration = Duration::from_millis(1500);

/// The most over holds under a name a take in turn steps around in one call (each doubles its
/// operations); past it the take is refused until a step deleted them.
const OVER_IN_A_TAKE: usize = 3;

/// What a take of the fair lock compares: nothing under the name (a taker without a place),
/// or nothing older than the taker's place, created at this revision.
enum Shape {
    Free,
    InTurn(i64),
}

/// How a take of the fair lock turned out.
enum Take {
    Taken(Acquire),
    /// Refused, with the answers of the reads sent with it (`None` if they were not run).
    Refused(Option<TxnAnswer>),
}

/// A take of the fair lock as one transaction: its comparisons, and its operations once they
/// held (a nested transaction for each span whose test needs two comparisons).
struct TakeTxn {
    compare: Vec<Json>,
    success: Vec<Json>,
    /// How many nested transactions the operations must pass through to take.
    depth: usize,
}

impl TakeTxn {
    /// A take of `place` (created at `turn`) when no key under the name is older but this
    /// backend's over holds, which it deletes. etcd compares a span as "no key older" only if
    /// the span has a key (an empty one compares as created at revision 0), so each span
    /// between over keys that does not hold the place passes if it is empty, or else if nothing
    /// in it is older: two comparisons in turn, the second in a nested transaction.
    fn in_turn(keys: &NameKeys, over: &Over, place: &[u8], turn: i64, take: Vec<Json>) -> TakeTxn {
        let (mut compare, spans) = over.split(&keys.all());
        let (own, others): (Vec<Span>, Vec<Span>) =
            spans.into_iter().partition(|span| span.contains(place));
        compare.extend(own.iter().map(|span| none_older(span, turn)));
        let depth = others.len();
        let success = others.iter().rev().fold(take, |then, span| {
            let otherwise = nested(vec![none_older(span, turn)], then.clone(), Vec::new());
            vec![nested(vec![empty(span)], then, vec![otherwise])]
        });
        TakeTxn {
            compare,
            success,
            depth,
        }
    }

    /// Whether a take in turn steps around the over holds under the name in one call.
    fn steps_around(over: &Over) -> bool {
        over.len() <= OVER_IN_A_TAKE
    }

    /// A take when nothing is under the name but this backend's over holds.
    fn of_free(keys: &NameKeys, over: &Over, take: Vec<Json>) -> TakeTxn {
        TakeTxn {
            compare: over.empty(&keys.all()),
            success: take,
            depth: 0,
        }
    }

    /// Whether the answer of a transaction that held went through to the take.
    fn took(&self, answer: &TxnAnswer) -> Result<bool, LockError> {
        let mut level = answer.clone();
        for _ in 0..self.depth {
            let mut inner = level.nested(0)?;
            if !inner.succeeded {
                inner = inner.nested(0)?;
                if !inner.succeeded {
                    return Ok(false);
                }
            }
            level = inner;
        }
        Ok(true)
    }
}

impl Inner {
    /// An attempt at the fair lock: taken, extended (the same hold asked again), or refused
    /// with the waiter's place made or kept.
    pub(crate) fn take_fair(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let places = keys.places(request.waiter);
        let tombstone = keys.ended(request.owner.as_str());
        if let Some(taken) = self.turn_seen(request, &keys) {
            return Ok(taken);
        }
        if let Some(refused) = self.queued_seen(request, &keys) {
            return Ok(refused);
        }
        // The first attempt takes the lock in one call if the store is as this backend last
        // saw it (the place first under the name, or nothing under it); the reads that say
        // otherwise come back with its refusal, and on a contended name its new place too.
        let mut at_once = true;
        for _ in 0..CONFLICT_RETRIES {
            let over = self.over(lock.name)?;
            let reads = vec![
                range(&Span::key(&tombstone)),
                first_created(&keys.all(), over.room()),
                range(&Span::key(&places[0])),
                range(&Span::key(&places[1])),
            ];
            let read = match std::mem::take(&mut at_once) {
                true => match self.try_at_once(request, &keys, &over, reads)? {
                    AtOnce::Answer(answer) => return Ok(answer),
                    AtOnce::Again => continue,
                    AtOnce::Refused(refused) => refused,
                },
                false => self.read(reads)?,
            };
            if !read.kvs(0)?.is_empty() {
                return Ok(Acquire::Gone {
                    reason: LossReason::ForceUnlocked,
                });
            }
            let first = over.live(read.kvs(1)?).into_iter().next();
            self.check_kind(lock, &keys, first.as_ref())?;
            let own: Vec<Kv> = [read.kvs(2)?, read.kvs(3)?].into_iter().flatten().collect();
            let live_own = over.live(own.clone());
            let mut held = first.iter().chain(&live_own);
            if held.any(|kv| Self::is_mine(lock, request.owner, kv)) {
                // This very hold (made by an attempt whose answer was lost, or asked again by
                // another thread of its guard): extended.
                return self.extend(request);
            }
            // The waiter's place; else the key it would make: the first of its two that is not
            // there (an over hold's key is not made again, or its turn would be taken over).
            // A place its waiter's turn made a hold of (no id written yet) is that hold's.
            let placed = over
                .live(own.clone())
                .into_iter()
                .find(|kv| kv.value.is_empty() && !self.is_turn_hold(&kv.key));
            let key = match &placed {
                Some(placed) => Some(placed.key.clone()),
                None => places
                    .iter()
                    .find(|key| own.iter().all(|kv| kv.key != **key))
                    .cloned(),
            };
            let Some(key) = key else {
                // Both of the waiter's keys are holds of its own: it cannot queue until one
                // of them ends.
                return Ok(Acquire::Held {
                    remaining_lease: Some(request.queue_slot / 2),
                });
            };
            let mut compare = vec![empty(&Span::key(&tombstone))];
            compare.push(match &placed {
                Some(placed) => modified_at(&key, placed.mod_revision),
                None => empty(&Span::key(&key)),
            });
            let first = match (first, &placed) {
                (None, _) => {
                    let taken =
                        self.take_turn(request, &over, &key, Shape::Free, compare, vec![])?;
                    if let Take::Taken(taken) = taken {
                        return Ok(taken);
                    }
                    continue;
                }
                (Some(first), Some(placed)) if first.key == placed.key => {
                    if !TakeTxn::steps_around(&over) {
                        // More over holds than a take steps around: deleted first.
                        self.write(Vec::new(), over.deletes(&[]), Vec::new())?;
                        over.done(self);
                        continue;
                    }
                    let shape = Shape::InTurn(placed.create_revision);
                    let taken = self.take_turn(request, &over, &key, shape, compare, vec![])?;
                    if let Take::Taken(taken) = taken {
                        return Ok(taken);
                    }
                    continue;
                }
                (Some(first), _) => first,
            };
            // Not its turn when it read the name. The place is kept whatever became of that key
            // since (a compare of it failed whenever the holder let go in between, half of the
            // tries of eight busy processes); the first key under the name once the place is
            // kept, read in the same call, says whether its turn came meanwhile (it takes it
            // at once) or the name went to another kind.
            let turn = placed.as_ref().map(|placed| placed.create_revision);
            let kept = self.keep_place(request, &over, &key, compare, turn)?;
            let keeps_place = placed.is_some() || request.will_wait;
            match self.behind(request, &keys, &key, kept, Some(first), keeps_place)? {
                Some(held) => return Ok(held),
                None => continue,
            }
        }
        Err(busy(lock.name))
    }

    /// A refused attempt's answer once its place `key` was kept (or none was wanted), behind
    /// the key `kept` read first under the name after, else `first`, read before; back within
    /// half its slot if it `keeps_place`. `None`: the attempt reads the name again (its own
    /// place is first now, its turn come meanwhile). Behind another kind's hold, its place goes
    /// and the error stays.
    fn behind(
        &self,
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
        key: &[u8],
        kept: Kept,
        first: Option<Kv>,
        keeps_place: bool,
    ) -> Result<Option<Acquire>, LockError> {
        let lock = request.lock;
        let first = match kept {
            Kept::Changed => return Ok(None),
            Kept::Kept(None) => first,
            Kept::Kept(Some(first_now)) if first_now.key == key => return Ok(None),
            Kept::Kept(Some(first_now)) => {
                if let Err(other) = self.check_kind(lock, keys, Some(&first_now)) {
                    // Placed behind another kind's hold: the place goes, the error stays.
                    let _ = self.cancel_wait(lock, request.waiter);
                    return Err(other);
                }
                Some(first_now)
            }
        };
        let Some(first) = first else {
            return Ok(None);
        };
        let mut remaining = match is_place(keys, &first) {
            true => None,
            false => self.wait_for(&first)?,
        };
        if keeps_place {
            // Back before the place's lease could run out, to keep it.
            let keep = request.queue_slot / 2;
            remaining = Some(remaining.map_or(keep, |r| r.min(keep)));
        }
        Ok(Some(Acquire::Held {
            remaining_lease: remaining,
        }))
    }

    /// The lock, taken with no call, if the name's watch saw the waiter's place become the first
    /// key under the name (the release of the key before it was its turn, as for etcd's
    /// `Mutex`) and the place is as this backend last wrote it, on the places' lease it keeps
    /// alive. The place holds from then on: nothing older can come, and nothing of this
    /// backend's deletes it before the lease's end, nor before its waiter's slot ends (the
    /// keeper's). The hold lasts until the earlier of the two, and its first
    /// renewal writes its id into the place and moves it onto the session, which the engine
    /// makes once half of the hold's time has passed (a turn released before then needs
    /// none). Only for a hold the
    /// watchdog renews (`AcquireRequest::renewed`: a fixed lease is not renewed), with no
    /// write of that place of unknown outcome that could land later.
    fn turn_seen(&self, request: &AcquireRequest<'_>, keys: &NameKeys) -> Option<Acquire> {
        if request.first_try || request.reentry || !request.will_wait || !request.renewed {
            return None;
        }
        let (place, revisions) = self.written_place(request, keys)?;
        let (turn, written) = (revisions.created, revisions.modified);
        if self.holds.holder_of_key(&place.key).is_some()
            || self.watches.place_seen(&keys.prefix, &place.key, revisions)
                != Some(PlaceSeen::First)
        {
            return None;
        }
        let slot = Places::slot(request.waiter, keys);
        let (lease, until) = self
            .place_lease
            .turn(&slot, &place.key, written, TURN_AT_LEAST)?;
        let now = Instant::now();
        self.holds.record(
            hold_id(request.lock, request.owner),
            HoldRecord {
                key: place.key.clone(),
                made_at: Some(turn),
                written: Some(written),
                lease,
                session: None,
                deadline: until,
                pending_move: None,
                turn_of: Some(slot),
            },
        );
        self.places.forget(request.waiter, keys, &place.key);
        let valid = until.saturating_duration_since(now);
        Some(Acquire::Acquired(Grant::PLAIN.valid_for(valid)))
    }

    /// A refusal with no call, if the name's watch, in step with the store, shows the waiter's
    /// place as this backend last wrote it behind a key older than it (or has not come to that
    /// write yet, whose own read found an older key first: every release the watch told of
    /// since the waiter's last look was in that read), and the place is still on the places'
    /// lease kept now: by etcd's `Mutex` rule a try could only be refused, and a
    /// put would leave the place as it is (it is kept wanted for another slot here). The watch
    /// wakes the waiter when every key before its place is gone, or its place is. Not when
    /// this backend has a hold of the name to resolve or to step around (over, or of unknown
    /// outcome), nor for the very hold asked again.
    fn queued_seen(&self, request: &AcquireRequest<'_>, keys: &NameKeys) -> Option<Acquire> {
        if request.reentry || !request.will_wait {
            return None;
        }
        let (place, revisions) = self.written_place(request, keys)?;
        let now = Instant::now();
        let unsettled = self
            .holds
            .of_name(request.lock.name)
            .iter()
            .any(|(_, record)| record.written.is_none() || record.is_over(now));
        if unsettled {
            return None;
        }
        match self
            .watches
            .place_seen(&keys.prefix, &place.key, revisions)?
        {
            PlaceSeen::Behind => {}
            // The write's own read found an older key first, and the watch has seen no change
            // since: every release it told of was older than that read.
            PlaceSeen::NotYet if place.behind => {}
            PlaceSeen::NotYet | PlaceSeen::First => return None,
        }
        let slot = Places::slot(request.waiter, keys);
        let kept = request.queue_slot.max(Duration::from_secs(1));
        if !self
            .place_lease
            .still_wanted(&slot, &place.key, revisions.modified, kept)
        {
            return None;
        }
        Some(Acquire::Held {
            remaining_lease: Some(request.queue_slot / 2),
        })
    }

    /// The waiter's place as this backend last wrote it, with its create revision (its turn)
    /// and the revision of that write; `None` if it has none, that write's outcome is unknown,
    /// or the request's hold is recorded (the very hold asked again: extended, not queued).
    fn written_place(
        &self,
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
    ) -> Option<(Place, KeyRevisions)> {
        let place = self.places.of(request.waiter, keys)?;
        let (created, modified) = place.written?;
        if self
            .holds
            .lookup(&hold_id(request.lock, request.owner))
            .is_some()
        {
            return None;
        }
        Some((place, KeyRevisions { created, modified }))
    }

    /// Whether `key` is a hold this backend took as its waiter's turn, its id not written yet.
    pub(super) fn is_turn_hold(&self, key: &[u8]) -> bool {
        self.holds
            .holder_of_key(key)
            .is_some_and(|(_, record)| record.turn_of.is_some())
    }

    /// An attempt's first try, [`take_at_once`](Self::take_at_once), with the waiter's place
    /// put in its failure branch where [`placing`](Self::placing) says so: the lock taken, or
    /// the refusal with the answers of `reads` (read in a second call if they were not run);
    /// with the place put, the refusal's answer, or [`AtOnce::Again`] if the waiter's turn
    /// came meanwhile.
    fn try_at_once(
        &self,
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
        over: &Over,
        reads: Vec<Json>,
    ) -> Result<AtOnce, LockError> {
        let placing = self.placing(request, keys, over)?;
        let mut failure = reads.clone();
        failure.extend(placing.as_ref().map(|placing| placing.op.clone()));
        let tried = self.take_at_once(request, keys, over, failure);
        let Some(placing) = placing else {
            return Ok(match tried? {
                Take::Taken(taken) => AtOnce::Answer(taken),
                Take::Refused(Some(refused)) => AtOnce::Refused(refused),
                Take::Refused(None) => AtOnce::Refused(self.read(reads)?),
            });
        };
        let refused = match tried {
            Ok(Take::Taken(taken)) => return Ok(AtOnce::Answer(taken)),
            Ok(Take::Refused(Some(refused))) => refused,
            Ok(Take::Refused(None)) => {
                self.place_lease.release(&placing.slot);
                return Ok(AtOnce::Refused(self.read(reads)?));
            }
            Err(error) => {
                // It may be there: no hint for a take in one call.
                self.places.note(request.waiter, keys, placing.unknown());
                self.place_lease.write_unknown(placing.lease);
                return Err(error);
            }
        };
        let Some(first) = self.placed_with(request, keys, &placing, &refused, reads.len())? else {
            return Ok(AtOnce::Refused(refused));
        };
        let kept = Kept::Kept(Some(first));
        Ok(
            match self.behind(request, keys, &placing.key, kept, None, true)? {
                Some(held) => AtOnce::Answer(held),
                None => AtOnce::Again,
            },
        )
    }

    /// One call that takes the fair lock if the waiter's place is where this backend last
    /// wrote it, first under the name but for this backend's over holds (or it has none and
    /// nothing but over holds is under the name); refused, the answers of `reads`, in their
    /// order, if they were run.
    fn take_at_once(
        &self,
        request: &AcquireRequest<'_>,
        keys: &NameKeys,
        over: &Over,
        reads: Vec<Json>,
    ) -> Result<Take, LockError> {
        let mut compare = vec![empty(&Span::key(&keys.ended(request.owner.as_str())))];
        let hint = self.places.of(request.waiter, keys);
        if let Some((place, (turn, written))) = hint
            .as_ref()
            .and_then(|place| Some((place, place.written?)))
        {
            if TakeTxn::steps_around(over) {
                compare.push(modified_at(&place.key, written));
                let shape = Shape::InTurn(turn);
                return self.take_turn(request, over, &place.key, shape, compare, reads);
            }
        }
        let [first, _] = keys.places(request.waiter);
        self.take_turn(request, over, &first, Shape::Free, compare, reads)
    }

    /// Takes the fair lock for the request's hold at `key` (the waiter's place, if it had one,
    /// becomes the hold) if `txn`'s and `compare`'s comparisons hold; refused, the answers of
    /// `failure`, if they were run.
    fn take_turn(
        &self,
        request: &AcquireRequest<'_>,
        over: &Over,
        key: &[u8],
        shape: Shape,
        compare: Vec<Json>,
        failure: Vec<Json>,
    ) -> Result<Take, LockError> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let (lease, session) = self.leases.lease_for(request.owner, request.lease)?;
        let mut take = over.deletes(&[key]);
        take.push(put(key, request.owner.as_str().as_bytes(), lease.id));
        let txn = match shape {
            Shape::Free => TakeTxn::of_free(&keys, over, take),
            Shape::InTurn(turn) => TakeTxn::in_turn(&keys, over, key, turn, take),
        };
        let mut compare = compare;
        compare.extend(txn.compare.iter().cloned());
        if let Err(fail) = self.gated(&mut compare, lease, session.as_ref()) {
            self.drop_own(lease, session.as_ref());
            return Err(fail.into());
        }
        let sent_at = Instant::now();
        // The take may have made the hold without this backend learning of it.
        let remember_unknown = |session| {
            self.remember_unknown(
                lock,
                request.owner,
                key.to_vec(),
                (lease, session),
                sent_at + request.lease,
            )
        };
        let answer = match self.write(compare, txn.success.clone(), failure) {
            Ok(answer) => answer,
            Err(fail) => {
                if unknown(&fail) {
                    remember_unknown(session);
                } else {
                    self.drop_own(lease, session.as_ref());
                }
                return Err(fail.into());
            }
        };
        if !answer.succeeded {
            self.drop_own(lease, session.as_ref());
            return Ok(Take::Refused(Some(answer)));
        }
        // The over holds' deletes ran on the path to the take, and only there.
        let took = match txn.took(&answer) {
            Ok(took) => took,
            Err(error) => {
                // An answer not understood: the hold may have been made.
                remember_unknown(session);
                return Err(error);
            }
        };
        if !took {
            self.drop_own(lease, session.as_ref());
            return Ok(Take::Refused(None));
        }
        over.done(self);
        self.places.forget(request.waiter, &keys, key);
        // Its place, if it had one, is its hold now.
        self.place_lease
            .release(&Places::slot(request.waiter, &keys));
        self.remember(
            lock,
            request.owner,
            key.to_vec(),
            answer.revision,
            (lease, session),
            sent_at + request.lease,
        );
        Ok(Take::Taken(Acquire::ACQUIRED))
    }
}

/// How an attempt's first try went.
enum AtOnce {
    /// Its answer: the lock taken, or refused with the waiter's place put.
    Answer(Acquire),
    /// Refused with the waiter's place put, which is first under the name now: the attempt
    /// reads the name and takes its turn.
    Again,
    /// Refused, with the answers of the refusal's reads.
    Refused(TxnAnswer),
}
