//! Reading what the server holds for lock names without taking them: who holds a lock, how
//! long its lease still runs, who queues for it. For operators and the `dlock` command; a
//! program that needs the lock asks for it instead (the answer is stale as soon as it is read).

use std::time::Duration;

use dlock_core::backend::{HeldAs, LockHolder, LockInfo};
use dlock_core::LockError;
use redis::{ConnectionLike, Pipeline, RedisResult, Value};

use crate::keys::{
    channel_name, fair_queue_name, fencing_token_name, read_write_channel_name, CHANNEL_PREFIX,
    CLIENT_RECORD_PREFIX, ENDED_PREFIX, FAIR_GRANT_PREFIX, FAIR_QUEUE_PREFIX, FAIR_TIMEOUT_PREFIX,
    FENCING_TOKEN_PREFIX, KIND_MARK_PREFIX, LOCK_WAITERS_PREFIX, LOCK_WAITER_MARKS_PREFIX,
    READ_WAITERS_PREFIX, READ_WRITE_CHANNEL_PREFIX, REQUEST_LATCH_PREFIX, UNLOCK_LATCH_PREFIX,
    WRITE_ORDER_PREFIX, WRITE_WAITERS_PREFIX,
};

/// The most keys [`RedisBackend::list_locks`](crate::RedisBackend::list_locks) returns, and the
/// default a caller should pass when it has no reason to pick another.
pub const DEFAULT_LIST_LIMIT: usize = 1000;

/// How many keys one `SCAN` call asks the server to look at.
const SCAN_COUNT: usize = 1000;

/// Reads lock `name`: its hash, the hash's expiry, the fair queue's length, the fencing
/// counter and the subscribers of its release channels, in one pipeline. A key of that name
/// that is not a lock is an error that says so.
///
/// On a cluster connection the pipeline goes to the node of its first command: `names` must
/// then be one name (whose keys share its slot), and `sharded` says its channels are sharded.
pub(crate) fn inspect(
    con: &mut dyn ConnectionLike,
    names: &[String],
    sharded: bool,
) -> RedisResult<Vec<Value>> {
    let mut pipe = Pipeline::new();
    for name in names {
        pipe.cmd("TYPE").arg(name);
        pipe.cmd("HGETALL").arg(name);
        pipe.cmd("PTTL").arg(name);
        pipe.cmd("LLEN").arg(fair_queue_name(name));
        pipe.cmd("GET").arg(fencing_token_name(name));
        pipe.cmd("PUBSUB")
            .arg(if sharded { "SHARDNUMSUB" } else { "NUMSUB" })
            .arg(channel_name(name))
            .arg(read_write_channel_name(name));
    }
    // Every reply kept, errors included: a key that is not a hash fails HGETALL, and its TYPE
    // says why.
    con.req_packed_commands(&pipe.get_packed_pipeline(), 0, names.len() * REPLIES)
}

/// The replies [`inspect`] reads per name.
const REPLIES: usize = 6;

/// The replies of [`inspect`] for `names`, five per name: a `LockInfo`, or an error saying why
/// the name is not a lock, per name.
pub(crate) fn parse(
    names: &[String],
    replies: Vec<Value>,
) -> Result<Vec<Result<LockInfo, LockError>>, LockError> {
    if replies.len() != names.len() * REPLIES {
        return Err(LockError::protocol(format!(
            "expected {} replies to a lock inspection, got {}",
            names.len() * REPLIES,
            replies.len()
        )));
    }
    let mut replies = replies.into_iter();
    Ok(names
        .iter()
        .map(|name| {
            let mut next = || replies.next().unwrap_or(Value::Nil);
            let (kind, hash, ttl, queued, token) = (next(), next(), next(), next(), next());
            let subscribers = subscribers(next());
            parse_one(name, kind, hash, ttl, queued, token).map(|mut info| {
                info.subscribers = subscribers;
                info
            })
        })
        .collect())
}

/// The subscribers of a lock's channels, from `PUBSUB NUMSUB`'s channel / count pairs (`None`
/// when the server did not answer it: a user without the right to ask).
fn subscribers(reply: Value) -> Option<u64> {
    let pairs: Vec<(String, u64)> = redis::from_redis_value(reply).ok()?;
    Some(pairs.iter().map(|(_, count)| count).sum())
}

