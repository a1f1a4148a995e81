//! The [`DistributedLock`] steps of [`RedLockBackend`]: each one a fan-out to every node,
//! its outcome the majority's, the lease the slowest node's minus the clocks' drift.

use std::sync::Arc;
use std::time::Duration;

use dlock_core::backend::{
    Acquire, AcquireRequest, Clock, ClockDrift, DistributedLock, Grant, HoldRef, Lease, LockRef,
    LockStatus, LossReason, OwnerId, Release, ReleaseSubscription, Renewal, Signal, SystemClock,
};
use dlock_core::{LockError, LockKind};
use redis::Value;

use super::fan_out::Released;
use super::{RedLockBackend, DRIFT_FLOOR};
use crate::backend::{pttl, script_error, GONE, HELD_BY_ANOTHER, RENEWED, RENEW_CHUNK};
use crate::layout;
use crate::layout::ScriptCall;
use crate::scripts::{Announce, RENEW};

fn check_kind(lock: LockRef<'_>) -> Result<(), LockError> {
    if lock.kind == LockKind::Reentrant {
        Ok(())
    } else {
        Err(LockError::Unsupported {
            name: lock.name.to_owned(),
            kind: lock.kind,
        })
    }
}

impl DistributedLock for RedLockBackend {
    /// A quorum of Redis servers is Redis too: its steps are told apart by their times.
    fn backend_name(&self) -> &'static str {
        "redis"
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        check_kind(request.lock)?;
        let inner = &*self.inner;
        let (lock, owner) = (request.lock, request.owner);
        // No waiter is marked on the nodes: each node would keep its own order of the
        // waiters, and a first waiter on a minority of nodes each would hold a free lock off
        // a majority for everyone (see `keeps_turns`).
        let unmarked = request.waiting(false, request.queue_slot);
        let steps = inner.same_step(
            || vec![layout::acquire(&unmarked)],
            || {
                if request.reentry {
                    // The hold it extends is still relied on: nothing to undo.
                    return Vec::new();
                }
                // What this acquire added, not the hold: the thread's next attempt, under the
                // same id while this one's outcome is unknown, may hold it by then.
                vec![layout::undo_acquire(lock, owner).eval_cmd(Announce::Publish)]
            },
        );
        let started = SystemClock.now();
        let replies = inner.fan_out("acquiring", &steps);
        let mut taken = Vec::new();
        let mut held_for = Vec::new();
        let mut answered = 0;
        let mut gone = 0;
        let mut wrong_kind = None;
        for (index, reply) in replies.into_iter().enumerate() {
            let Ok(replies) = reply else { continue };
            answered += 1;
            match replies.into_iter().next() {
                Some(Value::Nil) => taken.push(index),
                Some(Value::Int(ttl)) => held_for.extend(pttl(ttl)),
                Some(Value::SimpleString(status)) if status == GONE => gone += 1,
                Some(Value::ServerError(error)) => {
                    let server = inner.nodes[index].endpoint().describe();
                    wrong_kind = Some(script_error(error.into(), lock, "acquire", &server));
                }
                _ => {}
            }
        }
        // Every node that granted it runs the lease from when it got the step, after `started`:
        // the lock is held on a majority until the lease's deadline from then, which must
        // still be ahead now that the last reply is in. (The client keeps its own deadline
        // from when it sent the request, with the same margin: `clock_drift`.)
        let valid =
            Lease::new(started, request.lease).deadline(self.clock_drift()) > SystemClock.now();
        if taken.len() >= inner.quorum && valid && wrong_kind.is_none() {
            return Ok(Acquire::Acquired(Grant::PLAIN));
        }
        // No majority in time: take back what this acquire added, everywhere it was taken
        // (the thread's next attempt asks under the same id); unless this was a re-entry,
        // whose hold the owner still relies on (it is confirmed before its next local re-entry;
        // what this step added, one count more and a lease never shorter, is harmless).
        if !taken.is_empty() && !request.reentry {
            inner.undo_on(lock, owner, &taken);
        }
        if let Some(error) = wrong_kind {
            return Err(error);
        }
        // A hold that too many nodes no longer have (extended), or ended (force-unlocked), can
        // never be on a majority again: it ended, whatever the nodes that still have it say.
        if gone > inner.nodes.len() - inner.quorum {
            return Ok(Acquire::Gone {
                reason: LossReason::Gone,
            });
        }
        if answered < inner.quorum {
            return Err(inner
                .unavailable("the acquire", answered)
                .on_lock(lock.name));
        }
        Ok(Acquire::Held {
            remaining_lease: held_for.into_iter().min(),
        })
    }

    /// The builder's drift factor (and the 2 ms floor): the lease's margin, at every grant and
    /// renewal.
    fn clock_drift(&self) -> ClockDrift {
        ClockDrift::new(
            self.inner.drift_factor.max(ClockDrift::DEFAULT.factor()),
            DRIFT_FLOOR,
        )
        .unwrap_or(ClockDrift::DEFAULT)
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        check_kind(lock)?;
        let inner = &*self.inner;
        let Released {
            released,
            unanswered,
            heard_by_others,
        } = inner.release_on(lock, owner);
        if released >= inner.quorum && heard_by_others {
            Ok(Release::ReleasedToOthers)
        } else if released >= inner.quorum {
            Ok(Release::Released)
        } else if released + unanswered >= inner.quorum {
            Err(inner
                .unavailable("the release", inner.nodes.len() - unanswered)
                .on_lock(lock.name))
        } else {
            Ok(Release::NotHeld)
        }
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        if holds.is_empty() {
            return Ok(Vec::new());
        }
        for hold in holds {
            check_kind(hold.lock)?;
        }
        let inner = &*self.inner;
        let lease_ms = layout::millis(lease);
        let chunks = || {
            holds
                .chunks(RENEW_CHUNK)
                .map(|chunk| {
                    ScriptCall::new(
                        &RENEW,
                        chunk.iter().map(|h| h.lock.name.to_owned()).collect(),
                        std::iter::once(lease_ms.clone())
                            .chain(chunk.iter().map(|h| h.owner.to_string()))
                            .collect(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let steps = inner.same_step(chunks, Vec::new);
        let replies = inner.fan_out("renewing leases", &steps);
        // Per hold: how many nodes renewed it, and how many found another owner.
        let mut renewed = vec![0usize; holds.len()];
        let mut taken_over = vec![0usize; holds.len()];
        let mut answered = 0;
        for reply in replies {
            let Ok(replies) = reply else { continue };
            let codes: Vec<i64> = replies
                .into_iter()
                .flat_map(|reply| match reply {
                    Value::Array(items) => items
                        .into_iter()
                        .map(|item| match item {
                            Value::Int(code) => code,
                            _ => 0,
                        })
                        .collect(),
                    _ => Vec::new(),
                })
                .collect();
            if codes.len() != holds.len() {
                continue;
            }
            answered += 1;
            for (index, code) in codes.into_iter().enumerate() {
                match code {
                    RENEWED => renewed[index] += 1,
                    HELD_BY_ANOTHER => taken_over[index] += 1,
                    _ => {}
                }
            }
        }
        if answered < inner.quorum {
            return Err(inner.unavailable("the renewal", answered));
        }
        Ok(renewed
            .into_iter()
            .zip(taken_over)
            .map(|(renewed, taken_over)| {
                if renewed >= inner.quorum {
                    Renewal::Renewed
                } else if taken_over >= inner.quorum {
                    Renewal::Lost(LossReason::TakenOver)
                } else {
                    Renewal::Lost(LossReason::Gone)
                }
            })
            .collect())
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        check_kind(lock)?;
        let inner = &*self.inner;
        let steps = inner.same_step(|| vec![layout::status(lock, owner)], Vec::new);
        let mut answered = 0;
        let (mut locked, mut mine) = (0, 0);
        let mut leases = Vec::new();
        for reply in inner.fan_out("reading the lock's status", &steps) {
            let Ok(replies) = reply else { continue };
            let Some(Value::Array(fields)) = replies.into_iter().next() else {
                continue;
            };
            let int = |i: usize| match fields.get(i) {
                Some(Value::Int(v)) => *v,
                _ => 0,
            };
            answered += 1;
            if int(0) == 1 {
                locked += 1;
                leases.extend(pttl(int(2)));
            }
            mine += usize::from(int(1) == 1);
        }
        if answered < inner.quorum {
            return Err(inner.unavailable("the status", answered).on_lock(lock.name));
        }
        if locked < inner.quorum {
            return Ok(LockStatus::FREE);
        }
        // The lease a majority still has: the quorum-th longest.
        leases.sort_unstable_by(|a, b| b.cmp(a));
        Ok(LockStatus::held(
            mine >= inner.quorum,
            leases.get(inner.quorum - 1).copied(),
        ))
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        check_kind(lock)?;
        let inner = &*self.inner;
        let steps = inner.same_step(|| vec![layout::force_unlock(lock)], Vec::new);
        let mut answered = 0;
        let mut deleted = 0;
        for reply in inner.fan_out("force-unlocking", &steps) {
            let Ok(replies) = reply else { continue };
            answered += 1;
            deleted += usize::from(matches!(replies.first(), Some(Value::Int(1))));
        }
        if answered < inner.quorum {
            return Err(inner
                .unavailable("the force unlock", answered)
                .on_lock(lock.name));
        }
        Ok(deleted >= inner.quorum)
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        check_kind(lock)?;
        let signal = Arc::new(Signal::new());
        let channel = layout::channel(lock, owner);
        let mut parts = Vec::new();
        for node in &self.inner.nodes {
            // A node that cannot be reached is skipped: the wait is capped by the lease anyway.
            match node.server_parts()?.1.subscribe_with(
                channel.clone(),
                Some(signal.clone()),
                Some(self.inner.node_timeout),
            ) {
                Ok(part) => parts.push(part),
                Err(error) => {
                    tracing::debug!(server = node.server(), %error, "dlock: RedLock node not subscribed")
                }
            }
        }
        Ok(Box::new(Subscription {
            signal,
            _parts: parts,
        }))
    }
}

/// Interest in a lock's releases on every node, all waking one signal.
struct Subscription {
    signal: Arc<Signal>,
    _parts: Vec<Box<dyn ReleaseSubscription>>,
}

impl ReleaseSubscription for Subscription {
    fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }
}
