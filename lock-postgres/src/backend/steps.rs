//! The [`DistributedLock`] steps of [`PostgresBackend`]: each one call of the schema's
//! functions (or one round trip for a batch), its row read into the step's answer.

use std::time::{Duration, Instant};

use dlock_core::backend::{
    Acquire, AcquireRequest, ClientRecord, CounterStep, DistributedLock, Grant, Handover,
    HeldSince, HoldRef, Inspection, Leader, LockRef, LockStatus, OwnerId, Release,
    ReleaseSubscription, Renewal,
};
use dlock_core::{LockError, LockKind};

use tokio_postgres::types::ToSql;

use super::codec::{from_micros, kind_code, micros, one_row, protocol, release_of};
use super::statements::Step;
use super::PostgresBackend;
use crate::keys::{lock_key, waiter_key};
use crate::pool::Retry;

impl DistributedLock for PostgresBackend {
    fn backend_name(&self) -> &'static str {
        "postgres"
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
        let lock = request.lock;
        let kind = self.check(lock)?;
        if lock.kind == LockKind::Election && !request.reentry {
            return self.lead(request);
        }
        let lease = micros(request.lease);
        let slot = micros(request.queue_slot);
        let grant = request.grant.map(|offer| micros(offer.lease));
        let attempt = request.grant.map(|offer| offer.attempt as i64);
        let owner = request.owner.as_str();
        let waiter = request.waiter.as_str();
        let writer = request.write_hold.map(OwnerId::as_str);
        // A waiter on the watchdog's lease that offers to be granted the lock sends a secret
        // with its offer; a grant that brought it back is held without a call (see
        // `grant_proofs`). One on a fixed lease claims its grant, which sets that lease.
        let proven_offer = request
            .grant
            .filter(|_| request.renewed && request.will_wait && !request.reentry)
            .map(|offer| (offer, waiter_key(lock.name, waiter)));
        let proofs = self.inner.listener.proofs();
        if let Some((_, key)) = &proven_offer {
            if let Some(left) = proofs.take(key, owner, Instant::now()) {
                return Ok(Acquire::Acquired(Grant::PLAIN.valid_for(left)));
            }
        }
        let secret = proven_offer
            .as_ref()
            .map(|(offer, key)| proofs.offer(key, offer.attempt, owner, offer.lease));
        let full: [&(dyn ToSql + Sync); 13] = [
            &kind,
            &lock.name,
            &owner,
            &waiter,
            &writer,
            &lease,
            &request.will_wait,
            &slot,
            &grant,
            &attempt,
            &request.reentry,
            &self.inner.sync,
            &secret,
        ];
        // An extend goes to the function, which acts only on a hold the store still has; the
        // one-INSERT step would make an ended hold again.
        let outcome = if lock.kind == LockKind::Reentrant && !request.reentry {
            // A free name is taken with one INSERT; the function decides the rest.
            let free: [&(dyn ToSql + Sync); 5] =
                [&lock.name, &owner, &lease, &self.inner.sync, &waiter];
            let taken = self.first_then(
                "acquiring",
                |_| (Step::TakeFree, free),
                |_| (Step::Acquire, &full),
            );
            match taken.transpose() {
                None => return Ok(Acquire::Acquired(Grant::PLAIN)),
                Some(outcome) => outcome,
            }
        } else {
            self.run_step(
                Step::Acquire,
                "acquiring",
                Retry::OnConnectionFailure,
                &full,
            )
        };
        let acquire = self.acquire_answer(request, "acquiring", outcome)?;
        if !acquire.is_acquired() && !lock.kind.queues_on_store() {
            self.note_refusal(lock, request.waiter);
        }
        if let Some((_, key)) = proven_offer.filter(|_| acquire.is_acquired()) {
            proofs.forget(&key);
        }
        Ok(acquire)
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        let kind = self.check(lock)?;
        if matches!(lock.kind, LockKind::Reentrant | LockKind::Fenced) {
            // A live hold goes with one DELETE; else the function says what happened to it
            // (a retry after a lost reply: released by the first attempt, or lost before). A
            // release that finds no live hold at its first attempt latches that answer under
            // its request id; a release that removed the hold latches nothing.
            let request = super::codec::request_id();
            let no_request = None::<i64>;
            let first_request = Some(request);
            let (name, owner) = (lock.name, owner.as_str());
            let (no_forget, first_time, again) = (None::<i64>, false, true);
            let then = |attempt: u32| -> (Step, [&(dyn ToSql + Sync); 7]) {
                let retried = if attempt > 0 { &again } else { &first_time };
                (
                    Step::Release,
                    [
                        &kind,
                        &name,
                        &owner,
                        &request,
                        retried,
                        &no_forget,
                        &self.inner.sync,
                    ],
                )
            };
            let first = |attempt: u32| -> (Step, [&(dyn ToSql + Sync); 4]) {
                let latch = if attempt > 0 {
                    &no_request
                } else {
                    &first_request
                };
                (Step::DeleteHold, [&name, &owner, &self.inner.sync, latch])
            };
            let rows = self
                .first_then("releasing", first, then)
                .map_err(|failure| self.failure(failure, lock, "releasing"))?;
            let code: i16 = match rows {
                None => 1,
                Some(rows) => rows.first().map_or(0, |row| row.get(0)),
            };
            return Ok(release_of(code));
        }
        let code: i16 = self
            .latched(
                Step::Release,
                "releasing",
                |con, sql, request, retry, forget| {
                    let rows = con.query(
                        self.inner.statement_timeout,
                        sql,
                        &[
                            &kind,
                            &lock.name,
                            &owner.as_str(),
                            &request,
                            &retry,
                            &forget,
                            &self.inner.sync,
                        ],
                    )?;
                    Ok(rows.first().map_or(0, |row| row.get(0)))
                },
            )
            .map_err(|failure| self.failure(failure, lock, "releasing"))?;
        Ok(release_of(code))
    }

    fn hands_over(&self, kind: LockKind) -> bool {
        matches!(kind, LockKind::Reentrant | LockKind::Fair)
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
        self.check(lock)?;
        let lease = micros(successor.lease);
        let code: i16 = self
            .latched(
                Step::HandOver,
                "handing over",
                |con, sql, request, retry, forget| {
                    let rows = con.query(
                        self.inner.statement_timeout,
                        sql,
                        &[
                            &lock.name,
                            &owner.as_str(),
                            &successor.owner.as_str(),
                            &successor.waiter.as_str(),
                            &lease,
                            &request,
                            &retry,
                            &forget,
                            &self.inner.sync,
                        ],
                    )?;
                    Ok(rows.first().map_or(0, |row| row.get(0)))
                },
            )
            .map_err(|failure| self.failure(failure, lock, "handing over"))?;
        Ok(match code {
            2 => Handover::Granted(Grant::PLAIN),
            // Released: another waiter is marked first, and takes the lock once free.
            1 => Handover::Released,
            _ => Handover::NotHeld,
        })
    }

    fn try_acquire_many(&self, requests: &[AcquireRequest<'_>]) -> Result<Vec<Acquire>, LockError> {
        self.acquire_batch(requests)
    }

    fn release_many(&self, holds: &[HoldRef<'_>]) -> Vec<Result<Release, LockError>> {
        self.release_batch(holds)
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        self.renew_all(holds, lease)
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        let kind = self.check(lock)?;
        let rows = self.step(
            lock,
            Step::Status,
            "reading a lock's status",
            Retry::OnConnectionFailure,
            &[&kind, &lock.name, &owner.as_str()],
        )?;
        let row = one_row(rows, "a status")?;
        let locked: bool = row.try_get(0).map_err(protocol)?;
        let mine: bool = row.try_get(1).map_err(protocol)?;
        let remaining: Option<i64> = row.try_get(2).map_err(protocol)?;
        Ok(if locked {
            LockStatus::held(mine, remaining.map(from_micros))
        } else {
            LockStatus::FREE
        })
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        let kind = self.check(lock)?;
        if matches!(lock.kind, LockKind::Semaphore | LockKind::Latch) {
            // Nothing single is held to be ended (a permit is one holder among several).
            return Err(LockError::Unsupported {
                name: lock.name.to_owned(),
                kind: lock.kind,
            });
        }
        let rows = self.step(
            lock,
            Step::ForceUnlock,
            "force-unlocking",
            Retry::Never,
            &[&kind, &lock.name, &self.inner.sync],
        )?;
        one_row(rows, "a force unlock")?
            .try_get(0)
            .map_err(protocol)
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        self.check(lock)?;
        if lock.kind.queues_on_store() {
            // A fair release wakes the queue's head and the one behind it by their own keys, on
            // their clients' channels.
            return self
                .inner
                .listener
                .subscribe_waiter(waiter_key(lock.name, owner.as_str()), owner.as_str());
        }
        if marked_first(lock.kind) {
            // A plain lock's release is told on the channel of the client of the waiter marked
            // first alone; with no waiter marked, on the schema's.
            let subscription = self
                .inner
                .listener
                .subscribe_marked(lock_key(lock.name), owner.as_str())?;
            self.watch_unless_refused(lock, owner)?;
            return Ok(subscription);
        }
        let subscription = self.inner.listener.subscribe(lock_key(lock.name))?;
        self.watch_unless_refused(lock, owner)?;
        Ok(subscription)
    }

    fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        let lock = LockRef::new(step.name(), step.kind());
        self.check(lock)?;
        let (op, value, retry) = match step {
            CounterStep::TrySetPermits { permits, .. } => {
                (b'P', permits, Retry::OnConnectionFailure)
            }
            // Adding or counting down twice would count twice: never sent again.
            CounterStep::AddPermits { permits, .. } => (b'A', permits, Retry::Never),
            CounterStep::AvailablePermits { .. } => (b'a', 0, Retry::OnConnectionFailure),
            CounterStep::TrySetCount { count, .. } => (b'C', count, Retry::OnConnectionFailure),
            CounterStep::CountDown { .. } => (b'D', 0, Retry::Never),
            CounterStep::Count { .. } => (b'c', 0, Retry::OnConnectionFailure),
            _ => {
                return Err(LockError::Unsupported {
                    name: lock.name.to_owned(),
                    kind: lock.kind,
                })
            }
        };
        let value = i64::try_from(value).map_err(|_| {
            LockError::invalid("count", "a store counts up to 2^63 - 1").on_lock(lock.name)
        })?;
        let op = op as i8;
        let answer: i64 = if retry == Retry::Never {
            let rows = self.step(
                lock,
                Step::Counter,
                "counting",
                retry,
                &[
                    &op,
                    &lock.name,
                    &value,
                    &0i64,
                    &false,
                    &None::<i64>,
                    &self.inner.sync,
                ],
            )?;
            one_row(rows, "a counter step")?
                .try_get(0)
                .map_err(protocol)?
        } else {
            // Sent again after a failed connection: a set-once step then replays its first
            // attempt's answer by its request id, and reads are harmless to repeat.
            self.latched(
                Step::Counter,
                "counting",
                |con, sql, request, retry, forget| {
                    let rows = con.query(
                        self.inner.statement_timeout,
                        sql,
                        &[
                            &op,
                            &lock.name,
                            &value,
                            &request,
                            &retry,
                            &forget,
                            &self.inner.sync,
                        ],
                    )?;
                    Ok(rows.first().map_or(0, |row| row.get(0)))
                },
            )
            .map_err(|failure| self.failure(failure, lock, "counting"))?
        };
        u64::try_from(answer).map_err(|_| {
            LockError::protocol(format!("a counter step answered {answer}")).on_lock(lock.name)
        })
    }

    fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        if lock.kind != LockKind::Election {
            return Err(LockError::Unsupported {
                name: lock.name.to_owned(),
                kind: lock.kind,
            });
        }
        self.check(lock)?;
        let rows = self.step(
            lock,
            Step::Leader,
            "reading the leader",
            Retry::OnConnectionFailure,
            &[&lock.name],
        )?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let candidate: String = row.try_get(0).map_err(protocol)?;
        let token: i64 = row.try_get(1).map_err(protocol)?;
        let remaining: Option<i64> = row.try_get(2).map_err(protocol)?;
        Ok(Some(Leader::new(
            candidate,
            u64::try_from(token).unwrap_or(0),
            remaining.map(from_micros),
        )))
    }

    fn releases_heard(&self, lock: LockRef<'_>, owner: &OwnerId) -> Option<u64> {
        let listener = &self.inner.listener;
        if lock.kind.queues_on_store() {
            let key = || waiter_key(lock.name, owner.as_str());
            return listener.heard(key, Some(owner.as_str()));
        }
        // A plain lock's releases, told on either channel, count under its key.
        let channel = marked_first(lock.kind).then_some(owner.as_str());
        listener.heard(|| lock_key(lock.name), channel)
    }

    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        if !lock.kind.waits_on_store() {
            return Ok(());
        }
        self.check(lock)?;
        let (slot, kind) = (micros(queue_slot), kind_code(lock)?);
        self.step(
            lock,
            Step::CancelWait,
            "leaving a lock's queue of waiters",
            Retry::OnConnectionFailure,
            &[&lock.name, &owner.as_str(), &slot, &self.inner.sync, &kind],
        )
        .map(drop)
    }
}

