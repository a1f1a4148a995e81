//! Semaphores, latches and elections' own steps: permits taken against the permits set, the
//! counters, and the leader's record.
//!
//! A semaphore's permits are `sem/total`; each permit held is a key `sem/p/<permit id>` bound
//! to its holder's lease, so a dead holder's permit comes back when its lease ends, by etcd
//! alone. Available = total − permits held. A step that reads a count and writes it back
//! compares the revisions it read, and reads again if another client came in between.

use std::time::{Duration, Instant};

use dlock_core::backend::{Acquire, AcquireRequest, CounterStep, Leader, LockRef};
use dlock_core::{LockError, LockKind, MAX_COUNT};
use serde_json::Value;

use crate::backend::Inner;
use crate::keys::{Family, NameKeys};
use crate::wire::{delete, empty, first_created, modified_before, put, range, Kv, Span, TxnAnswer};

/// Attempts of a read-then-write step before it gives up on a name changing under it.
const CONFLICT_RETRIES: usize = 32;

impl Inner {
    /// Reads the name's first key (for its kind), `extra` spans, and checks the kind.
    fn look(
        &self,
        lock: LockRef<'_>,
        keys: &NameKeys,
        extra: &[Value],
    ) -> Result<TxnAnswer, LockError> {
        let mut ops = vec![first_created(&keys.all(), 1)];
        ops.extend_from_slice(extra);
        let answer = self.read(ops)?;
        let first = answer.kvs(0)?.into_iter().next();
        self.check_kind(lock, keys, first.as_ref())?;
        Ok(answer)
    }

    pub(crate) fn take_permit(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        let keys = self.keys(lock.name);
        let key = keys.hold(lock, request.owner);
        let others = keys.others(Family::Semaphore);
        for _ in 0..CONFLICT_RETRIES {
            let answer = self.look(
                lock,
                &keys,
                &[
                    range(&Span::key(&keys.total())),
                    first_created(&keys.permits(), 0),
                ],
            )?;
            let total = answer.kvs(1)?.into_iter().next();
            let held = answer.kvs(2)?;
            let (permits, total_revision) = total
                .as_ref()
                .map_or((0, 0), |t| (count(t), t.mod_revision));
            if held.iter().any(|kv| kv.key == key) {
                // The same permit asked again (a request whose answer was lost).
                return self.extend_adopted(request);
            }
            if permits <= held.len() as u64 {
                let soonest = match held.first() {
                    Some(first) => self.leases.remaining(first.lease)?,
                    None => None,
                };
                return Ok(Acquire::Held {
                    remaining_lease: soonest,
                });
            }
            let (lease, session) = self.leases.lease_for(request.owner, request.lease)?;
            let sent_at = Instant::now();
            let total_span = Span::key(&keys.total());
            let compare = vec![
                empty(&others[0]),
                empty(&others[1]),
                serde_json::json!({
                    "key": crate::wire::b64(&keys.total()),
                    "target": "MOD", "result": "EQUAL",
                    "mod_revision": total_revision.to_string(),
                }),
                modified_before(&keys.permits(), answer.revision + 1),
            ];
            let _ = total_span;
            match self.write(compare, vec![put(&key, b"", lease.id)], Vec::new()) {
                Ok(done) if done.succeeded => {
                    self.remember(
                        lock,
                        request.owner,
                        key,
                        done.revision,
                        lease,
                        session,
                        request.lease,
                        sent_at,
                    );
                    return Ok(Acquire::ACQUIRED);
                }
                Ok(_) => self.drop_own(lease, session.as_ref()),
                Err(fail) => {
                    self.drop_own(lease, session.as_ref());
                    return Err(fail.into());
                }
            }
        }
        Err(busy(lock.name))
    }

    /// A permit this backend made before its answer was lost: extended as a re-entry.
    fn extend_adopted(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let again = request.reentering(true);
        match self.acquire(&again)? {
            Acquire::Gone { .. } => Ok(Acquire::Held {
                remaining_lease: None,
            }),
            other => Ok(other),
        }
    }

    pub(crate) fn latch_open(&self, lock: LockRef<'_>) -> Result<Acquire, LockError> {
        let keys = self.keys(lock.name);
        let answer = self.look(lock, &keys, &[range(&Span::key(&keys.count()))])?;
        Ok(match answer.kvs(1)?.first() {
            Some(found) if count(found) > 0 => Acquire::Held {
                remaining_lease: None,
            },
            _ => Acquire::ACQUIRED,
        })
    }

    pub(crate) fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        let lock = LockRef::new(step.name(), step.kind());
        let keys = self.keys(lock.name);
        let family = Self::family(lock)?;
        let (key, also) = match family {
            Family::Semaphore => (keys.total(), Some(first_created(&keys.permits(), 0))),
            _ => (keys.count(), None),
        };
        let others = keys.others(family);
        for _ in 0..CONFLICT_RETRIES {
            let mut extra = vec![range(&Span::key(&key))];
            extra.extend(also.clone());
            let answer = self.look(lock, &keys, &extra)?;
            let found = answer.kvs(1)?.into_iter().next();
            let value = found.as_ref().map(count);
            let held = if also.is_some() {
                answer.kvs(2)?.len() as u64
            } else {
                0
            };
            // What to write, and what to answer once written.
            let (write, answer_with): (Option<Option<u64>>, u64) = match step {
                CounterStep::TrySetPermits { permits, .. } => match value {
                    Some(_) => return Ok(0),
                    None => (Some(Some(permits)), 1),
                },
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
                CounterStep::TrySetCount { count, .. } => match value {
                    Some(_) => return Ok(0),
                    None if count == 0 => return Ok(1),
                    None => (Some(Some(count)), 1),
                },
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
            let mut compare = vec![empty(&others[0]), empty(&others[1])];
            compare.push(match &found {
                Some(found) => serde_json::json!({
                    "key": crate::wire::b64(&key),
                    "target": "MOD", "result": "EQUAL",
                    "mod_revision": found.mod_revision.to_string(),
                }),
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
        let first = self.first(&keys)?;
        self.check_kind(lock, &keys, first.as_ref())?;
        let Some(first) = first else {
            return Ok(None);
        };
        let remaining: Option<Duration> = self.leases.remaining(first.lease)?;
        Ok(Some(Leader::new(
            first.value_text(),
            first.create_revision.unsigned_abs(),
            remaining,
        )))
    }
}

/// A counter's number (a key of another program that is not one counts as 0).
fn count(kv: &Kv) -> u64 {
    kv.value_text().trim().parse().unwrap_or(0)
}

fn busy(name: &str) -> LockError {
    LockError::unavailable(
        format!("{name:?} kept changing under the step; try again"),
        std::io::Error::other("conflicting changes"),
    )
}
