//! Defects the workers can be run with on purpose (`--seeded-bug`), to show which rows of the
//! suite catch which: a checker that never sees a defect it is meant to catch proves nothing.
//! Each stands for a mistake a lock implementation makes:
//! - `skip-replica-ack`: a grant or renewal not waiting for a replica's acknowledgement (the
//!   workers' `replica_sync` off, whatever the fault);
//! - `renew-without-owner-check`: a renewal that extends the lease without checking who holds
//!   the lock, so a holder whose hold is gone is told it renewed (here the store's "gone" is
//!   answered as "renewed"; the real defect would also extend the new holder's lease);
//! - `client-clock`: trusting the client's own clock over the store's word: a renewal the
//!   store answers "gone" is taken for one not answered, so the holder believes its hold
//!   until the lease it last renewed runs out by its own clock.
//!
//! The last two wrap the worker's backend ([`SeededBackend`]): every call is passed on, only
//! the renewal's answer changes.

use std::sync::Arc;
use std::time::Duration;

use dlocks::backend::{
    Acquire, AcquireRequest, ClientRecord, Clock, ClockDrift, CounterStep, DistributedLock,
    Handover, HeldSince, HoldRef, Inspection, Leader, LockKind, LockRef, LockStatus, OwnerId,
    Release, ReleaseSubscription, Renewal,
};
use dlocks::LockError;

/// A defect the workers run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeededBug {
    /// Grants and renewals do not wait for a replica's acknowledgement.
    SkipReplicaAck,
    /// A renewal of a hold that is gone answers "renewed".
    RenewWithoutOwnerCheck,
    /// A renewal of a hold that is gone answers "not answered": the client's clock decides.
    ClientClock,
}

impl SeededBug {
    /// Every seeded bug, in the order the docs list them.
    pub const ALL: [SeededBug; 3] = [
        SeededBug::SkipReplicaAck,
        SeededBug::RenewWithoutOwnerCheck,
        SeededBug::ClientClock,
    ];

    /// The name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            SeededBug::SkipReplicaAck => "skip-replica-ack",
            SeededBug::RenewWithoutOwnerCheck => "renew-without-owner-check",
            SeededBug::ClientClock => "client-clock",
        }
    }

    /// The seeded bug called `name`.
    pub fn parse(name: &str) -> Option<SeededBug> {
        SeededBug::ALL.into_iter().find(|bug| bug.name() == name)
    }

    /// Every name, for messages.
    pub fn names() -> String {
        let names: Vec<&str> = SeededBug::ALL.iter().map(|bug| bug.name()).collect();
        names.join(", ")
    }

    /// `inner` with this defect, where it lives in the backend's answers.
    pub fn wrap(self, inner: Arc<dyn DistributedLock>) -> Arc<dyn DistributedLock> {
        match self {
            SeededBug::SkipReplicaAck => inner,
            SeededBug::RenewWithoutOwnerCheck | SeededBug::ClientClock => {
                Arc::new(SeededBackend { inner, bug: self })
            }
        }
    }

    /// What the defect makes of a renewal's answer.
    fn answer(self, renewal: Renewal) -> Renewal {
        match (self, renewal) {
            (SeededBug::RenewWithoutOwnerCheck, Renewal::Lost(_)) => Renewal::Renewed,
            (SeededBug::ClientClock, Renewal::Lost(_)) => Renewal::Unanswered,
            (_, renewal) => renewal,
        }
    }
}

/// A backend with a seeded defect in its renewals; every other call passed on.
struct SeededBackend {
    inner: Arc<dyn DistributedLock>,
    bug: SeededBug,
}

impl DistributedLock for SeededBackend {
    fn supports(&self, kind: LockKind) -> bool {
        self.inner.supports(kind)
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        self.inner.try_acquire(request)
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        self.inner.release(lock, owner)
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
        self.inner.release_to(lock, owner, successor)
    }

    fn try_acquire_many(&self, requests: &[AcquireRequest<'_>]) -> Result<Vec<Acquire>, LockError> {
        self.inner.try_acquire_many(requests)
    }

    fn release_many(&self, holds: &[HoldRef<'_>]) -> Vec<Result<Release, LockError>> {
        self.inner.release_many(holds)
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        let found = self.inner.renew(holds, lease)?;
        Ok(found.into_iter().map(|r| self.bug.answer(r)).collect())
    }

    fn renew_parts(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
        answered: &(dyn Fn(&[usize], &[Renewal]) + Sync),
    ) -> Result<(), LockError> {
        self.inner.renew_parts(holds, lease, &|indexes, part| {
            let part: Vec<Renewal> = part.iter().map(|r| self.bug.answer(*r)).collect();
            answered(indexes, &part);
        })
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        self.inner.status(lock, owner)
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        self.inner.force_unlock(lock)
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        self.inner.subscribe(lock, owner)
    }

    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        self.inner.cancel_wait(lock, owner, queue_slot)
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock()
    }

    fn clock_drift(&self) -> ClockDrift {
        self.inner.clock_drift()
    }

    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
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
        self.inner.publish_client(client, holds, ttl)
    }

    fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        self.inner.counter(step)
    }

    fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        self.inner.leader(lock)
    }
}
