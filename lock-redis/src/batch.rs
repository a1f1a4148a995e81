//! A step's script calls sent as one pipeline, with the replica acknowledgement after them:
//! one round trip, whatever their number.

use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

use crate::connection::PooledConnection;
use crate::error::is_noscript_reply;
use crate::layout::ScriptCall;
use crate::replica_sync::{Ack, ReplicaSync, SyncPlan};
use crate::scripts::Announce;

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
/// that released, written once, gets its latch deleted by a `DEL` that goes with the
/// connection's next command (see [`PooledConnection::defer`]).
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
    let sent = send_batch(con, calls, plan, response_timeout, announce)?;
    sent.finish(con, calls, sync)
}

/// The first half of [`run_batch`]: writes the pipeline and returns without reading its
/// replies, so that a step over several servers writes to all of them before it waits for
/// any. [`SentBatch::finish`] reads the replies on the same connection.
pub(crate) fn send_batch(
    con: &mut PooledConnection,
    calls: &[&ScriptCall],
    plan: SyncPlan,
    response_timeout: Duration,
    announce: Announce,
) -> RedisResult<SentBatch> {
    let pending: Vec<usize> = (0..calls.len()).collect();
    let suffix = write_pipeline(con, calls, &pending, &plan, announce)?;
    Ok(SentBatch {
        pending,
        suffix,
        deadline: con.deadline_within(response_timeout) + plan.extra_time(),
        plan,
        response_timeout,
        announce,
    })
}

/// Writes the calls numbered `pending` and `plan`'s commands; returns how many replies the
/// plan's commands add.
fn write_pipeline(
    con: &mut PooledConnection,
    calls: &[&ScriptCall],
    pending: &[usize],
    plan: &SyncPlan,
    announce: Announce,
) -> RedisResult<usize> {
    let suffix = plan.commands();
    con.send_encoded(|out| {
        for &index in pending {
            calls[index].write_to(out, announce);
        }
        for cmd in &suffix {
            cmd.write_packed_command(out);
        }
    })?;
    Ok(suffix.len())
}

/// A batch written by [`send_batch`] whose replies are still to be read.
pub(crate) struct SentBatch {
    pending: Vec<usize>,
    suffix: usize,
    deadline: Instant,
    plan: SyncPlan,
    response_timeout: Duration,
    announce: Announce,
}

impl SentBatch {
    /// Reads the replies of the batch written on `con` (with the same `calls`), loads the
    /// scripts the server lost and sends the calls that found them missing once more.
    pub(crate) fn finish(
        self,
        con: &mut PooledConnection,
        calls: &[&ScriptCall],
        sync: &ReplicaSync,
    ) -> RedisResult<BatchReply> {
        let SentBatch {
            mut pending,
            mut suffix,
            mut deadline,
            mut plan,
            response_timeout,
            announce,
        } = self;
        let mut replies = vec![Value::Nil; calls.len()];
        let mut ack;
        let mut attempt = 0;
        loop {
            let got = con.read_replies(pending.len() + suffix, deadline)?;
            ack = sync.settle(&plan, &got[pending.len()..]);
            // A master demoted by a failover: this connection is of no use any more.
            if let Some(Value::ServerError(error)) = got.iter().find(
                |reply| matches!(reply, Value::ServerError(error) if error.code() == "READONLY"),
            ) {
                return Err(redis::RedisError::from(error.clone()));
            }
            let mut missing = Vec::new();
            for (&index, reply) in pending.iter().zip(got) {
                if attempt == 0 && is_noscript_reply(&reply) {
                    calls[index].not_run();
                    missing.push(index);
                }
                replies[index] = reply;
            }
            if missing.is_empty() {
                break;
            }
            crate::scripts::load_missing(con, missing.iter().map(|&i| calls[i].script), announce)?;
            pending = missing;
            plan = plan.without_refresh();
            suffix = write_pipeline(con, calls, &pending, &plan, announce)?;
            deadline = Instant::now() + response_timeout + plan.extra_time();
            attempt += 1;
        }
        for (call, reply) in calls.iter().zip(&replies) {
            // A latched call answers a number when it wrote its latch (a release: 1 released,
            // 2 handed over, 3 released while other clients waited; a set-once step: 0 or 1).
            if let (Some(latch), Value::Int(_)) = (call.latch_to_delete(), reply) {
                con.defer(&[b"DEL", latch.as_bytes()]);
            }
        }
        Ok(BatchReply { replies, ack })
    }
}
