//! A step's script calls sent as one pipeline, with the replica acknowledgement after them:
//! one round trip, whatever their number.

use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

use crate::connection::PooledConnection;
use crate::error::is_noscript_reply;
use crate::keys::UNLOCK_LATCH_PREFIX;
use crate::layout::ScriptCall;
use crate::replica_sync::{Ack, ReplicaSync, SyncPlan};
use crate::scripts::{Announce, LuaScript};

/// The replies of a batch: one per script call, in order (a script's error as
/// `Value::ServerError`, not failing the others), and whether the replicas acknowledged it.
pub(crate) struct BatchReply {
    pub(crate) replies: Vec<Value>,
    pub(crate) ack: Ack,
}

/// Runs `calls` on `con` as one pipeline followed by `plan`'s `WAIT`/`ROLE`.
///
/// A script the server lost (`NOSCRIPT`: it restarted or flushed its cache) is loaded and only
/// the calls that found it missing are sent again, so no call runs twice. A latched release
/// that released gets its latch deleted by a `DEL` that goes with the connection's next command
/// (see [`PooledConnection::defer`]).
///
/// `announce` says how the scripts announce releases (sharded on a cluster's node).
pub(crate) fn run_batch(
    con: &mut PooledConnection,
    calls: &[&ScriptCall],
    sync: &ReplicaSync,
    plan: SyncPlan,
    response_timeout: Duration,
    announce: Announce,
) -> RedisResult<BatchReply> {
    let mut replies = vec![Value::Nil; calls.len()];
    let mut pending: Vec<usize> = (0..calls.len()).collect();
    let mut plan = plan;
    let mut ack = Ack::NotNeeded;
    for attempt in 0..2 {
        let mut pipe = redis::pipe();
        for &index in &pending {
            pipe.add_command(calls[index].cmd(announce));
        }
        let suffix = plan.commands();
        for cmd in &suffix {
            pipe.add_command(cmd.clone());
        }
        con.send_packed(&pipe.get_packed_pipeline())?;
        let deadline = Instant::now() + response_timeout + plan.extra_time();
        let mut got = con.read_replies(pending.len() + suffix.len(), deadline)?;
        let tail = got.split_off(pending.len());
        ack = sync.settle(&plan, &tail);
        // A master demoted by a failover: this connection is of no use any more.
        if let Some(Value::ServerError(error)) = got
            .iter()
            .find(|reply| matches!(reply, Value::ServerError(error) if error.code() == "READONLY"))
        {
            return Err(redis::RedisError::from(error.clone()));
        }
        let mut missing = Vec::new();
        for (&index, reply) in pending.iter().zip(got) {
            if attempt == 0 && is_noscript_reply(&reply) {
                missing.push(index);
            }
            replies[index] = reply;
        }
        if missing.is_empty() {
            break;
        }
        let mut scripts: Vec<&LuaScript> = missing.iter().map(|&i| calls[i].script).collect();
        scripts.sort_by_key(|script| script.sha(announce));
        scripts.dedup_by_key(|script| script.sha(announce));
        for script in scripts {
            tracing::debug!(
                script = script.name,
                "script missing on the server, loading it"
            );
            script.load(con, announce)?;
        }
        pending = missing;
        plan = plan.without_refresh();
    }
    for (call, reply) in calls.iter().zip(&replies) {
        let latch = call
            .keys
            .last()
            .filter(|key| key.starts_with(UNLOCK_LATCH_PREFIX));
        // 1: released; 2: handed over.
        if let (Some(latch), Value::Int(1 | 2)) = (latch, reply) {
            con.defer(redis::cmd("DEL").arg(latch));
        }
    }
    Ok(BatchReply { replies, ack })
}
