//! Several steps at once, a multi-lock's round and its release: the first tries of the plain
//! and fenced locks of distinct names go in one transaction, each attempt nested in the success
//! branch of the one before (one by one, stopping at the first refused, as the default makes
//! them); their releases go in one transaction, each nested in it. A round costs one round trip
//! whatever its size, and so does its release; other kinds' steps are made one by one.
//!
//! etcd evaluates every nested transaction's comparisons against the store as it was before
//! the whole transaction, so two attempts on one name in one transaction could both be
//! granted: a step whose name is already in the transaction is made on its own, after it.

use std::collections::HashSet;
use std::time::Instant;

use dlock_core::backend::{Acquire, AcquireRequest, HoldRef, Release};
use dlock_core::{LockError, LockKind};

use crate::backend::{unknown, Inner};
use crate::holds::{hold_id, Creating};
use crate::leases::{Granted, SessionKey};
use crate::steps::acquire::Marking;
use crate::steps::over::Over;
use crate::steps::release::RELEASE_SENDS;
use crate::transport::Fail;
use crate::wire::{nested, TxnAnswer, OPS_PER_TXN};

/// Attempts in one transaction at most, each nested in the one before: etcd refuses a
/// transaction of more than 128 operations to a list, and counts a nested transaction's against
/// what its parents leave; and an answer nested deeper would pass the JSON parser's limit.
const PER_TXN: usize = 16;

/// One attempt of a transaction of several, as it was sent.
struct Attempt<'a> {
    at: usize,
    key: Vec<u8>,
    over: Over,
    made: (Granted, Option<SessionKey>),
    deadline: Instant,
    creating: Creating<'a>,
}

