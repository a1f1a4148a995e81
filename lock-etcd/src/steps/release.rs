//! Ending holds: release (and the hand-over to a waiter of the same backend), force unlock;
//! and reading one lock's state.

use std::time::Instant;

use dlock_core::backend::{AcquireRequest, Grant, Handover, LockRef, LockStatus, OwnerId, Release};
use dlock_core::{LockError, LockKind};

use crate::backend::Inner;
use crate::holds::{hold_id, HoldId};
use crate::keys::{shares_key, Family};
use crate::steps::acquire::{busy, CONFLICT_RETRIES};
use crate::steps::is_place;
use crate::steps::over::Over;
use crate::wire::{
    delete, first_created, modified_at, modified_before, put, range, Json, Kv, Span,
};

/// How many times a release is sent: one whose reply was lost (or that was not answered in
/// time) is sent again once, on the next endpoint, made anew, so that one sent after the hold's
/// deadline deletes only what is over: a release returns within two request timeouts.
pub(super) const RELEASE_SENDS: usize = 2;

/// A release's transaction, about to be sent.
pub(super) struct ReleaseStep {
    /// The name's over holds, which it deletes.
    pub(super) over: Over,
    /// Whether the hold released is one of them (a second send's, after the hold's deadline).
    pub(super) ended: bool,
    /// Its comparison of the hold, its writes, and its writes if the comparison fails.
    pub(super) branches: [Vec<Json>; 3],
}

/// The most holds one transaction of a force unlock ends.
const FORCED_PER_TXN: usize = 24;

/// How long a force-unlocked hold's tombstone is kept: a copy of the request that made the
/// hold, arriving later than this, could make it again.
const TOMBSTONE_KEPT: std::time::Duration = std::time::Duration::from_secs(600);

impl Inner {
    /// The key of `owner`'s hold of `lock`: as this backend made it, else where a hold of that
    /// id would be (for a fair hold, whose key is its waiter's, the key holding it, read).
    pub(crate) fn hold_key(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Vec<u8>, LockError> {
        if let Some(record) = self.holds.lookup(&hold_id(lock, owner)) {
            return Ok(record.key);
        }
        let keys = self.keys(lock.name);
        if lock.kind == LockKind::Fair {
            let found = self.read(vec![range(&keys.queue())])?.kvs(0)?;
            let held = found.into_iter().find(|kv| Self::is_mine(lock, owner, kv));
            if let Some(held) = held {
                return Ok(held.key);
            }
        }
        Ok(keys.hold(lock, owner))
    }

    /// Forgets a hold that ended by its release (or was found gone), and revokes the lease of
    /// its own it was on.
    pub(crate) fn forget_released(&self, id: &HoldId) {
        if let Some(record) = self.holds.forget(id) {
            if record.owns_lease() {
                self.leases.revoke(record.lease.id);
            }
            if let Some(place) = &record.turn_of {
                self.place_lease.let_go(place, &record.key);
            }
        }
    }

    /// A release of `id` whose answer was lost: released or not (and, on a key its client's
    /// holds share, perhaps handed over), the key is asked about when next met, so that no
    /// later step counts the hold on from the key alone.
    pub(super) fn released_unknown(&self, id: &HoldId) {
        if let Some(mut record) = self.holds.lookup(id) {
            record.written = None;
            self.holds.record(id.clone(), record);
        }
    }

    /// Ends a hold its holder gives up after it was over: its key (which etcd keeps as long as
    /// the lease it is on, a session's, kept alive for the client's other holds) is deleted with
    /// the name's other over holds, and the hold forgotten. If that write fails, the hold stays
    /// recorded as over, and the next step that meets it deletes it.
    pub(crate) fn drop_over(&self, over: &Over, id: &HoldId) {
        if self
            .write(Vec::new(), over.deletes(&[]), Vec::new())
            .is_ok()
        {
            over.done(self);
            self.forget_released(id);
        }
    }

    pub(crate) fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        Self::family(lock)?;
        if matches!(lock.kind, LockKind::Latch) {
            return Ok(Release::NotHeld);
        }
        let id = hold_id(lock, owner);
        let mut send = 0;
        loop {
            send += 1;
            let Some(step) = self.release_step(lock, owner, &id, send)? else {
                return Ok(Release::NotHeld);
            };
            let [mine, success, failure] = step.branches;
            let answer = match self.write(mine, success, failure) {
                Ok(answer) => answer,
                Err(fail) if crate::backend::unknown(&fail) && send < RELEASE_SENDS => continue,
                Err(fail) => {
                    if crate::backend::unknown(&fail) {
                        self.released_unknown(&id);
                    }
                    return Err(fail.into());
                }
            };
            return Ok(self.release_told(&id, &step.over, step.ended, answer.succeeded));
        }
    }

