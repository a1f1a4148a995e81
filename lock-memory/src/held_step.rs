//! Steps a [`FaultyBackend`](crate::FaultyBackend) keeps in the network: owned copies of the
//! requests, sent to the store when the test delivers them.

use std::time::Duration;

use dlock_core::backend::{
    AcquireRequest, CounterStep, DistributedLock, GrantOffer, HoldRef, LockRef, OwnerId,
};
use dlock_core::LockKind;

/// Sends a kept request to a store.
type Deliver = Box<dyn FnOnce(&dyn DistributedLock) + Send>;

/// A request kept in the network: how to send it.
pub(crate) struct HeldStep {
    deliver: Deliver,
}

impl HeldStep {
    pub(crate) fn new(deliver: impl FnOnce(&dyn DistributedLock) + Send + 'static) -> Self {
        HeldStep {
            deliver: Box::new(deliver),
        }
    }

    /// Sends it to `store` (its answer goes nowhere: its caller gave up on it long ago).
    pub(crate) fn deliver(self, store: &dyn DistributedLock) {
        (self.deliver)(store);
    }
}

/// An owned copy of an [`AcquireRequest`].
#[derive(Clone)]
pub(crate) struct OwnedRequest {
    name: String,
    kind: LockKind,
    owner: OwnerId,
    waiter: OwnerId,
    write_hold: Option<OwnerId>,
    lease: Duration,
    reentry: bool,
    value: Option<String>,
    will_wait: bool,
    queue_slot: Duration,
    grant: Option<GrantOffer>,
}

impl OwnedRequest {
    pub(crate) fn of(request: &AcquireRequest<'_>) -> Self {
        OwnedRequest {
            name: request.lock.name.to_owned(),
            kind: request.lock.kind,
            owner: request.owner.clone(),
            waiter: request.waiter.clone(),
            write_hold: request.write_hold.cloned(),
            lease: request.lease,
            reentry: request.reentry,
            value: request.value.map(str::to_owned),
            will_wait: request.will_wait,
            queue_slot: request.queue_slot,
            grant: request.grant,
        }
    }

    /// Runs `f` on the request this is a copy of.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&AcquireRequest<'_>) -> R) -> R {
        let mut request =
            AcquireRequest::new(LockRef::new(&self.name, self.kind), &self.owner, self.lease)
                .queued_as(&self.waiter)
                .under_write_hold(self.write_hold.as_ref())
                .reentering(self.reentry)
                .with_value(self.value.as_deref())
                .waiting(self.will_wait, self.queue_slot);
        if let Some(offer) = self.grant {
            request = request.accepting_grant(offer);
        }
        f(&request)
    }
}

/// An owned copy of a [`HoldRef`].
#[derive(Clone)]
pub(crate) struct OwnedHold {
    name: String,
    kind: LockKind,
    owner: OwnerId,
}

impl OwnedHold {
    pub(crate) fn of(hold: &HoldRef<'_>) -> Self {
        OwnedHold {
            name: hold.lock.name.to_owned(),
            kind: hold.lock.kind,
            owner: hold.owner.clone(),
        }
    }

    pub(crate) fn as_ref(&self) -> HoldRef<'_> {
        HoldRef {
            lock: LockRef::new(&self.name, self.kind),
            owner: &self.owner,
        }
    }
}

/// An owned copy of a [`CounterStep`].
#[derive(Clone)]
pub(crate) struct OwnedCounterStep {
    name: String,
    step: CounterKind,
}

#[derive(Clone, Copy)]
enum CounterKind {
    TrySetPermits(u64),
    AddPermits(u64),
    AvailablePermits,
    TrySetCount(u64),
    CountDown,
    Count,
}

impl OwnedCounterStep {
    /// A copy of `step`; `None` for a step this version does not know.
    pub(crate) fn of(step: &CounterStep<'_>) -> Option<Self> {
        let kind = match *step {
            CounterStep::TrySetPermits { permits, .. } => CounterKind::TrySetPermits(permits),
            CounterStep::AddPermits { permits, .. } => CounterKind::AddPermits(permits),
            CounterStep::AvailablePermits { .. } => CounterKind::AvailablePermits,
            CounterStep::TrySetCount { count, .. } => CounterKind::TrySetCount(count),
            CounterStep::CountDown { .. } => CounterKind::CountDown,
            CounterStep::Count { .. } => CounterKind::Count,
            _ => return None,
        };
        Some(OwnedCounterStep {
            name: step.name().to_owned(),
            step: kind,
        })
    }

    /// The step this is a copy of.
    pub(crate) fn as_step(&self) -> CounterStep<'_> {
        let name = self.name.as_str();
        match self.step {
            CounterKind::TrySetPermits(permits) => CounterStep::TrySetPermits { name, permits },
            CounterKind::AddPermits(permits) => CounterStep::AddPermits { name, permits },
            CounterKind::AvailablePermits => CounterStep::AvailablePermits { name },
            CounterKind::TrySetCount(count) => CounterStep::TrySetCount { name, count },
            CounterKind::CountDown => CounterStep::CountDown { name },
            CounterKind::Count => CounterStep::Count { name },
        }
    }
}
