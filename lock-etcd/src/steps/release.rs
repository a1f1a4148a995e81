//! Ending holds: release (and the hand-over to a waiter of the same client), force unlock,
//! a fair waiter leaving the queue; and reading one lock's state.

use std::time::Instant;

use dlock_core::backend::{AcquireRequest, Grant, Handover, LockRef, LockStatus, OwnerId, Release};
use dlock_core::{LockError, LockKind};

use crate::backend::Inner;
use crate::keys::{keyed_by_client, Family};
use crate::leases::hold_id;
use crate::steps::acquire::value_is;
use crate::transport::Fail;
use crate::wire::{created_at, delete, empty, first_created, nested, put, range, Span};

impl Inner {
    /// The key and create revision of `owner`'s hold, as this backend made it; else, for a
    /// hold with a key of its own (a read hold, a permit: ids are never reused, so that key is
    /// that hold's or nobody's), its key.
    fn hold_key(&self, lock: LockRef<'_>, owner: &OwnerId) -> Option<(Vec<u8>, Option<i64>)> {
        match self.leases.lookup(&hold_id(lock, owner)) {
            Some(record) => Some((record.key, Some(record.create_revision))),
            None if matches!(lock.kind, LockKind::Read | LockKind::Semaphore) => {
                Some((self.keys(lock.name).hold(lock, owner), None))
            }
            None => None,
        }
    }