    /// The `send`th transaction of a release of `owner`'s hold of `lock` (`id`): it deletes the
    /// hold's key if the key is still the hold's, and the name's over holds either way. `None`
    /// if the hold was over before the first send: it is dropped, not released.
    pub(super) fn release_step(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        id: &HoldId,
        send: usize,
    ) -> Result<Option<ReleaseStep>, LockError> {
        let over = self.over(lock.name)?;
        let ended = over.find(lock, owner).is_some();
        if ended && send == 1 {
            // Over: its holder counts on it no longer; it is not released, but gone.
            self.drop_over(&over, id);
            return Ok(None);
        }
        let recorded = self.holds.lookup(id);
        let key = match &recorded {
            Some(record) => record.key.clone(),
            None => self.hold_key(lock, owner)?,
        };
        let mut success = over.deletes(&[&key]);
        success.push(delete(&Span::key(&key)));
        let failure = over.deletes(&[]);
        let mine = Self::mine_as_recorded(lock, owner, &key, recorded.as_ref());
        Ok(Some(ReleaseStep {
            over,
            ended,
            branches: [mine, success, failure],
        }))
    }

    /// What a release's transaction did, its comparison of the hold `succeeded` or not.
    pub(super) fn release_told(
        &self,
        id: &HoldId,
        over: &Over,
        ended: bool,
        succeeded: bool,
    ) -> Release {
        over.done(self);
        // Sent again, a copy that finds the hold gone cannot tell whether its first run
        // released it or the hold ended otherwise (force-unlocked, run out, its key deleted
        // by another program): etcd keeps no record of a release, and none is inferred. The
        // answer is "gone", and the holder is told its hold was lost.
        self.forget_released(id);
        if succeeded && !ended {
            Release::Released
        } else {
            Release::NotHeld
        }
    }

