//! A multi-lock's steps on PostgreSQL: every acquire (or every release) of the set in one round
//! trip, all or nothing, each answered in its place.

use dlock_core::backend::{
    Acquire, AcquireRequest, DistributedLock, HoldRef, LossReason, OwnerId, Release,
};
use dlock_core::LockError;

use super::codec::{acquire_row, family_of_code, micros, release_of};
use super::statements::Step;
use super::PostgresBackend;
use crate::error::{copy_for_lock, ended_index, step_error, wrong_kind_index};
use crate::pool::{Retry, StepFailure};

impl PostgresBackend {
    /// Every acquire of a multi-lock in one round trip (one alone as a plain step).
    pub(super) fn acquire_batch(
        &self,
        requests: &[AcquireRequest<'_>],
    ) -> Result<Vec<Acquire>, LockError> {
        let mut kinds = Vec::with_capacity(requests.len());
        for request in requests {
            kinds.push(self.check(request.lock)?);
        }
        if requests.len() < 2 {
            return requests
                .iter()
                .map(|request| self.try_acquire(request))
                .collect();
        }
        let names: Vec<&str> = requests.iter().map(|r| r.lock.name).collect();
        let owners: Vec<&str> = requests.iter().map(|r| r.owner.as_str()).collect();
        let waiters: Vec<&str> = requests.iter().map(|r| r.waiter.as_str()).collect();
        let writers: Vec<Option<&str>> = requests
            .iter()
            .map(|r| r.write_hold.map(OwnerId::as_str))
            .collect();
        let leases: Vec<i64> = requests.iter().map(|r| micros(r.lease)).collect();
        let waits: Vec<bool> = requests.iter().map(|r| r.will_wait).collect();
        let slots: Vec<i64> = requests.iter().map(|r| micros(r.queue_slot)).collect();
        let grants: Vec<Option<i64>> = requests
            .iter()
            .map(|r| r.grant.map(|offer| micros(offer.lease)))
            .collect();
        let attempts: Vec<Option<i64>> = requests
            .iter()
            .map(|r| r.grant.map(|offer| offer.attempt as i64))
            .collect();
        let reentries: Vec<bool> = requests.iter().map(|r| r.reentry).collect();
        let sql = self.inner.statements.get(Step::AcquireMany);
        let timeout = self.inner.statement_timeout;
        let result =
            self.inner
                .pool
                .run("acquiring a batch", Retry::OnConnectionFailure, |con, _| {
                    con.query(
                        timeout,
                        sql,
                        &[
                            &kinds,
                            &names,
                            &owners,
                            &waiters,
                            &writers,
                            &leases,
                            &waits,
                            &slots,
                            &grants,
                            &attempts,
                            &reentries,
                            &self.inner.sync,
                        ],
                    )
                });
        let rows = match result {
            Ok(rows) => rows,
            Err(StepFailure::Call(error)) if ended_index(&error).is_some() => {
                // The whole batch was rolled back: the acquire it names found its hold ended
                // once it had the name (see `_unless_ended`). That one is gone; the others go
                // again (each time one fewer).
                let at = ended_index(&error)
                    .and_then(|i| i.checked_sub(1))
                    .filter(|at| *at < requests.len())
                    .ok_or_else(|| LockError::protocol("a batch's ended acquire out of range"))?;
                let rest: Vec<AcquireRequest<'_>> = (0..requests.len())
                    .filter(|i| *i != at)
                    .map(|i| requests[i])
                    .collect();
                let mut found = self.acquire_batch(&rest)?;
                found.insert(
                    at,
                    Acquire::Gone {
                        reason: LossReason::Gone,
                    },
                );
                return Ok(found);
            }
            Err(StepFailure::Call(error)) => {
                // The whole batch was rolled back; the error is about the request it names.
                let at = wrong_kind_index(&error)
                    .and_then(|i| i.checked_sub(1))
                    .and_then(|i| requests.get(i))
                    .map_or(requests[0].lock, |request| request.lock);
                return Err(step_error(
                    error,
                    at,
                    "acquiring a batch",
                    &self.inner.server,
                ));
            }
            Err(StepFailure::Checkout(error)) => return Err(error),
        };
        if rows.len() != requests.len() {
            return Err(LockError::protocol(format!(
                "a batch of {} acquires answered {} results",
                requests.len(),
                rows.len()
            )));
        }
        let mut found = Vec::with_capacity(requests.len());
        for (request, row) in requests.iter().zip(&rows) {
            found
                .push(acquire_row(row, request).map_err(|error| error.on_lock(request.lock.name))?);
        }
        Ok(found)
    }

    /// Every release of a multi-lock in one round trip (one alone as a plain step).
    pub(super) fn release_batch(&self, holds: &[HoldRef<'_>]) -> Vec<Result<Release, LockError>> {
        if holds.len() < 2 {
            return holds
                .iter()
                .map(|hold| self.release(hold.lock, hold.owner))
                .collect();
        }
        let mut kinds = Vec::with_capacity(holds.len());
        for hold in holds {
            match self.check(hold.lock) {
                Ok(kind) => kinds.push(kind),
                Err(error) => {
                    let text = error.to_string();
                    return holds
                        .iter()
                        .map(|other| {
                            Err(copy_for_lock(
                                &LockError::protocol(text.clone()),
                                other.lock.name,
                            ))
                        })
                        .collect();
                }
            }
        }
        let names: Vec<&str> = holds.iter().map(|h| h.lock.name).collect();
        let owners: Vec<&str> = holds.iter().map(|h| h.owner.as_str()).collect();
        let result = self.latched(
            Step::ReleaseMany,
            "releasing a batch",
            |con, sql, request, retry, forget| {
                let rows = con.query(
                    self.inner.statement_timeout,
                    sql,
                    &[
                        &kinds,
                        &names,
                        &owners,
                        &request,
                        &retry,
                        &forget,
                        &self.inner.sync,
                    ],
                )?;
                Ok(rows
                    .first()
                    .and_then(|row| row.try_get::<_, Vec<i16>>(0).ok())
                    .unwrap_or_default())
            },
        );
        match result {
            Ok(codes) if codes.len() == holds.len() => holds
                .iter()
                .zip(codes)
                .map(|(hold, code)| {
                    if code < 0 {
                        Err(LockError::WrongKind {
                            name: hold.lock.name.to_owned(),
                            expected: hold.lock.kind,
                            found: family_of_code(code).to_owned(),
                        })
                    } else {
                        Ok(release_of(code))
                    }
                })
                .collect(),
            Ok(codes) => {
                let error = LockError::protocol(format!(
                    "a batch of {} releases answered {} results",
                    holds.len(),
                    codes.len()
                ));
                holds
                    .iter()
                    .map(|hold| Err(copy_for_lock(&error, hold.lock.name)))
                    .collect()
            }
            Err(failure) => {
                let error = self.failure(failure, holds[0].lock, "releasing a batch");
                holds
                    .iter()
                    .map(|hold| Err(copy_for_lock(&error, hold.lock.name)))
                    .collect()
            }
        }
    }
}
