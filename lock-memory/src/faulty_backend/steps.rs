//! The [`DistributedLock`] steps of [`FaultyBackend`]: each one passed through the faults,
//! then to the wrapped backend.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use dlock_core::backend::{
    renewal_of_parts, Acquire, AcquireRequest, Clock, ClockDrift, CounterStep, DistributedLock,
    Handover, HoldRef, Inspection, Leader, LockRef, LockStatus, OwnerId, Release,
    ReleaseSubscription, Renewal,
};
use dlock_core::{LockError, LockKind};

use super::FaultyBackend;
use crate::fault::{Effect, Op};
use crate::faulty_subscription::FaultySubscription;
use crate::held_step::{HeldStep, OwnedCounterStep, OwnedHold, OwnedRequest};

impl DistributedLock for FaultyBackend {
    fn backend_name(&self) -> &'static str {
        self.shared.inner.backend_name()
    }

    /// Inspection reads the store as it is: no fault is made on it.
    fn inspection(&self) -> Option<&dyn Inspection> {
        self.shared.inner.inspection()
    }

    fn supports(&self, kind: LockKind) -> bool {
        self.shared.inner.supports(kind)
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let copy = OwnedRequest::of(request);
        self.call(
            Op::TryAcquire,
            &[request.lock.name],
            || {
                let copy = copy.clone();
                Some(HeldStep::new(move |store| {
                    let _ = copy.with(|request| store.try_acquire(request));
                }))
            },
            |inner| inner.try_acquire(request),
        )
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        self.call(
            Op::Release,
            &[lock.name],
            || {
                let (name, kind, owner) = (lock.name.to_owned(), lock.kind, owner.clone());
                Some(HeldStep::new(move |store| {
                    let _ = store.release(LockRef::new(&name, kind), &owner);
                }))
            },
            |inner| inner.release(lock, owner),
        )
    }

    fn hands_over(&self, kind: LockKind) -> bool {
        self.shared.inner.hands_over(kind)
    }

    fn keeps_turns(&self) -> bool {
        self.shared.inner.keeps_turns()
    }

    /// A release that hands the lock over meets the faults of [`Op::Release`].
    fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        let next = OwnedRequest::of(successor);
        self.call(
            Op::Release,
            &[lock.name],
            || {
                let (name, kind, owner) = (lock.name.to_owned(), lock.kind, owner.clone());
                let next = next.clone();
                Some(HeldStep::new(move |store| {
                    let lock = LockRef::new(&name, kind);
                    let _ = next.with(|successor| store.release_to(lock, &owner, successor));
                }))
            },
            |inner| inner.release_to(lock, owner, successor),
        )
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        renewal_of_parts(holds.len(), |answered| {
            self.renew_parts(holds, lease, answered)
        })
    }

    /// Faults of the whole call apply to the whole batch (told as one part, after them); a
    /// node's faults to that node's holds alone, each node's part told as it is answered.
    fn renew_parts(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
        answered: &(dyn Fn(&[usize], &[Renewal]) + Sync),
    ) -> Result<(), LockError> {
        let names: Vec<&str> = holds.iter().map(|hold| hold.lock.name).collect();
        let (applied, node_faults) = self.take_effects(Op::Renew, &names);
        let result = if applied.effects.is_empty() {
            self.renew_by_node(holds, lease, &node_faults, answered)
        } else {
            let copies: Vec<OwnedHold> = holds.iter().map(OwnedHold::of).collect();
            self.run(
                Op::Renew,
                applied,
                || {
                    let copies = copies.clone();
                    Some(HeldStep::new(move |store| {
                        let refs: Vec<HoldRef<'_>> = copies.iter().map(OwnedHold::as_ref).collect();
                        let _ = store.renew(&refs, lease);
                    }))
                },
                |_| {
                    renewal_of_parts(holds.len(), |answered| {
                        self.renew_by_node(holds, lease, &node_faults, answered)
                    })
                },
            )
            .map(|found| {
                let all: Vec<usize> = (0..found.len()).collect();
                answered(&all, &found);
            })
        };
        self.shared.answered[Op::Renew.index()].fetch_add(1, Ordering::SeqCst);
        result
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        self.call(
            Op::Status,
            &[lock.name],
            || None,
            |inner| inner.status(lock, owner),
        )
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        self.call(
            Op::ForceUnlock,
            &[lock.name],
            || {
                let (name, kind) = (lock.name.to_owned(), lock.kind);
                Some(HeldStep::new(move |store| {
                    let _ = store.force_unlock(LockRef::new(&name, kind));
                }))
            },
            |inner| inner.force_unlock(lock),
        )
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let (applied, _) = self.take_effects(Op::Subscribe, &[lock.name]);
        let lapses = applied.effects.contains(&Effect::Lapse);
        let inner = self.run(
            Op::Subscribe,
            applied,
            || None,
            |inner| inner.subscribe(lock, owner),
        );
        self.shared.answered[Op::Subscribe.index()].fetch_add(1, Ordering::SeqCst);
        let inner = inner?;
        {
            let mut subscriptions = self.shared.subscriptions.lock();
            let (live, peak) = subscriptions.entry(lock.name.to_owned()).or_default();
            *live += 1;
            *peak = (*peak).max(*live);
        }
        let faulty = self.clone();
        let shared = self.shared.clone();
        let (name, counted) = (lock.name.to_owned(), lock.name.to_owned());
        let subscription = FaultySubscription::new(
            inner,
            lapses,
            move |relay| faulty.message(&name, relay),
            move || {
                if let Some((live, _)) = shared.subscriptions.lock().get_mut(&counted) {
                    *live = live.saturating_sub(1);
                }
            },
        )
        .map_err(|error| LockError::thread_spawn("faulty subscription relay", error))?;
        self.track_relay(subscription.relay());
        Ok(Box::new(subscription))
    }

    fn releases_heard(&self, lock: LockRef<'_>, owner: &OwnerId) -> Option<u64> {
        // What the store announced, whatever the relay then does with it: a message it loses
        // after the waiter subscribed is lost as any other is.
        self.shared.inner.releases_heard(lock, owner)
    }

    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        self.call(
            Op::CancelWait,
            &[lock.name],
            || {
                let (name, kind, owner) = (lock.name.to_owned(), lock.kind, owner.clone());
                Some(HeldStep::new(move |store| {
                    let _ = store.cancel_wait(LockRef::new(&name, kind), &owner, queue_slot);
                }))
            },
            |inner| inner.cancel_wait(lock, owner, queue_slot),
        )
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.shared.inner.clock()
    }

    fn clock_drift(&self) -> ClockDrift {
        self.shared.inner.clock_drift()
    }

    fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        let copy = OwnedCounterStep::of(&step);
        self.call(
            Op::Counter,
            &[step.name()],
            || {
                let copy = copy.clone()?;
                Some(HeldStep::new(move |store| {
                    let _ = store.counter(copy.as_step());
                }))
            },
            |inner| inner.counter(step),
        )
    }

    /// Passed on as it is, without faults.
    fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        self.shared.inner.leader(lock)
    }
}
