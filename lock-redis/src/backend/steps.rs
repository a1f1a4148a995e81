//! The [`DistributedLock`] steps of [`RedisBackend`]: each one script (or one pipeline of
//! them) about a lock, its reply read into the step's answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::backend::{
    instant_after, renewal_of_parts, Acquire, AcquireRequest, ClientRecord, CounterStep,
    DistributedLock, Grant, Handover, HeldSince, HoldRef, Inspection, Leader, LockRef, LockStatus,
    OwnerId, Release, ReleaseSubscription, Renewal, Signal,
};
use dlock_core::{LockError, LockKind};
use redis::{RedisError, Value};

use super::replies::{acquire_reply, check_kind, marks_ahead, pttl, HANDED_OVER};
use super::{Durability, RedisBackend, Store};
use crate::commands::Retry;
use crate::layout::{self, ScriptCall};
use crate::pubsub::Joined;
use crate::replica_sync::Ack;
use crate::request_id;

impl DistributedLock for RedisBackend {
    fn backend_name(&self) -> &'static str {
        "redis"
    }

    fn keeps_client_records(&self) -> bool {
        true
    }

    fn inspection(&self) -> Option<&dyn Inspection> {
        Some(self)
    }

    fn publish_client(
        &self,
        client: &ClientRecord,
        holds: &[HeldSince<'_>],
        ttl: Duration,
    ) -> Result<(), LockError> {
        self.publish_record(client, holds, ttl)
    }

    fn supports(&self, kind: LockKind) -> bool {
        matches!(
            kind,
            LockKind::Reentrant
                | LockKind::Fair
                | LockKind::Read
                | LockKind::Write
                | LockKind::Fenced
                | LockKind::Semaphore
                | LockKind::Latch
                | LockKind::Election
        )
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        check_kind(self, request.lock)?;
        if request.reentry && request.lock.kind == LockKind::Latch {
            // Nothing is ever held on a latch: there is no hold to extend.
            return Ok(Acquire::Gone {
                reason: dlock_core::backend::LossReason::Gone,
            });
        }
        let (name, waiter) = (request.lock.name, request.waiter.as_str());
        let in_turn = waits_in_turn(request);
        let heard = in_turn
            .then(|| self.releases_heard(request.lock, request.waiter))
            .flatten();
        let places = &self.inner.places;
        if let Some(heard) = heard {
            if places.refuses(name, waiter, heard, three_quarters(request.queue_slot)) {
                return Ok(Acquire::Held {
                    remaining_lease: None,
                });
            }
        }
        let sent_at = Instant::now();
        let call = layout::acquire(request);
        let (reply, ack): (Value, Ack) = self.run_one(
            request.lock,
            &call,
            Retry::OnDroppedConnection,
            Durability::Replicated,
        )?;
        let ahead = marks_ahead(&reply);
        let acquire = acquire_reply(reply).map_err(|error| error.on_lock(name))?;
        match (heard, ahead) {
            (Some(heard), Some(ahead)) => {
                let mark_lasts = instant_after(sent_at, request.queue_slot);
                places.told(name, waiter, heard, ahead, mark_lasts);
            }
            _ if in_turn => places.forget(name, waiter),
            _ => {}
        }
        if acquire.is_acquired() {
            self.check_replicated(&[request], ack)?;
        }
        Ok(acquire)
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        check_kind(self, lock)?;
        if lock.kind == LockKind::Latch {
            // Nothing is ever held on a latch.
            return Ok(Release::NotHeld);
        }
        let call = self.release_call(lock, owner);
        let (released, ack): (Value, Ack) = self.run_one(
            lock,
            &call,
            Retry::OnAnyConnectionError,
            Durability::Replicated,
        )?;
        let release = layout::release_outcome(&released);
        if release.is_released() {
            self.note_release_ack("a release", &ack);
        }
        Ok(release)
    }

    fn hands_over(&self, kind: LockKind) -> bool {
        matches!(
            kind,
            LockKind::Reentrant | LockKind::Fair | LockKind::Semaphore
        )
    }

    /// Its scripts mark waiters and give a free lock to the first (`preamble/turns.lua`).
    fn keeps_turns(&self) -> bool {
        true
    }

    fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        if !matches!(lock.kind, LockKind::Reentrant | LockKind::Semaphore) {
            return self.release(lock, owner).map(Handover::from);
        }
        let request = request_id::next();
        let call = layout::hand_over(lock, owner, successor, &request, self.inner.latch_lifetime);
        // Retried on any connection error: the latch makes a second attempt replay the first.
        let (handed, ack): (Option<i64>, Ack) = self.run_one(
            lock,
            &call,
            Retry::OnAnyConnectionError,
            Durability::Replicated,
        )?;
        Ok(match handed {
            // The successor's hold is an acquire: one no replica acknowledged is undone (the
            // undo announces the lock free) and the successor tries again as usual.
            Some(HANDED_OVER) => match self.check_replicated(&[successor], ack) {
                Ok(()) => Handover::Granted(Grant::PLAIN),
                Err(error) => {
                    tracing::warn!(lock = lock.name, %error, "a hand-off was not replicated and was undone");
                    Handover::Released
                }
            },
            // Released: another waiter is marked first, and takes the lock once free.
            Some(1) => Handover::Released,
            _ => Handover::NotHeld,
        })
    }

    fn try_acquire_many(&self, requests: &[AcquireRequest<'_>]) -> Result<Vec<Acquire>, LockError> {
        for request in requests {
            check_kind(self, request.lock)?;
        }
        if requests.len() < 2 {
            return requests
                .iter()
                .map(|request| self.try_acquire(request))
                .collect();
        }
        // Every attempt in one pipeline: one round trip, whatever their number. Attempting twice
        // after a dropped connection is harmless (an acquire is retried the same way).
        let calls: Vec<ScriptCall> = requests.iter().map(layout::acquire).collect();
        let batch = self.run_batch(
            "a batch of acquires",
            &calls,
            Retry::OnDroppedConnection,
            Durability::Replicated,
        )?;
        let mut outcomes = Vec::with_capacity(requests.len());
        let mut first_error = None;
        for (request, reply) in requests.iter().zip(batch.replies) {
            let outcome = match reply {
                Value::ServerError(error) => {
                    Err(self.script_error(RedisError::from(error), request.lock, "acquire"))
                }
                reply => acquire_reply(reply).map_err(|error| error.on_lock(request.lock.name)),
            };
            match outcome {
                Ok(acquire) => outcomes.push((request, acquire)),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        let acquired: Vec<&AcquireRequest<'_>> = outcomes
            .iter()
            .filter(|(_, acquire)| acquire.is_acquired())
            .map(|(request, _)| *request)
            .collect();
        if let Some(error) = first_error {
            // All or nothing: what this batch took is given back before the error is told.
            let _ = self.check_replicated(
                &acquired,
                Ack::Refused("another acquire of the batch failed".into()),
            );
            return Err(error);
        }
        self.check_replicated(&acquired, batch.ack)?;
        Ok(outcomes.into_iter().map(|(_, acquire)| acquire).collect())
    }

    fn release_many(&self, holds: &[HoldRef<'_>]) -> Vec<Result<Release, LockError>> {
        if holds.len() < 2 {
            return holds
                .iter()
                .map(|hold| self.release(hold.lock, hold.owner))
                .collect();
        }
        if let Some(hold) = holds.iter().find(|hold| !self.supports(hold.lock.kind)) {
            let error = || LockError::Unsupported {
                name: hold.lock.name.to_owned(),
                kind: hold.lock.kind,
            };
            return holds.iter().map(|_| Err(error())).collect();
        }
        // One pipeline of latched releases: a retry after a lost reply replays each one.
        let calls: Vec<ScriptCall> = holds
            .iter()
            .map(|hold| self.release_call(hold.lock, hold.owner))
            .collect();
        let batch = match self.run_batch(
            "a batch of releases",
            &calls,
            Retry::OnAnyConnectionError,
            Durability::Replicated,
        ) {
            Ok(batch) => batch,
            Err(error) => {
                // Every hold gets the batch's error, typed as it is (a `Config`, `Protocol` or
                // `NotReplicated` stays one): the first the error itself, the others copies.
                let Some((first, others)) = holds.split_first() else {
                    return Vec::new();
                };
                let copies: Vec<Result<Release, LockError>> = others
                    .iter()
                    .map(|hold| Err(crate::error::copy_for_lock(&error, hold.lock.name)))
                    .collect();
                return std::iter::once(Err(error.on_lock(first.lock.name)))
                    .chain(copies)
                    .collect();
            }
        };
        self.note_release_ack("a batch of releases", &batch.ack);
        holds
            .iter()
            .zip(batch.replies)
            .map(|(hold, reply)| match reply {
                Value::ServerError(error) => {
                    Err(self.script_error(RedisError::from(error), hold.lock, "release"))
                }
                reply => Ok(layout::release_outcome(&reply)),
            })
            .collect()
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        renewal_of_parts(holds.len(), |answered| {
            self.renew_holds(holds, lease, answered)
        })
    }

    fn renew_parts(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
        answered: &(dyn Fn(&[usize], &[Renewal]) + Sync),
    ) -> Result<(), LockError> {
        self.renew_holds(holds, lease, answered)
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        check_kind(self, lock)?;
        if lock.kind == LockKind::Latch {
            // Nothing is held on a latch: it is locked while its count is above zero.
            let count = self.counter(CounterStep::Count { name: lock.name })?;
            return Ok(if count > 0 {
                LockStatus::held(false, None)
            } else {
                LockStatus::FREE
            });
        }
        let call = layout::status(lock, owner);
        let ((held, mine, ttl), _): ((i64, i64, i64), Ack) = self.run_one(
            lock,
            &call,
            Retry::OnDroppedConnection,
            Durability::MasterOnly,
        )?;
        Ok(if held == 1 {
            LockStatus::held(mine == 1, pttl(ttl))
        } else {
            LockStatus::FREE
        })
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        check_kind(self, lock)?;
        if matches!(lock.kind, LockKind::Semaphore | LockKind::Latch) {
            return Err(LockError::Unsupported {
                name: lock.name.to_owned(),
                kind: lock.kind,
            });
        }
        let (deleted, ack): (i64, Ack) = self.run_one(
            lock,
            &layout::force_unlock(lock),
            Retry::Never,
            Durability::Replicated,
        )?;
        if deleted == 1 {
            self.note_release_ack("a force unlock", &ack);
        }
        Ok(deleted == 1)
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        check_kind(self, lock)?;
        let subscribe = |channel: String, forward: Option<Arc<Signal>>| match &self.inner.store {
            Store::Server { pubsub, .. } => pubsub.subscribe_with(channel, forward, None),
            Store::Cluster(cluster) => cluster.pubsub.subscribe_with(channel, forward),
        };
        let own = subscribe(layout::channel(lock, owner), None);
        let joined = own.and_then(|own| match layout::also_wakes(lock) {
            Some(channel) => {
                let also = subscribe(channel, Some(own.signal().clone()))?;
                Ok(Box::new(Joined { own, also }) as Box<dyn ReleaseSubscription>)
            }
            None => Ok(own),
        });
        joined.map_err(|error| error.on_lock(lock.name))
    }

    fn releases_heard(&self, lock: LockRef<'_>, owner: &OwnerId) -> Option<u64> {
        // On a cluster a channel may move between nodes: its waiters always try again.
        let Store::Server { pubsub, .. } = &self.inner.store else {
            return None;
        };
        pubsub.heard(|| {
            let own = layout::channel(lock, owner);
            std::iter::once(own)
                .chain(layout::also_wakes(lock))
                .collect()
        })
    }

    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        check_kind(self, lock)?;
        self.inner.places.forget(lock.name, owner.as_str());
        match layout::cancel_wait(lock, owner, queue_slot) {
            Some(call) => self
                .run_one::<i64>(
                    lock,
                    &call,
                    Retry::OnDroppedConnection,
                    Durability::MasterOnly,
                )
                .map(drop),
            None => Ok(()),
        }
    }

    fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        let lock = LockRef::new(step.name(), step.kind());
        check_kind(self, lock)?;
        let request = request_id::next();
        let call = layout::counter(step, &request, self.inner.latch_lifetime).ok_or_else(|| {
            LockError::Unsupported {
                name: lock.name.to_owned(),
                kind: lock.kind,
            }
        })?;
        // Reads are harmless to repeat after a dropped connection, and "set if unset" replays
        // its first attempt's answer from its latch; adding and counting down are not sent
        // again. Changes wait for the replicas as a lock step does.
        let (retry, durability) = match step {
            CounterStep::AvailablePermits { .. } | CounterStep::Count { .. } => {
                (Retry::OnDroppedConnection, Durability::MasterOnly)
            }
            CounterStep::TrySetPermits { .. } | CounterStep::TrySetCount { .. } => {
                (Retry::OnDroppedConnection, Durability::Replicated)
            }
            _ => (Retry::Never, Durability::Replicated),
        };
        let (answer, ack): (i64, Ack) = self.run_one(lock, &call, retry, durability)?;
        self.note_release_ack(call.script.name, &ack);
        Ok(u64::try_from(answer).unwrap_or(0))
    }

    fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        check_kind(self, lock)?;
        if lock.kind != LockKind::Election {
            return Err(LockError::Unsupported {
                name: lock.name.to_owned(),
                kind: lock.kind,
            });
        }
        let (reply, _): (Option<(String, i64, i64)>, Ack) = self.run_one(
            lock,
            &layout::leader(lock.name),
            Retry::OnDroppedConnection,
            Durability::MasterOnly,
        )?;
        Ok(reply.map(|(candidate, token, ttl)| {
            Leader::new(candidate, u64::try_from(token).unwrap_or(0), pttl(ttl))
        }))
    }
}

/// Three quarters of `slot`: how long more a waiter's mark must live for its try to be refused
/// with no call (it tries again within half a slot). Never overflows.
fn three_quarters(slot: Duration) -> Duration {
    slot - slot / 4
}

/// Whether `request` is a plain lock's waiter's try that keeps its turn on the store (see
/// `places.rs`): it will wait, takes no hold it has, and its mark lives a slot.
fn waits_in_turn(request: &AcquireRequest<'_>) -> bool {
    matches!(request.lock.kind, LockKind::Reentrant | LockKind::Fenced)
        && request.will_wait
        && !request.reentry
        && !request.queue_slot.is_zero()
}
