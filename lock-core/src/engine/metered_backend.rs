//! The client's view of its backend: every store step timed in
//! [`BACKEND_CALL_SECONDS`](crate::engine::metrics::BACKEND_CALL_SECONDS), whatever the store,
//! so no backend has to report its own steps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::contract::backend::{
    Acquire, AcquireRequest, ClientRecord, ClockDrift, CounterStep, DistributedLock, Handover,
    HeldSince, HoldRef, Inspection, Leader, LockKind, LockRef, LockStatus, OwnerId, Release,
    ReleaseSubscription, Renewal,
};
use crate::contract::error::LockError;
use crate::engine::metrics::backend_call;
use crate::time::clock::Clock;

/// A backend whose steps are timed.
pub(crate) struct MeteredBackend {
    inner: Arc<dyn DistributedLock>,
    name: &'static str,
}

impl MeteredBackend {
    pub(crate) fn new(inner: Arc<dyn DistributedLock>) -> Self {
        let name = inner.backend_name();
        MeteredBackend { inner, name }
    }

    fn timed<T>(&self, step: &'static str, call: impl FnOnce() -> T) -> T {
        let called = Instant::now();
        let answer = call();
        backend_call(self.name, step, called.elapsed());
        answer
    }
}

impl DistributedLock for MeteredBackend {
    fn supports(&self, kind: LockKind) -> bool {
        self.inner.supports(kind)
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        self.timed("acquire", || self.inner.try_acquire(request))
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        self.timed("release", || self.inner.release(lock, owner))
    }

    fn hands_over(&self, kind: LockKind) -> bool {
        self.inner.hands_over(kind)
    }

    fn keeps_turns(&self) -> bool {
        self.inner.keeps_turns()
    }

    fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        self.timed("release_to", || {
            self.inner.release_to(lock, owner, successor)
        })
    }

    fn try_acquire_many(&self, requests: &[AcquireRequest<'_>]) -> Result<Vec<Acquire>, LockError> {
        self.timed("acquire_many", || self.inner.try_acquire_many(requests))
    }

    fn release_many(&self, holds: &[HoldRef<'_>]) -> Vec<Result<Release, LockError>> {
        self.timed("release_many", || self.inner.release_many(holds))
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        self.timed("renew", || self.inner.renew(holds, lease))
    }

    fn renew_parts(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
        answered: &(dyn Fn(&[usize], &[Renewal]) + Sync),
    ) -> Result<(), LockError> {
        self.timed("renew", || self.inner.renew_parts(holds, lease, answered))
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        self.timed("status", || self.inner.status(lock, owner))
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        self.timed("force_unlock", || self.inner.force_unlock(lock))
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        self.timed("subscribe", || self.inner.subscribe(lock, owner))
    }

    fn releases_heard(&self, lock: LockRef<'_>, owner: &OwnerId) -> Option<u64> {
        self.inner.releases_heard(lock, owner)
    }

    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        self.timed("cancel_wait", || {
            self.inner.cancel_wait(lock, owner, queue_slot)
        })
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock()
    }

    fn clock_drift(&self) -> ClockDrift {
        self.inner.clock_drift()
    }

    fn backend_name(&self) -> &'static str {
        self.name
    }

    fn may_block(&self) -> bool {
        self.inner.may_block()
    }

    fn keeps_client_records(&self) -> bool {
        self.inner.keeps_client_records()
    }

    fn inspection(&self) -> Option<&dyn Inspection> {
        self.inner.inspection()
    }

    fn publish_client(
        &self,
        client: &ClientRecord,
        holds: &[HeldSince<'_>],
        ttl: Duration,
    ) -> Result<(), LockError> {
        self.timed("publish_client", || {
            self.inner.publish_client(client, holds, ttl)
        })
    }

    fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        self.timed("counter", || self.inner.counter(step))
    }

    fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        self.timed("leader", || self.inner.leader(lock))
    }
}
