//! What the per-master pipelines cannot do themselves: calls a master answered `MOVED`, `ASK`,
//! `TRYAGAIN` or `CLUSTERDOWN` (its slot moved or is being migrated, a failover is under way)
//! are sent again one by one through the `redis` crate's cluster connection, which follows
//! redirects, until the response timeout; and their `WAIT` goes where they went.

use std::time::{Duration, Instant};

use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{ConnectionLike, RedisResult, ServerError, Value};

use super::PooledCluster;
use crate::layout::ScriptCall;
use crate::replica_sync::Ack;
use crate::scripts::Announce;

/// The first pause before sending a call again that the cluster could not serve yet; it
/// doubles up to [`MAX_PAUSE`].
const MIN_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// Whether the cluster could not serve a call where it was sent: it is redirected, its slot is
/// being migrated (`TRYAGAIN`: its keys are split between two nodes for a moment), or the
/// cluster is down or failing over.
pub(crate) fn is_transient(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(error)
        if matches!(error.code(), "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "LOADING"))
}

/// Sends `call` through the cluster connection until the cluster serves it or `deadline`
/// passes (the last answer is returned then). A script's error comes back as a
/// `Value::ServerError`, as in a pipeline.
pub(crate) fn resend(
    con: &mut PooledCluster,
    call: &ScriptCall,
    deadline: Instant,
) -> RedisResult<Value> {
    let cmd = call.cmd(Announce::ShardedPublish);
    let mut pause = MIN_PAUSE;
    let mut loaded = false;
    loop {
        let reply = match con.con.req_command(&cmd) {
            Ok(value) => value,
            Err(error) if error.code() == Some("NOSCRIPT") && !loaded => {
                // A node that never ran it (a promoted replica, a node that joined): SCRIPT
                // LOAD goes to every node, once; a second NOSCRIPT is the call's answer.
                call.script.load(&mut con.con, Announce::ShardedPublish)?;
                loaded = true;
                continue;
            }
            Err(error) => match ServerError::try_from(error) {
                Ok(server) => Value::ServerError(server),
                Err(error) => return Err(error),
            },
        };
        if !is_transient(&reply) || Instant::now() + pause >= deadline {
            return Ok(reply);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// `WAIT` for `replicas` on the master of `slot`, after calls sent there with [`resend`].
pub(crate) fn wait_on(
    con: &mut PooledCluster,
    slot: u16,
    replicas: u32,
    timeout: Duration,
) -> RedisResult<Ack> {
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let mut cmd = redis::cmd("WAIT");
    cmd.arg(replicas).arg(timeout_ms);
    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
        slot,
        SlotAddr::Master,
    )));
    Ok(match con.con.route_command(&cmd, routing) {
        Ok(Value::Int(acknowledged)) if acknowledged >= 1 => Ack::Acknowledged,
        Ok(Value::Int(_)) => Ack::Missing { replicas, timeout },
        Ok(other) => Ack::Refused(format!("unexpected reply to WAIT: {other:?}")),
        Err(error) if error.is_io_error() || error.is_timeout() => return Err(error),
        Err(error) => Ack::Refused(format!("the master refused WAIT: {error}")),
    })
}