    /// Releases `owner`'s hold and makes `successor` the holder in the same transaction, when
    /// nothing else is under the name (another program's contender keeps its turn).
    pub(crate) fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        let keys = self.keys(lock.name);
        let over = self.over(lock.name)?;
        if over.find(lock, owner).is_some() {
            self.drop_over(&over, &hold_id(lock, owner));
            return Ok(Handover::NotHeld);
        }
        let key = self.hold_key(lock, owner)?;
        let next = keys.hold(lock, successor.owner);
        let (lease, session) = self.leases.lease_for(successor.owner, successor.lease)?;
        let mut compare = vec![Self::mine(lock, owner, &key)];
        // Nothing else under the name: no key before or after the released one (and the
        // successor's, where it has a key of its own).
        let mut around = vec![key.clone(), next.clone()];
        around.sort();
        around.dedup();
        let mut from = keys.prefix.clone();
        for at in &around {
            compare.extend(over.empty(&Span::between(&from, at)));
            if *at != key {
                compare.extend(over.empty(&Span::key(at)));
            }
            from = at.clone();
            from.push(0);
        }
        compare.extend(over.empty(&Span::between(
            &from,
            &crate::wire::prefix_end(&keys.prefix),
        )));
        // The successor's waiter takes a free lock first, or the release wakes the waiters.
        let successor_mark = keys.lock_waiter(successor.waiter);
        compare.extend(self.turns.compares(&keys.lock_waiters(), &successor_mark));
        let mut success = over.deletes(&[&key, &next]);
        if next != key {
            success.push(delete(&Span::key(&key)));
        }
        success.extend(self.turns.unmark(&successor_mark));
        success.push(put(&next, successor.owner.as_str().as_bytes(), lease.id));
        if let Err(fail) = self.gated(&mut compare, lease, session.as_ref()) {
            self.drop_own(lease, session.as_ref());
            return Err(fail.into());
        }
        let sent_at = Instant::now();
        let _creating = self.holds.creating(&next);
        let answer = match self.write(compare, success, Vec::new()) {
            Ok(answer) => answer,
            Err(fail) => {
                if crate::backend::unknown(&fail) {
                    self.released_unknown(&hold_id(lock, owner));
                } else {
                    self.drop_own(lease, session.as_ref());
                }
                return Err(fail.into());
            }
        };
        if !answer.succeeded {
            self.drop_own(lease, session.as_ref());
            return self.release(lock, owner).map(Handover::from);
        }
        over.done(self);
        self.forget_released(&hold_id(lock, owner));
        // The successor's mark went with the hand-over.
        self.turns.forget(&successor_mark);
        self.remember(
            lock,
            successor.owner,
            next,
            answer.revision,
            (lease, session),
            sent_at + successor.lease,
        );
        Ok(Handover::Granted(Grant::PLAIN))
    }

    pub(crate) fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        if matches!(lock.kind, LockKind::Semaphore | LockKind::Latch) {
            return Err(Self::unsupported(lock));
        }
        let keys = self.keys(lock.name);
        let mut ended = false;
        for _ in 0..CONFLICT_RETRIES {
            let over = self.over(lock.name)?;
            let answer = self.read(vec![
                first_created(&keys.all(), over.room()),
                range(&keys.side(LockKind::Read)),
                first_created(&keys.side(LockKind::Write), over.room()),
            ])?;
            let first = over.live(answer.kvs(0)?).into_iter().next();
            self.check_kind(lock, &keys, first.as_ref())?;
            let readers_span = keys.side(LockKind::Read);
            let readers = over.live(answer.kvs(1)?);
            let writer = over.live(answer.kvs(2)?).into_iter().next();
            let victims: Vec<Kv> = match lock.kind {
                LockKind::Read => readers,
                // The readers next to a writer are its own (a writer may read): they end with
                // it.
                LockKind::Write => match writer {
                    Some(writer) => std::iter::once(writer).chain(readers).collect(),
                    None => Vec::new(),
                },
                // The holder: the first contender (etcd's other waiters keep their places), not
                // a fair waiter's place at the head of the queue.
                _ => first
                    .into_iter()
                    .filter(|first| !is_place(&keys, first))
                    .collect(),
            };
            let tombstones = self.leases.shared(TOMBSTONE_KEPT)?;
            let victim_keys: Vec<&[u8]> = victims.iter().map(|v| v.key.as_slice()).collect();
            let mut success = over.deletes(&victim_keys);
            let mut all_ended = true;
            // A few victims to a transaction (a delete and a tombstone each, within etcd's
            // operations per transaction); a chunk whose victims changed is read again.
            for chunk in victims.chunks(FORCED_PER_TXN) {
                for victim in chunk {
                    success.push(delete(&Span::key(&victim.key)));
                    if let Some(hold) = held_by(&keys, victim) {
                        success.push(put(&keys.ended(&hold), b"", tombstones.id));
                    }
                }
                let mut compare: Vec<Json> = chunk
                    .iter()
                    .map(|victim| modified_at(&victim.key, victim.mod_revision))
                    .collect();
                // Every reader ends, those that came since the read too: a force unlock that
                // reaches etcd late (held up in the network) would else end only the readers
                // it read, and leave one that came in between believing, unlike one that
                // reaches it at once. Read again, and ended with the others.
                if matches!(lock.kind, LockKind::Read | LockKind::Write) {
                    compare.push(modified_before(&readers_span, answer.revision + 1));
                }
                if !self
                    .write(compare, std::mem::take(&mut success), Vec::new())?
                    .succeeded
                {
                    all_ended = false;
                    break;
                }
                ended = true;
            }
            if victims.is_empty() {
                self.write(Vec::new(), success, Vec::new())?;
            }
            if all_ended {
                over.done(self);
                return Ok(ended);
            }
        }
        Err(busy(lock.name))
    }

    pub(crate) fn status(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<LockStatus, LockError> {
        let family = Self::family(lock)?;
        let keys = self.keys(lock.name);
        let over = self.over(lock.name)?;
        // A fair hold's key is its waiter's: it is mine if the holder, read anyway, is.
        let own = match lock.kind {
            LockKind::Fair => None,
            _ => Some(self.hold_key(lock, owner)?),
        };
        let watched = match lock.kind {
            LockKind::Read => keys.side(LockKind::Read),
            LockKind::Semaphore => keys.permits(),
            LockKind::Latch => Span::key(&keys.count()),
            LockKind::Write => keys.side(LockKind::Write),
            _ => keys.all(),
        };
        let mut reads = vec![
            first_created(&keys.all(), over.room()),
            first_created(&watched, over.room()),
        ];
        reads.extend(own.as_ref().map(|own| range(&Span::key(own))));
        let answer = self.read(reads)?;
        let first = over.live(answer.kvs(0)?).into_iter().next();
        self.check_kind(lock, &keys, first.as_ref())?;
        if family == Family::Latch {
            let open = answer
                .kvs(1)?
                .first()
                .is_none_or(|count| count.value_text().trim() == "0");
            return Ok(if open {
                LockStatus::FREE
            } else {
                LockStatus::held(false, None)
            });
        }
        // The owner's place, if its turn made it the owner's hold (not written since).
        let turn = match lock.kind {
            LockKind::Fair => self
                .holds
                .lookup(&hold_id(lock, owner))
                .filter(|record| record.turn_of.is_some()),
            _ => None,
        };
        let is_turn = |kv: &Kv| {
            turn.as_ref()
                .is_some_and(|r| r.key == kv.key && r.written == Some(kv.mod_revision))
        };
        let Some(holder) = over
            .live(answer.kvs(1)?)
            .into_iter()
            .next()
            .filter(|holder| !is_place(&keys, holder) || is_turn(holder))
        else {
            return Ok(LockStatus::FREE);
        };
        let found = match own {
            Some(_) => over.live(answer.kvs(2)?).into_iter().next(),
            None => Some(holder.clone()),
        };
        let mine = found.filter(|own| {
            (Self::is_mine(lock, owner, own) || is_turn(own))
                && (matches!(lock.kind, LockKind::Read | LockKind::Semaphore)
                    || own.key == holder.key)
        });
        let remaining = self.remaining_of(mine.as_ref().unwrap_or(&holder))?;
        Ok(LockStatus::held(mine.is_some(), remaining))
    }
}

/// The hold id a key of the name is held by: its value for a key holds share, else the id its
/// key ends with; `None` for another program's key.
fn held_by(keys: &crate::keys::NameKeys, kv: &Kv) -> Option<String> {
    let family = keys.family_of_key(&kv.key)?;
    let kind = match family {
        Family::Lock => LockKind::Reentrant,
        Family::Fair => LockKind::Fair,
        Family::Election => LockKind::Election,
        Family::ReadWrite if kv.key.starts_with(&keys.side(LockKind::Read).key) => LockKind::Read,
        Family::ReadWrite => LockKind::Write,
        Family::Semaphore | Family::Latch => return None,
    };
    if shares_key(kind) {
        return Some(kv.value_text());
    }
    let id = kv.key.rsplit(|byte| *byte == b'/').next()?;
    Some(crate::keys::unescape(&String::from_utf8_lossy(id)))
}
