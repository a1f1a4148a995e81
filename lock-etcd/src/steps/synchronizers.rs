//! Semaphores, latches and elections' own steps: permits taken against the permits set, the
//! counters, and the leader's record.
//!
//! A semaphore's permits are `sem/total`; each permit held is a key `sem/p/<permit id>` bound
//! to its holder's lease, so a dead holder's permit comes back when its lease ends, by etcd
//! alone. Available = total − permits held. A step that reads a count and writes it back
//! compares the revisions it read, and reads again if another client came in between. A
//! set-once step (`try_set_permits`, `try_set_count`) is one transaction that keeps its
//! answer under its request's id, so one sent again after its reply was lost answers as its
//! first run did.

use std::time::{Duration, Instant};

use dlock_core::backend::{Acquire, AcquireRequest, CounterStep, Leader, LockRef, LossReason};
use dlock_core::{LockError, LockKind, MAX_COUNT};

use crate::backend::{unknown, Inner};
use crate::keys::{Family, NameKeys};
use crate::steps::acquire::{busy, CONFLICT_RETRIES};
use crate::steps::over::Over;
use crate::wire::{
    delete, empty, first_created, modified_at, modified_before, nested, put, range, Json, Kv, Span,
    TxnAnswer,
};

/// How long a set-once step's answer is kept for a copy of it sent again.
const ANSWER_KEPT: Duration = Duration::from_secs(600);

impl Inner {
    /// Reads the name's first live key (for its kind), `extra` spans, and checks the kind.
    fn look(
        &self,
        lock: LockRef<'_>,
        keys: &NameKeys,
        over: &Over,
        extra: &[Json],
    ) -> Result<TxnAnswer, LockError> {
        let mut ops = vec![first_created(&keys.all(), over.room())];
        ops.extend_from_slice(extra);
        let answer = self.read(ops)?;
        let first = over.live(answer.kvs(0)?).into_iter().next();
        self.check_kind(lock, keys, first.as_ref())?;
        Ok(answer)
    }

    pub(crate) fn take_permit(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let key = keys.hold(lock, request.owner);
        let others = keys.others(Family::Semaphore);
        let tombstone = keys.ended(request.owner.as_str());
        for _ in 0..CONFLICT_RETRIES {
            let over = self.over(lock.name)?;
            let answer = self.look(
                lock,
                &keys,
                &over,
                &[
                    range(&Span::key(&keys.total())),
                    first_created(&keys.permits(), 0),
                    range(&Span::key(&tombstone)),
                ],
            )?;
            if !answer.kvs(3)?.is_empty() {
                return Ok(Acquire::Gone {
                    reason: LossReason::ForceUnlocked,
                });
            }
            let total = answer.kvs(1)?.into_iter().next();
            let held = over.live(answer.kvs(2)?);
            let (permits, total_revision) = total
                .as_ref()
                .map_or((0, 0), |t| (count(t), t.mod_revision));
            if held.iter().any(|kv| kv.key == key) {
                // The same permit asked again (a request whose answer was lost): extended.
                return self.extend(request);
            }
            if permits <= held.len() as u64 {
                let soonest = match held.first() {
                    Some(first) => self.wait_for(first)?,
                    None => None,
                };
                return Ok(Acquire::Held {
                    remaining_lease: soonest,
                });
            }
            let (lease, session) = self.leases.lease_for(request.owner, request.lease)?;
            let sent_at = Instant::now();
            let mut compare = over.empty(&others[0]);
            compare.extend(over.empty(&others[1]));
            compare.push(empty(&Span::key(&tombstone)));
            compare.push(match &total {
                Some(_) => modified_at(&keys.total(), total_revision),
                None => empty(&Span::key(&keys.total())),
            });
            compare.push(modified_before(&keys.permits(), answer.revision + 1));
            let mut success = over.deletes(&[&key]);
            success.push(put(&key, request.owner.as_str().as_bytes(), lease.id));
            if let Err(fail) = self.gated(&mut compare, lease, session.as_ref()) {
                self.drop_own(lease, session.as_ref());
                return Err(fail.into());
            }
            match self.write(compare, success, Vec::new()) {
                Ok(done) if done.succeeded => {
                    over.done(self);
                    self.remember(
                        lock,
                        request.owner,
                        key,
                        done.revision,
                        (lease, session),
                        sent_at + request.lease,
                    );
                    return Ok(Acquire::ACQUIRED);
                }
                Ok(_) => self.drop_own(lease, session.as_ref()),
                Err(fail) => {
                    if unknown(&fail) {
                        self.remember_unknown(
                            lock,
                            request.owner,
                            key,
                            (lease, session),
                            sent_at + request.lease,
                        );
                    } else {
                        self.drop_own(lease, session.as_ref());
                    }
                    return Err(fail.into());
                }
            }
        }
        Err(busy(lock.name))
    }

