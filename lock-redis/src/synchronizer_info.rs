//! Reading what the server holds for a name as a semaphore, a latch or a leader election,
//! without taking anything: for operators and the `dlock` command.

use std::time::Duration;

use dlock_core::backend::{LeaderInfo, PermitInfo, SynchronizerInfo};
use dlock_core::LockError;
use redis::{ConnectionLike, Pipeline, RedisResult, Value};

use crate::keys::{election_token_name, kind_mark_name, semaphore_permits_name};

/// Reads `name` as a semaphore, latch and election: the server's time, the number at the name
/// (if it is a string) and its mark, the permits held with their lease ends, the election's
/// hash (at the name, if it is one), its lease and its token.
pub(crate) fn inspect(con: &mut dyn ConnectionLike, name: &str) -> RedisResult<Vec<Value>> {
    let mut pipe = Pipeline::new();
    // A keyed command first: on a cluster the pipeline goes to the node of its first key.
    pipe.cmd("TYPE").arg(name);
    pipe.cmd("TIME");
    pipe.cmd("GET").arg(name);
    pipe.cmd("GET").arg(kind_mark_name(name));
    pipe.cmd("ZRANGE")
        .arg(semaphore_permits_name(name))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES");
    pipe.cmd("HGETALL").arg(name);
    pipe.cmd("PTTL").arg(name);
    pipe.cmd("GET").arg(election_token_name(name));
    con.req_packed_commands(&pipe.get_packed_pipeline(), 0, 8)
}

/// The replies of [`inspect`] for `name`.
pub(crate) fn parse(name: &str, replies: Vec<Value>) -> Result<SynchronizerInfo, LockError> {
    let unexpected =
        |what: &str| LockError::protocol(format!("unexpected reply to {what} of {name:?}"));
    let [kind, time, count, mark, permits, election, pttl, token]: [Value; 8] = replies
        .try_into()
        .map_err(|_| unexpected("a synchronizer inspection"))?;
    let (secs, micros): (u64, u64) =
        redis::from_redis_value(time).map_err(|_| unexpected("TIME"))?;
    let now_ms = secs * 1000 + micros / 1000;
    let kind: String = redis::from_redis_value(kind).map_err(|_| unexpected("TYPE"))?;
    let count = match kind.as_str() {
        "string" => redis::from_redis_value::<Option<String>>(count)
            .ok()
            .flatten()
            .and_then(|count| count.parse().ok()),
        _ => None,
    };
    let counts = count
        .and(redis::from_redis_value::<Option<String>>(mark).ok())
        .flatten();
    let scored: Vec<(Vec<u8>, f64)> = redis::from_redis_value(permits).unwrap_or_default();
    let permits_held = scored
        .into_iter()
        .map(|(id, ends_at)| {
            PermitInfo::new(
                id.iter()
                    .map(|byte| format!("{byte:02x}"))
                    .collect::<String>(),
                // Redisson's score of a permit taken without a lease is 922337203685477.
                (ends_at < 9.0e14)
                    .then(|| Duration::from_millis((ends_at as u64).saturating_sub(now_ms))),
            )
        })
        .collect();
    let fields: Vec<(String, String)> = match kind.as_str() {
        "hash" => redis::from_redis_value(election).unwrap_or_default(),
        _ => Vec::new(),
    };
    let is_election = fields
        .iter()
        .any(|(field, value)| field == "mode" && value == "election");
    let holder = fields.iter().find(|(field, _)| field != "mode");
    let leader = holder.filter(|_| is_election).map(|(owner, candidate)| {
        LeaderInfo::new(
            candidate.clone(),
            owner.clone(),
            redis::from_redis_value::<Option<u64>>(token)
                .ok()
                .flatten()
                .unwrap_or(0),
            redis::from_redis_value::<i64>(pttl)
                .ok()
                .and_then(|ttl| u64::try_from(ttl).ok())
                .map(Duration::from_millis),
        )
    });
    let mut info = SynchronizerInfo::new(name);
    info.count = count;
    info.counts = counts;
    info.permits_held = permits_held;
    info.leader = leader;
    Ok(info)
}
