//! The [`DistributedLock`] steps of [`EtcdBackend`], one transaction (one round trip) each
//! where etcd allows it.

mod acquire;
mod fair;
mod many;
mod over;
mod places;
mod read;
mod release;
mod renew;
mod synchronizers;
mod tries;

pub(crate) use fair::is_place;
pub(crate) use places::Places;

use std::sync::Arc;
use std::time::Duration;

use dlock_core::backend::{
    Acquire, AcquireRequest, ClientRecord, CounterStep, DistributedLock, Handover, HeldSince,
    HoldRef, Inspection, Leader, LockRef, LockStatus, OwnerId, Release, ReleaseSubscription,
    Renewal,
};
use dlock_core::{LockError, LockKind};

use crate::backend::Inner;
use crate::keys::Family;
use crate::watch::Wake;
use crate::EtcdBackend;

impl DistributedLock for EtcdBackend {
    fn backend_name(&self) -> &'static str {
        "etcd"
    }

    fn supports(&self, kind: LockKind) -> bool {
        Family::of(kind).is_some()
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        self.inner
            .acquire(request)
            .map_err(|e| e.on_lock(request.lock.name))
    }

    fn try_acquire_many(&self, requests: &[AcquireRequest<'_>]) -> Result<Vec<Acquire>, LockError> {
        self.inner.acquire_many(requests)
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        self.inner
            .release(lock, owner)
            .map_err(|e| e.on_lock(lock.name))
    }

    fn release_many(&self, holds: &[HoldRef<'_>]) -> Vec<Result<Release, LockError>> {
        self.inner.release_many(holds)
    }

    fn hands_over(&self, kind: LockKind) -> bool {
        kind == LockKind::Reentrant
    }

    fn keeps_turns(&self) -> bool {
        true
    }

    fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        if lock.kind != LockKind::Reentrant {
            return self.release(lock, owner).map(Handover::from);
        }
        self.inner
            .release_to(lock, owner, successor)
            .map_err(|e| e.on_lock(lock.name))
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        self.inner.renew(holds, lease)
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        self.inner
            .status(lock, owner)
            .map_err(|e| e.on_lock(lock.name))
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        self.inner
            .force_unlock(lock)
            .map_err(|e| e.on_lock(lock.name))
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        Inner::family(lock)?;
        let keys = self.inner.keys(lock.name);
        let wake = match lock.kind {
            kind if kind.queues_on_store() => {
                let [place, _] = keys.places(owner);
                Wake::Turn(place)
            }
            // Only a release or an expiry frees a lock, and only of its last key.
            LockKind::Reentrant | LockKind::Fenced | LockKind::Write => Wake::Vacancy,
            _ => Wake::Change,
        };
        let subscribed = if lock.kind == LockKind::Read {
            // A reader waits for a writer's hold to go, or for the writers it waits behind to
            // go in or give up: nothing else under the name refuses it, and it watches
            // nothing else.
            let marks = keys.writer_marks().key;
            self.watches().subscribe_all(vec![
                (keys.reader_watch(), Wake::Deletion),
                (marks, Wake::Deletion),
            ])
        } else if let Some((marks, mark)) = keys.turn_marks(lock.kind, owner) {
            // A plain waiter, or a writer, waits for the lock to be free and for the waiters
            // of its kind marked before it to go in or give up (or die).
            let others = Wake::DeletionOfOther(mark);
            self.watches()
                .subscribe_all(vec![(keys.prefix, wake), (marks.key, others)])
        } else {
            self.watches().subscribe(keys.prefix, wake)
        };
        subscribed.map_err(|e| e.on_lock(lock.name))
    }

    fn releases_heard(&self, lock: LockRef<'_>, owner: &OwnerId) -> Option<u64> {
        // Only waiters that a deletion wakes: the streams count deletions alone (a waiter's
        // own new key, its place or its mark, must not look like news).
        let kinds = [
            LockKind::Read,
            LockKind::Reentrant,
            LockKind::Fenced,
            LockKind::Write,
            LockKind::Fair,
        ];
        if !kinds.contains(&lock.kind) {
            return None;
        }
        // A reader's, a plain waiter's and a writer's marks' streams wake them too.
        self.inner.watches.heard(|| {
            let keys = self.inner.keys(lock.name);
            match (lock.kind, keys.turn_marks(lock.kind, owner)) {
                (LockKind::Read, _) => vec![keys.writer_marks().key, keys.reader_watch()],
                (_, Some((marks, _))) => vec![marks.key, keys.prefix],
                _ => vec![keys.prefix],
            }
        })
    }

    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        _queue_slot: Duration,
    ) -> Result<(), LockError> {
        self.inner
            .cancel_wait(lock, owner)
            .map_err(|e| e.on_lock(lock.name))
    }

    fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        self.inner.counter(step).map_err(|e| e.on_lock(step.name()))
    }

    fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        self.inner.leader(lock).map_err(|e| e.on_lock(lock.name))
    }

    fn inspection(&self) -> Option<&dyn Inspection> {
        Some(self)
    }

    fn keeps_client_records(&self) -> bool {
        true
    }

    fn publish_client(
        &self,
        client: &ClientRecord,
        holds: &[HeldSince<'_>],
        ttl: Duration,
    ) -> Result<(), LockError> {
        self.inner.publish_client(client, holds, ttl)
    }
}

impl EtcdBackend {
    fn watches(&self) -> Arc<crate::watch::Watches> {
        self.inner.watches.clone()
    }
}