/// Whether a release is told on the channel of the client of `kind`'s waiter marked first, alone
/// (`_announce_free_e`): the plain lock's, whose free lock goes to that waiter, where waking
/// every process's waiters would have each but that one refused.
fn marked_first(kind: LockKind) -> bool {
    matches!(kind, LockKind::Reentrant | LockKind::Fenced)
}

impl PostgresBackend {
    /// A release announces itself only when the lock was marked contended (or, a plain lock,
    /// while a waiter is marked): an acquire that found it held marked it; a subscription
    /// without one (not the client's way) marks it.
    fn watch_unless_refused(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<(), LockError> {
        if !self.just_refused(lock, owner) {
            self.step(
                lock,
                Step::Watch,
                "marking a lock watched",
                Retry::OnConnectionFailure,
                &[&lock.name],
            )?;
        }
        Ok(())
    }

    /// An election's acquire: the leadership, with the candidate id kept for everyone to read.
    fn lead(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        let lease = micros(request.lease);
        let candidate = request.value.unwrap_or("");
        let outcome = self.run_step(
            Step::AcquireLeader,
            "campaigning",
            Retry::OnConnectionFailure,
            &[
                &lock.name,
                &request.owner.as_str(),
                &candidate,
                &lease,
                &self.inner.sync,
            ],
        );
        let acquire = self.acquire_answer(request, "campaigning", outcome)?;
        if !acquire.is_acquired() {
            self.note_refusal(lock, request.waiter);
        }
        Ok(acquire)
    }
}