fn parse_one(
    name: &str,
    kind: Value,
    hash: Value,
    ttl: Value,
    queued: Value,
    token: Value,
) -> Result<LockInfo, LockError> {
    let kind: String = typed(name, "TYPE", kind)?;
    let queued_waiters: u64 = typed(name, "LLEN", queued)?;
    let last_fencing_token: Option<u64> = typed(name, "GET", token)?;
    let mut info = LockInfo::free(name);
    info.queued_waiters = queued_waiters;
    info.last_fencing_token = last_fencing_token;
    match kind.as_str() {
        "none" => return Ok(info),
        "hash" => {}
        other => {
            return Err(LockError::invalid(
                "name",
                format!("the key {name:?} is a {other}, not a lock"),
            ))
        }
    }
    let fields: Vec<(String, String)> = typed(name, "HGETALL", hash)?;
    let ttl: i64 = typed(name, "PTTL", ttl)?;
    info.remaining_lease = u64::try_from(ttl).ok().map(Duration::from_millis);
    let mode = fields
        .iter()
        .find(|(field, _)| field == "mode")
        .map(|(_, mode)| mode.clone());
    if mode.as_deref() == Some("election") {
        return Err(LockError::invalid(
            "name",
            format!("{name:?} is a leader election, not a lock"),
        ));
    }
    for (field, value) in fields {
        if field == "mode" {
            continue;
        }
        let holds = value.parse::<u64>().map_err(|_| not_a_lock(name))?;
        let (owner, write) = match field.strip_suffix(":write") {
            Some(owner) => (owner.to_owned(), true),
            None => (field, false),
        };
        info.holders.push(LockHolder::new(owner, holds, write));
    }
    info.held_as = match mode.as_deref() {
        // A name with a token counter is a fenced lock's (Redisson's RFencedLock's too).
        None | Some("lock") if info.last_fencing_token.is_some() => HeldAs::Fenced,
        // Reentrant and fair locks (Redisson's carry no mark).
        None | Some("lock") | Some("fair") => HeldAs::Exclusive,
        Some("read") => HeldAs::Read,
        Some("write") => HeldAs::Write,
        Some(_) => return Err(not_a_lock(name)),
    };
    Ok(info)
}

fn not_a_lock(name: &str) -> LockError {
    LockError::invalid(
        "name",
        format!("the hash {name:?} is not a lock (its fields are not owner ids with hold counts)"),
    )
}

fn typed<T: redis::FromRedisValue>(
    name: &str,
    command: &str,
    value: Value,
) -> Result<T, LockError> {
    if let Value::ServerError(error) = &value {
        return Err(LockError::protocol(format!(
            "{command} for lock {name:?} failed: {error:?}"
        )));
    }
    T::from_redis_value(value).map_err(|error| {
        LockError::protocol(format!(
            "unexpected reply to {command} for lock {name:?}: {error}"
        ))
    })
}

/// Finds the names of locks held now whose names match `pattern` (Redis glob syntax), at most
/// `limit` of them, with `SCAN ... TYPE hash` (never `KEYS`, which blocks the server).
///
/// `send` runs each `SCAN` on the server scanned (on a cluster: one master; the caller scans
/// each).
pub(crate) fn scan(
    send: impl FnMut(&redis::Cmd) -> RedisResult<Value>,
    pattern: &str,
    limit: usize,
) -> RedisResult<Vec<String>> {
    let mut names = scan_keys(send, pattern, "hash", limit)?;
    names.retain(|key| !is_derived_key(key));
    Ok(names)
}

/// The keys of Redis type `kind` whose names match `pattern`, sorted, at most about `limit`
/// of them (`SCAN ... TYPE`, never `KEYS`).
pub(crate) fn scan_keys(
    mut send: impl FnMut(&redis::Cmd) -> RedisResult<Value>,
    pattern: &str,
    kind: &str,
    limit: usize,
) -> RedisResult<Vec<String>> {
    let mut names = Vec::new();
    let mut cursor = 0u64;
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .arg("TYPE")
            .arg(kind);
        let (next, keys): (u64, Vec<String>) = redis::from_redis_value(send(&cmd)?)?;
        names.extend(keys);
        if next == 0 || names.len() >= limit {
            break;
        }
        cursor = next;
    }
    names.sort();
    names.dedup();
    names.truncate(limit);
    Ok(names)
}

/// Keys the lock layouts derive from a lock's name (channels, queues, latches, counters), which
/// are never locks themselves.
pub(crate) fn is_derived_key(key: &str) -> bool {
    [
        CHANNEL_PREFIX,
        UNLOCK_LATCH_PREFIX,
        FAIR_QUEUE_PREFIX,
        FAIR_TIMEOUT_PREFIX,
        FENCING_TOKEN_PREFIX,
        READ_WRITE_CHANNEL_PREFIX,
        FAIR_GRANT_PREFIX,
        WRITE_WAITERS_PREFIX,
        WRITE_ORDER_PREFIX,
        READ_WAITERS_PREFIX,
        LOCK_WAITERS_PREFIX,
        LOCK_WAITER_MARKS_PREFIX,
        KIND_MARK_PREFIX,
        CLIENT_RECORD_PREFIX,
        ENDED_PREFIX,
        REQUEST_LATCH_PREFIX,
    ]
    .iter()
    .any(|prefix| {
        key.strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(':'))
    })
}