impl Inner {
    /// [`DistributedLock::try_acquire_many`](dlock_core::backend::DistributedLock::try_acquire_many):
    /// the attempts that go together first, then the others in order while none is refused
    /// (those after a refusal are not tried, and said held with no known lease). If one fails,
    /// what the others took is given back before the error is told.
    pub(crate) fn acquire_many(
        &self,
        requests: &[AcquireRequest<'_>],
    ) -> Result<Vec<Acquire>, LockError> {
        let mut found: Vec<Option<Acquire>> = vec![None; requests.len()];
        let mut names = HashSet::new();
        let together: Vec<usize> = (0..requests.len())
            .filter(|at| {
                let request = &requests[*at];
                matches!(request.lock.kind, LockKind::Reentrant | LockKind::Fenced)
                    && !request.reentry
                    && names.insert(request.lock.name)
            })
            .collect();
        if together.len() > 1 {
            for chunk in together.chunks(PER_TXN) {
                if let Err(error) = self.try_together(requests, chunk, &mut found) {
                    self.give_back(requests, &found);
                    return Err(error);
                }
                let taken = |at: &usize| found[*at].as_ref().is_some_and(Acquire::is_acquired);
                if !chunk.iter().all(taken) {
                    break;
                }
            }
        }
        for (at, request) in requests.iter().enumerate() {
            if found[at].is_some() {
                continue;
            }
            if found.iter().flatten().any(|found| !found.is_acquired()) {
                // One is refused: the rest are not tried (as the default's), and said held.
                found[at] = Some(Acquire::Held {
                    remaining_lease: None,
                });
                continue;
            }
            match self.acquire(request) {
                Ok(acquire) => found[at] = Some(acquire),
                Err(error) => {
                    self.give_back(requests, &found);
                    return Err(error.on_lock(request.lock.name));
                }
            }
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// The attempts `chunk` (positions in `requests`) in one transaction, each nested in the
    /// success branch of the one before, so that those after a refusal are not made (as one
    /// by one, stopping at the first refused). What each found goes to `found`; `None` for one
    /// not made, or to be made again on its own (its try met only over holds that changed
    /// meanwhile, or a lease etcd no longer had).
    fn try_together<'a>(
        &'a self,
        requests: &[AcquireRequest<'_>],
        chunk: &[usize],
        found: &mut [Option<Acquire>],
    ) -> Result<(), LockError> {
        let mut attempts: Vec<Attempt<'a>> = Vec::with_capacity(chunk.len());
        let mut branches = Vec::with_capacity(chunk.len());
        for &at in chunk {
            match self.prepare(&requests[at], at) {
                Ok((attempt, branch)) => {
                    attempts.push(attempt);
                    branches.push(branch);
                }
                Err(fail) => {
                    self.drop_all(&attempts);
                    return Err(fail.into());
                }
            }
        }
        // As many as etcd's limit on operations takes (a name's over holds add to an
        // attempt's); the rest are made on their own.
        let mut room = OPS_PER_TXN;
        let fit = branches
            .iter()
            .take_while(|[compare, success, failure]| {
                let ops = compare.len().max(success.len() + 1).max(failure.len());
                room = room.saturating_sub(ops);
                room > 0
            })
            .count()
            .max(1);
        self.drop_all(&attempts.split_off(fit));
        branches.truncate(fit);
        // Where, in each attempt's answer, the next one's is.
        let mut next_at = vec![0; branches.len()];
        let mut next = None;
        let mut first = None;
        for (position, [compare, mut success, failure]) in branches.into_iter().enumerate().rev() {
            next_at[position] = success.len();
            success.extend(next.take());
            if position == 0 {
                first = Some([compare, success, failure]);
            } else {
                next = Some(nested(compare, success, failure));
            }
        }
        let Some([compare, success, failure]) = first else {
            return Ok(());
        };
        let answer = match self.write(compare, success, failure) {
            Ok(answer) => answer,
            // A put's lease is checked before anything is written: nothing was. Each attempt
            // is made on its own, which tells whose lease it was and asks for a new one.
            Err(Fail::LeaseNotFound) => {
                self.drop_all(&attempts);
                return Ok(());
            }
            Err(fail) => {
                self.not_told(requests, &attempts, unknown(&fail));
                return Err(fail.into());
            }
        };
        let mut answers = vec![answer];
        let mut first_error = None;
        while let Some(last) = answers.last().filter(|last| last.succeeded) {
            let position = answers.len() - 1;
            if position + 1 == attempts.len() {
                break;
            }
            match last.nested(next_at[position]) {
                Ok(next) => answers.push(next),
                Err(error) => {
                    // What the store did with the rest is not told: as if its answer had been
                    // lost.
                    self.not_told(requests, &attempts[position + 1..], true);
                    first_error = Some(error);
                    break;
                }
            }
        }
        let told = answers.len();
        if first_error.is_none() {
            // Not made: after a refusal.
            self.drop_all(&attempts[told..]);
        }
        for (attempt, answer) in attempts.into_iter().zip(answers) {
            let at = attempt.at;
            let request = &requests[at];
            match self.attempt_found(request, attempt, &answer) {
                Ok(acquire) => found[at] = acquire,
                Err(fail) => {
                    first_error.get_or_insert(LockError::from(fail).on_lock(request.lock.name));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// One attempt's lease, its over holds and its transaction's branches.
    fn prepare<'a>(
        &'a self,
        request: &AcquireRequest<'_>,
        at: usize,
    ) -> Result<(Attempt<'a>, [Vec<crate::wire::Json>; 3]), Fail> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let key = keys.hold(lock, request.owner);
        let over = self.over(lock.name)?;
        let (lease, session) = self.leases.lease_for(request.owner, request.lease)?;
        let [mut compare, success, failure] =
            self.exclusive_try(request, &keys, &key, &over, lease);
        if let Err(fail) = self.gated(&mut compare, lease, session.as_ref()) {
            self.drop_own(lease, session.as_ref());
            return Err(fail);
        }
        let attempt = Attempt {
            at,
            creating: self.holds.creating(&key),
            key,
            over,
            made: (lease, session),
            deadline: Instant::now() + request.lease,
        };
        Ok((attempt, [compare, success, failure]))
    }

    /// What one attempt found, from its nested transaction's answer: granted (the hold is
    /// remembered, as a single attempt's), refused, or `None` to be made again on its own.
    fn attempt_found(
        &self,
        request: &AcquireRequest<'_>,
        attempt: Attempt<'_>,
        answer: &TxnAnswer,
    ) -> Result<Option<Acquire>, Fail> {
        let lock = request.lock;
        let (lease, session) = attempt.made;
        if answer.succeeded {
            attempt.over.done(self);
            // The waiter's mark went with the take.
            self.turns
                .forget(&self.keys(lock.name).lock_waiter(request.waiter));
            let made = (lease, session);
            self.remember(
                lock,
                request.owner,
                attempt.key,
                answer.revision,
                made,
                attempt.deadline,
            );
            return Ok(Some(self.granted(lock.kind, answer.revision)));
        }
        drop(attempt.creating);
        let refused = self.exclusive_refused(
            request,
            &attempt.over,
            answer,
            (lease, session.as_ref()),
            Marking {
                after: None,
                made: false,
            },
        );
        match &refused {
            Ok(Some(acquire)) if acquire.is_acquired() => {}
            Err(fail) if unknown(fail) => {}
            _ => self.drop_own(lease, session.as_ref()),
        }
        refused
    }

    /// Leases of attempts not sent go back to be used again.
    fn drop_all(&self, attempts: &[Attempt<'_>]) {
        for attempt in attempts {
            self.drop_own(attempt.made.0, attempt.made.1.as_ref());
        }
    }

    /// After a transaction of several failed: if it `may_have_run`, each attempt's hold may be
    /// on the store, and is asked about when next met; else nothing was made.
    fn not_told(
        &self,
        requests: &[AcquireRequest<'_>],
        attempts: &[Attempt<'_>],
        may_have_run: bool,
    ) {
        if !may_have_run {
            self.drop_all(attempts);
            return;
        }
        for attempt in attempts {
            let request = &requests[attempt.at];
            let made = (attempt.made.0, attempt.made.1.clone());
            self.remember_unknown(
                request.lock,
                request.owner,
                attempt.key.clone(),
                made,
                attempt.deadline,
            );
        }
    }

    /// Releases what `found` says was taken (the attempts made before one failed).
    fn give_back(&self, requests: &[AcquireRequest<'_>], found: &[Option<Acquire>]) {
        let taken = requests.iter().zip(found).filter(|(request, found)| {
            !request.reentry && found.as_ref().is_some_and(Acquire::is_acquired)
        });
        for (request, _) in taken {
            if let Err(error) = self.release(request.lock, request.owner) {
                tracing::warn!(lock = request.lock.name, %error, "dlock: giving back an attempt of a failed batch failed; its lease will end it");
            }
        }
    }

    /// [`DistributedLock::release_many`](dlock_core::backend::DistributedLock::release_many):
    /// the releases that go together in transactions of several, the others one by one.
    pub(crate) fn release_many(&self, holds: &[HoldRef<'_>]) -> Vec<Result<Release, LockError>> {
        let mut released: Vec<Option<Result<Release, LockError>>> =
            (0..holds.len()).map(|_| None).collect();
        let mut names = HashSet::new();
        let together: Vec<usize> = (0..holds.len())
            .filter(|at| {
                let hold = &holds[*at];
                matches!(hold.lock.kind, LockKind::Reentrant | LockKind::Fenced)
                    && names.insert(hold.lock.name)
            })
            .collect();
        if together.len() > 1 {
            for chunk in together.chunks(PER_TXN) {
                self.release_together(holds, chunk, &mut released);
            }
        }
        holds
            .iter()
            .zip(released)
            .map(|(hold, released)| {
                released.unwrap_or_else(|| {
                    self.release(hold.lock, hold.owner)
                        .map_err(|error| error.on_lock(hold.lock.name))
                })
            })
            .collect()
    }

    /// The releases `chunk` (positions in `holds`) in one transaction, sent again once, made
    /// anew, if its reply was lost (as a release alone is). What each did goes to `released`;
    /// left `None` for one to be made alone (the transaction failed, not by a lost reply).
    fn release_together(
        &self,
        holds: &[HoldRef<'_>],
        chunk: &[usize],
        released: &mut [Option<Result<Release, LockError>>],
    ) {
        for send in 1..=RELEASE_SENDS {
            let mut steps = Vec::new();
            let mut txns = Vec::new();
            for &at in chunk {
                if released[at].is_some() {
                    continue;
                }
                let hold = &holds[at];
                let id = hold_id(hold.lock, hold.owner);
                match self.release_step(hold.lock, hold.owner, &id, send) {
                    Ok(Some(step)) => {
                        let [mine, success, failure] = step.branches;
                        txns.push(nested(mine, success, failure));
                        steps.push((at, id, step.over, step.ended));
                    }
                    Ok(None) => released[at] = Some(Ok(Release::NotHeld)),
                    Err(error) => released[at] = Some(Err(error.on_lock(hold.lock.name))),
                }
            }
            if steps.is_empty() {
                return;
            }
            let answer = match self.write(Vec::new(), txns, Vec::new()) {
                Ok(answer) => answer,
                Err(fail) if unknown(&fail) && send < RELEASE_SENDS => continue,
                Err(fail) if unknown(&fail) => {
                    let error = LockError::from(fail);
                    for (at, id, ..) in &steps {
                        self.released_unknown(id);
                        let name = holds[*at].lock.name;
                        released[*at] = Some(Err(LockError::unavailable(
                            format!("{name:?}: {error}"),
                            std::io::Error::other(error.to_string()),
                        )));
                    }
                    return;
                }
                // Nothing ran: each is made alone, and tells its own error.
                Err(_) => return,
            };
            for (position, (at, id, over, ended)) in steps.iter().enumerate() {
                released[*at] = Some(match answer.nested(position) {
                    Ok(told) => Ok(self.release_told(id, over, *ended, told.succeeded)),
                    Err(error) => {
                        self.released_unknown(id);
                        Err(error.on_lock(holds[*at].lock.name))
                    }
                });
            }
            return;
        }
    }
}
