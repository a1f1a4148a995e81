//! The watchdog's renewal of [`RedisBackend`]'s holds: every kind's holds in one pipeline (one
//! round trip), each renewal script over a chunk of holds.

use std::time::{Duration, Instant};

use dlock_core::backend::{HoldRef, LossReason, Renewal};
use dlock_core::LockError;
use redis::{FromRedisValue, RedisError, Value};

use super::replies::{check_kind, HELD_BY_ANOTHER, RENEWED};
use super::{Durability, RedisBackend, Store};
use crate::cluster::key_slot;
use crate::commands::Retry;
use crate::error::to_lock_error;
use crate::layout::{self, ScriptCall};
use crate::scripts::{LuaScript, FAIR_RENEW, READ_RENEW, RENEW, SEMAPHORE_RENEW};

/// How many locks one renewal `EVALSHA` covers; bigger batches are split into several scripts
/// sent together in one pipeline (still one round trip), so no single script blocks the
/// server for long.
pub(crate) const RENEW_CHUNK: usize = 500;

impl RedisBackend {
    /// Renews `holds` to `lease` (the
    /// [`renew_parts`](dlock_core::backend::DistributedLock::renew_parts) step): one pipeline on
    /// a server, one per master on a cluster, each master's part told as it answers.
    pub(super) fn renew_holds(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
        answered: &(dyn Fn(&[usize], &[Renewal]) + Sync),
    ) -> Result<(), LockError> {
        if holds.is_empty() {
            return Ok(());
        }
        for hold in holds {
            check_kind(self, hold.lock)?;
        }
        let lease_ms = layout::millis(lease);
        // Exclusive holds (one holder field), fair holds and read holds each go to their own
        // script, in chunks; all of it in one pipeline: one round trip.
        let mut exclusive = Vec::new();
        let mut fair = Vec::new();
        let mut read = Vec::new();
        let mut permits = Vec::new();
        for (index, hold) in holds.iter().enumerate() {
            match layout::renewal(hold) {
                layout::Renewal::Exclusive { key, field } => {
                    exclusive.push((index, vec![key], field))
                }
                layout::Renewal::Fair {
                    key,
                    queue,
                    timeouts,
                    owner,
                } => fair.push((index, vec![key, queue, timeouts], owner)),
                layout::Renewal::Read { key, prefix, owner } => {
                    read.push((index, vec![key, prefix], owner))
                }
                layout::Renewal::Permit { key, id } => permits.push((index, vec![key], id)),
            }
        }
        let mut calls = Vec::new();
        // Per call, the positions of the holds it renews.
        let mut order: Vec<Vec<usize>> = Vec::with_capacity(holds.len());
        for (script, mut holds) in [
            (&RENEW, exclusive),
            (&FAIR_RENEW, fair),
            (&READ_RENEW, read),
            (&SEMAPHORE_RENEW, permits),
        ] {
            // On a cluster one script's keys must share a slot: one script per slot.
            let slot_of = |keys: &Vec<String>| keys.first().map_or(0, |key| key_slot(key));
            if self.is_cluster() {
                holds.sort_by_key(|(_, keys, _)| slot_of(keys));
            }
            let same_store = |a: &(usize, Vec<String>, String),
                              b: &(usize, Vec<String>, String)| {
                !self.is_cluster() || slot_of(&a.1) == slot_of(&b.1)
            };
            for chunk in holds
                .chunk_by(same_store)
                .flat_map(|group| group.chunks(RENEW_CHUNK))
            {
                calls.push(renew_call(script, chunk, &lease_ms));
                order.push(chunk.iter().map(|(index, _, _)| *index).collect::<Vec<_>>());
            }
        }
        // Renewing twice is harmless, so a dropped connection's renewal is simply sent again.
        match &self.inner.store {
            Store::Server { .. } => {
                let batch = self.run_batch(
                    "renewing leases",
                    &calls,
                    Retry::OnDroppedConnection,
                    Durability::Replicated,
                )?;
                let found = self.renewal_codes(&calls, batch.replies.into_iter().map(Some))?;
                // A renewal no replica has would be undone by a failover: the lease is only
                // known to last as long as its last acknowledged renewal, so this one counts
                // as failed.
                self.check_replicated(&[], batch.ack)?;
                let held: Vec<usize> = order.concat();
                answered(&held, &renewals_of(&found));
                Ok(())
            }
            Store::Cluster(cluster) => {
                let groups =
                    cluster.by_master("renewing leases", &calls, self.inner.response_timeout);
                let mut calls: Vec<Option<ScriptCall>> = calls.into_iter().map(Some).collect();
                let parts: Vec<(Vec<usize>, Vec<ScriptCall>)> = groups
                    .into_iter()
                    .map(|group| {
                        let held = group.iter().flat_map(|&i| order[i].clone()).collect();
                        let part = group.iter().filter_map(|&i| calls[i].take()).collect();
                        (held, part)
                    })
                    .collect();
                self.renew_by_master(parts, lease, answered)
            }
        }
    }