    /// A latch's "acquire": taken when its count is zero (it holds nothing).
    pub(crate) fn latch_open(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let over = self.over(lock.name)?;
        let tombstone = keys.ended(request.owner.as_str());
        let answer = self.look(
            lock,
            &keys,
            &over,
            &[
                range(&Span::key(&keys.count())),
                range(&Span::key(&tombstone)),
            ],
        )?;
        if !answer.kvs(2)?.is_empty() {
            return Ok(Acquire::Gone {
                reason: LossReason::ForceUnlocked,
            });
        }
        Ok(match answer.kvs(1)?.first() {
            Some(found) if count(found) > 0 => Acquire::Held {
                remaining_lease: None,
            },
            _ => Acquire::ACQUIRED,
        })
    }

    pub(crate) fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        let lock = LockRef::new(step.name(), step.kind());
        let family = Self::family(lock)?;
        match step {
            CounterStep::TrySetPermits { permits, .. } => self.set_once(lock, family, permits),
            CounterStep::TrySetCount { count, .. } => self.set_once(lock, family, count),
            _ => self.count_step(step, lock, family),
        }
    }

    /// Sets the permits, or the count, if the name has none: 1 if it did, else 0. One
    /// transaction that keeps its answer under a request id of its own, sent again after a
    /// lost reply: a second run finds the answer kept and gives it back.
    fn set_once(&self, lock: LockRef<'_>, family: Family, value: u64) -> Result<u64, LockError> {
        let keys = self.keys(lock.name);
        let key = match family {
            Family::Semaphore => keys.total(),
            _ => keys.count(),
        };
        let over = self.over(lock.name)?;
        let others = keys.others(family);
        let request = keys.request(&uuid_like());
        let kept = self.leases.shared(ANSWER_KEPT)?;
        let answered = |answer: &[u8]| put(&request, answer, kept.id);
        // A count of zero is an open latch: nothing to keep but the answer.
        let mut set = vec![answered(b"1")];
        if family == Family::Semaphore || value > 0 {
            set.push(put(&key, value.to_string().as_bytes(), 0));
        }
        let mut compare = over.empty(&others[0]);
        compare.extend(over.empty(&others[1]));
        let step = nested(
            compare,
            vec![nested(
                vec![empty(&Span::key(&key))],
                set,
                vec![answered(b"0")],
            )],
            vec![first_created(&keys.all(), over.room())],
        );
        let mut success = over.deletes(&[]);
        success.push(step);
        let answer = self.write_latched(
            vec![empty(&Span::key(&request))],
            success,
            vec![range(&Span::key(&request))],
        )?;
        over.done(self);
        if !answer.succeeded {
            // Sent again: the first run's answer.
            let first = answer.kvs(0)?;
            return Ok(u64::from(
                first.first().is_some_and(|kv| kv.value.as_slice() == b"1"),
            ));
        }
        let inner = answer.nested(answer.responses.len() - 1)?;
        if !inner.succeeded {
            let first = over.live(inner.kvs(0)?).into_iter().next();
            self.check_kind(lock, &keys, first.as_ref())?;
            return Err(busy(lock.name));
        }
        Ok(u64::from(inner.nested(0)?.succeeded))
    }

    /// The counter steps that read a number and write another back (or only read it).
    fn count_step(
        &self,
        step: CounterStep<'_>,
        lock: LockRef<'_>,
        family: Family,
    ) -> Result<u64, LockError> {
        let keys = self.keys(lock.name);
        let (key, also) = match family {
            Family::Semaphore => (keys.total(), Some(first_created(&keys.permits(), 0))),
            _ => (keys.count(), None),
        };
        let others = keys.others(family);
        for _ in 0..CONFLICT_RETRIES {
            let over = self.over(lock.name)?;
            let mut extra = vec![range(&Span::key(&key))];
            extra.extend(also.clone());
            let answer = self.look(lock, &keys, &over, &extra)?;
            let found = answer.kvs(1)?.into_iter().next();
            let value = found.as_ref().map(count);
            let held = if also.is_some() {
                over.live(answer.kvs(2)?).len() as u64
            } else {
                0
            };
            // What to write, and what to answer once written.
            let (write, answer_with): (Option<Option<u64>>, u64) = match step {
                CounterStep::AddPermits { permits, .. } => {
                    let total = value
                        .unwrap_or(0)
                        .checked_add(permits)
                        .filter(|t| *t <= MAX_COUNT)
                        .ok_or_else(|| {
                            LockError::invalid(
                                "permits",
                                "the permits would exceed what a store counts (2^63 - 1)",
                            )
                        })?;
                    (Some(Some(total)), total.saturating_sub(held))
                }
                CounterStep::AvailablePermits { .. } => {
                    return Ok(value.unwrap_or(0).saturating_sub(held))
                }
                CounterStep::CountDown { .. } => match value {
                    None => return Ok(0),
                    Some(n) if n > 1 => (Some(Some(n - 1)), n - 1),
                    Some(_) => (Some(None), 0),
                },
                CounterStep::Count { .. } => return Ok(value.unwrap_or(0)),
                _ => return Err(Self::unsupported(lock)),
            };
            let Some(write) = write else {
                return Ok(answer_with);
            };
            let span = Span::key(&key);
            let mut compare = over.empty(&others[0]);
            compare.extend(over.empty(&others[1]));
            compare.push(match &found {
                Some(found) => modified_at(&key, found.mod_revision),
                None => empty(&span),
            });
            let op = match write {
                Some(n) => put(&key, n.to_string().as_bytes(), 0),
                None => delete(&span),
            };
            if self.write(compare, vec![op], Vec::new())?.succeeded {
                return Ok(answer_with);
            }
        }
        Err(busy(lock.name))
    }

    pub(crate) fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        if lock.kind != LockKind::Election {
            return Err(Self::unsupported(lock));
        }
        let keys = self.keys(lock.name);
        let over = self.over(lock.name)?;
        let answer = self.look(lock, &keys, &over, &[])?;
        let Some(first) = over.live(answer.kvs(0)?).into_iter().next() else {
            return Ok(None);
        };
        let remaining: Option<Duration> = self.remaining_of(&first)?;
        let token = self
            .holds
            .holder_of_key(&first.key)
            .and_then(|(_, record)| record.made_at)
            .unwrap_or(first.create_revision);
        Ok(Some(Leader::new(
            first.value_text(),
            token.unsigned_abs(),
            remaining,
        )))
    }
}

/// A counter's number (a key of another program that is not one counts as 0).
fn count(kv: &Kv) -> u64 {
    kv.value_text().trim().parse().unwrap_or(0)
}

/// A request id: 32 hex digits, random.
fn uuid_like() -> String {
    let mut bytes = [0u8; 16];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&random_u64().to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 64 random bits from the standard library's randomly keyed hasher.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    hasher.finish()
}