    pub(crate) fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        Self::family(lock)?;
        let Some((key, revision)) = self.hold_key(lock, owner) else {
            return Ok(Release::NotHeld);
        };
        let span = Span::key(&key);
        let released = match revision {
            // A key that serves several holds in turn: only the one of this create revision
            // (a fair waiter's place: only while it names this hold).
            Some(revision) if keyed_by_client(lock.kind) || lock.kind == LockKind::Fair => {
                let mut compare = vec![created_at(&span, revision)];
                if lock.kind == LockKind::Fair {
                    compare.push(value_is(&key, owner.as_str().as_bytes()));
                }
                self.write(compare, vec![delete(&span)], Vec::new())?
                    .succeeded
            }
            // A key of this hold alone: a plain delete acts on it or on nothing.
            _ => self.delete_key(&key)? > 0,
        };
        let record = self.leases.forget(&hold_id(lock, owner));
        if let Some(record) = record {
            if record.session.is_none() {
                self.leases.revoke(record.lease.id);
            }
        }
        Ok(if released {
            Release::Released
        } else {
            Release::NotHeld
        })
    }

    /// Releases `owner`'s hold and makes `successor` the holder in the same transaction, when
    /// nothing else waits on the store (another program's contender keeps its turn).
    pub(crate) fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        let Some(record) = self.leases.lookup(&hold_id(lock, owner)) else {
            return self.release(lock, owner).map(Handover::from);
        };
        let keys = self.keys(lock.name);
        // The same client's key: it changes hands in place (its create revision stays).
        let next = keys.hold(lock, successor.owner);
        if next != record.key {
            return self.release(lock, owner).map(Handover::from);
        }
        let (lease, session) = self.leases.lease_for(successor.owner, successor.lease)?;
        let mut after = record.key.clone();
        after.push(0);
        let sent_at = Instant::now();
        let _creating = self.leases.creating(&next);
        let answer = self.write(
            vec![
                created_at(&Span::key(&record.key), record.create_revision),
                empty(&Span::between(&keys.prefix, &record.key)),
                empty(&Span::between(
                    &after,
                    &crate::wire::prefix_end(&keys.prefix),
                )),
            ],
            vec![put(&next, successor.owner.as_str().as_bytes(), lease.id)],
            Vec::new(),
        );
        let answer = match answer {
            Ok(answer) => answer,
            Err(fail) => {
                self.drop_own(lease, session.as_ref());
                return Err(fail.into());
            }
        };
        if !answer.succeeded {
            self.drop_own(lease, session.as_ref());
            return self.release(lock, owner).map(Handover::from);
        }
        let old = self.leases.forget(&hold_id(lock, owner));
        if let Some(old) = old.filter(|old| old.session.is_none() && old.lease.id != lease.id) {
            self.leases.revoke(old.lease.id);
        }
        self.remember(
            lock,
            successor.owner,
            next,
            record.create_revision,
            lease,
            session,
            successor.lease,
            sent_at,
        );
        Ok(Handover::Granted(Grant::PLAIN))
    }

    pub(crate) fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        if matches!(lock.kind, LockKind::Semaphore | LockKind::Latch) {
            return Err(Self::unsupported(lock));
        }
        let keys = self.keys(lock.name);
        let first = self.first(&keys)?;
        self.check_kind(lock, &keys, first.as_ref())?;
        let deleted = match lock.kind {
            // Every reader's share, or the writer.
            LockKind::Read | LockKind::Write => {
                let side = keys.side(lock.kind);
                let answer = self.write(Vec::new(), vec![delete(&side)], Vec::new())?;
                answer.deleted(0)? > 0
            }
            // The holder: the first contender (etcd's other waiters keep their places).
            _ => match first {
                Some(first) => {
                    let span = Span::key(&first.key);
                    self.write(
                        vec![created_at(&span, first.create_revision)],
                        vec![delete(&span)],
                        Vec::new(),
                    )?
                    .succeeded
                }
                None => false,
            },
        };
        Ok(deleted)
    }

    pub(crate) fn status(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<LockStatus, LockError> {
        let family = Self::family(lock)?;
        let keys = self.keys(lock.name);
        let own = self.hold_key(lock, owner);
        let watched = match lock.kind {
            LockKind::Read => keys.side(LockKind::Read),
            LockKind::Semaphore => keys.permits(),
            LockKind::Latch => Span::key(&keys.count()),
            LockKind::Write => keys.side(LockKind::Write),
            _ => keys.all(),
        };
        let mut ops = vec![first_created(&keys.all(), 1), first_created(&watched, 1)];
        if let Some((own, _)) = &own {
            ops.push(range(&Span::key(own)));
        }
        let answer = self.read(ops)?;
        let first = answer.kvs(0)?.into_iter().next();
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
        let Some(holder) = answer.kvs(1)?.into_iter().next() else {
            return Ok(LockStatus::FREE);
        };
        let mine = match &own {
            Some((own, revision)) => {
                let found = answer.kvs(2)?.into_iter().next();
                let same = |kv: &crate::wire::Kv| revision.is_none_or(|r| kv.create_revision == r);
                match lock.kind {
                    LockKind::Read | LockKind::Semaphore => found.as_ref().is_some_and(same),
                    LockKind::Fair => {
                        holder.key == *own
                            && same(&holder)
                            && holder.value == owner.as_str().as_bytes()
                    }
                    _ => holder.key == *own && same(&holder),
                }
            }
            None => false,
        };
        let lease = if mine {
            answer.kvs(2)?.first().map_or(holder.lease, |own| own.lease)
        } else {
            holder.lease
        };
        let remaining = self.leases.remaining(lease)?;
        Ok(LockStatus::held(mine, remaining))
    }

    /// A fair waiter gives up: its place goes, unless its turn came (it holds then, and the
    /// client releases that hold).
    pub(crate) fn cancel_wait(&self, lock: LockRef<'_>, waiter: &OwnerId) -> Result<(), LockError> {
        if lock.kind != LockKind::Fair {
            return Ok(());
        }
        let keys = self.keys(lock.name);
        let place = keys.hold(lock, waiter);
        let Some(found) = self
            .read(vec![range(&Span::key(&place))])?
            .kvs(0)?
            .into_iter()
            .next()
        else {
            return Ok(());
        };
        let queue = keys.family(Family::Fair);
        let place_span = Span::key(&place);
        // Every place of the queue created no earlier than this one: it is the head.
        let head = serde_json::json!({
            "key": crate::wire::b64(&queue.key),
            "range_end": crate::wire::b64(queue.end.as_deref().unwrap_or_default()),
            "target": "CREATE",
            "result": "GREATER",
            "create_revision": (found.create_revision - 1).to_string(),
        });
        self.write(
            vec![head],
            Vec::new(),
            vec![nested(
                vec![created_at(&place_span, found.create_revision)],
                vec![delete(&place_span)],
                Vec::new(),
            )],
        )
        .map_err(|fail: Fail| LockError::from(fail))?;
        Ok(())
    }
}