    /// A cluster renewal: each master's part on a thread of its own, told as it answers. A
    /// master still silent a third of the lease later (the watchdog's tick) has its holds told
    /// unanswered and the call returns, so the next tick renews the other masters' holds on
    /// time whatever the silent one's response timeout; its thread ends within that timeout,
    /// and what it finds then is not applied (a renewal not applied only leaves a lease to run
    /// out sooner).
    fn renew_by_master(
        &self,
        parts: Vec<(Vec<usize>, Vec<ScriptCall>)>,
        lease: Duration,
        answered: &(dyn Fn(&[usize], &[Renewal]) + Sync),
    ) -> Result<(), LockError> {
        let deadline = Instant::now() + lease / 3;
        let (sender, receiver) = std::sync::mpsc::channel();
        let mut waiting: Vec<Option<Vec<usize>>> = Vec::with_capacity(parts.len());
        for (index, (held, part)) in parts.into_iter().enumerate() {
            waiting.push(Some(held));
            let backend = self.clone();
            let to_caller = sender.clone();
            let spawned = std::thread::Builder::new()
                .name("dlock-renew-master".into())
                .spawn(move || {
                    let Store::Cluster(cluster) = &backend.inner.store else {
                        return;
                    };
                    let _ = to_caller.send((index, backend.renew_on_master(cluster, &part)));
                });
            if let Err(error) = spawned {
                let error = LockError::Resource {
                    message: "could not start a thread to renew a master's holds".into(),
                    source: Some(Box::new(error)),
                };
                let _ = sender.send((index, Err(error)));
            }
        }
        drop(sender);
        let mut first_error = None;
        let mut any_answered = false;
        while waiting.iter().any(Option::is_some) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok((index, result)) = receiver.recv_timeout(left) else {
                break;
            };
            let Some(held) = waiting.get_mut(index).and_then(|slot| slot.take()) else {
                continue;
            };
            match result {
                Ok(found) => {
                    any_answered = true;
                    answered(&held, &renewals_of(&found));
                }
                Err(error) => {
                    answered(&held, &vec![Renewal::Unanswered; held.len()]);
                    first_error.get_or_insert(error);
                }
            }
        }
        for held in waiting.into_iter().flatten() {
            tracing::warn!(
                holds = held.len(),
                "a cluster master did not answer a renewal within a third of the lease"
            );
            answered(&held, &vec![Renewal::Unanswered; held.len()]);
        }
        match (any_answered, first_error) {
            (false, Some(error)) => Err(error),
            (false, None) => Err(LockError::unavailable(
                "no cluster master answered the renewal within a third of the lease",
                self.endpoint().describe(),
            )),
            _ => Ok(()),
        }
    }

    /// One master's part of a cluster renewal: its codes, each hold's; an unreplicated renewal
    /// fails the part.
    fn renew_on_master(
        &self,
        cluster: &crate::cluster::Cluster,
        calls: &[ScriptCall],
    ) -> Result<Vec<Option<i64>>, LockError> {
        let parts = cluster.run_batch_parts(
            "renewing leases",
            calls,
            Retry::OnDroppedConnection,
            true,
            self.inner.response_timeout,
        )?;
        if let Some(error) = parts.failed {
            if parts.replies.iter().all(Option::is_none) {
                return Err(error);
            }
        }
        let found = self.renewal_codes(calls, parts.replies.into_iter())?;
        self.check_replicated(&[], parts.ack)?;
        Ok(found)
    }

    /// Each hold's code in the replies to `calls` (`None`: its master did not answer).
    fn renewal_codes(
        &self,
        calls: &[ScriptCall],
        replies: impl Iterator<Item = Option<Value>>,
    ) -> Result<Vec<Option<i64>>, LockError> {
        let mut found: Vec<Option<i64>> = Vec::new();
        for (call, reply) in calls.iter().zip(replies) {
            let Some(reply) = reply else {
                // Its master did not answer: the holds it covers are unanswered.
                found.extend(std::iter::repeat_n(None, call.args.len() - 1));
                continue;
            };
            let codes = match reply {
                Value::ServerError(error) => Err(to_lock_error(
                    RedisError::from(error),
                    "renewing leases",
                    &self.endpoint().describe(),
                )),
                reply => Vec::<i64>::from_redis_value(reply).map_err(|error| {
                    LockError::protocol(format!("unexpected reply to a renewal: {error}"))
                }),
            }?;
            if codes.len() != call.args.len() - 1 {
                return Err(LockError::protocol(format!(
                    "a renewal of {} locks answered {} results",
                    call.args.len() - 1,
                    codes.len()
                )));
            }
            found.extend(codes.into_iter().map(Some));
        }
        Ok(found)
    }
}

/// The renewal codes as answers.
fn renewals_of(codes: &[Option<i64>]) -> Vec<Renewal> {
    codes
        .iter()
        .map(|code| match code {
            None => Renewal::Unanswered,
            Some(RENEWED) => Renewal::Renewed,
            Some(HELD_BY_ANOTHER) => Renewal::Lost(LossReason::TakenOver),
            Some(_) => Renewal::Lost(LossReason::Gone),
        })
        .collect()
}

/// One renewal script over a chunk of holds: every hold's keys, then the lease and every
/// hold's field.
fn renew_call(
    script: &'static LuaScript,
    chunk: &[(usize, Vec<String>, String)],
    lease_ms: &str,
) -> ScriptCall {
    let keys = chunk.iter().flat_map(|(_, keys, _)| keys.clone()).collect();
    let args = std::iter::once(lease_ms.to_owned())
        .chain(chunk.iter().map(|(_, _, field)| field.clone()))
        .collect();
    ScriptCall::new(script, keys, args)
}
