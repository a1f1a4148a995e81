//! The watchdog's renewal of [`RedisBackend`]'s holds: every kind's holds in one pipeline (one
//! round trip), each renewal script over a chunk of holds.

use std::time::Duration;

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
    /// Renews `holds` to `lease` (the [`renew`](dlock_core::backend::DistributedLock::renew)
    /// step).
    pub(super) fn renew_holds(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
    ) -> Result<Vec<Renewal>, LockError> {
        if holds.is_empty() {
            return Ok(Vec::new());
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
        let mut order = Vec::with_capacity(holds.len());
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
                order.extend(chunk.iter().map(|(index, _, _)| *index));
            }
        }
        // Renewing twice is harmless, so a dropped connection's renewal is simply sent again.
        // On a cluster each master answers for its own holds: one that fails leaves the
        // others' answers standing.
        let (replies, ack) = match &self.inner.store {
            Store::Cluster(cluster) => {
                let parts = cluster.run_batch_parts(
                    "renewing leases",
                    &calls,
                    Retry::OnDroppedConnection,
                    true,
                    self.inner.response_timeout,
                )?;
                match parts.failed {
                    Some(error) if parts.replies.iter().all(Option::is_none) => return Err(error),
                    _ => (parts.replies, parts.ack),
                }
            }
            Store::Server { .. } => {
                let batch = self.run_batch(
                    "renewing leases",
                    &calls,
                    Retry::OnDroppedConnection,
                    Durability::Replicated,
                )?;
                (batch.replies.into_iter().map(Some).collect(), batch.ack)
            }
        };
        let mut found: Vec<Option<i64>> = Vec::with_capacity(holds.len());
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
            found.extend(codes.into_iter().map(Some));
        }
        if found.len() != holds.len() {
            return Err(LockError::protocol(format!(
                "renewal of {} locks answered {} results",
                holds.len(),
                found.len()
            )));
        }
        // A renewal no replica has would be undone by a failover: the lease is only known to
        // last as long as its last acknowledged renewal, so this one counts as failed.
        self.check_replicated(&[], ack)?;
        let mut renewals = vec![Renewal::Lost(LossReason::Gone); holds.len()];
        for (index, code) in order.into_iter().zip(found) {
            renewals[index] = match code {
                None => Renewal::Unanswered,
                Some(RENEWED) => Renewal::Renewed,
                Some(HELD_BY_ANOTHER) => Renewal::Lost(LossReason::TakenOver),
                Some(_) => Renewal::Lost(LossReason::Gone),
            };
        }
        Ok(renewals)
    }
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
