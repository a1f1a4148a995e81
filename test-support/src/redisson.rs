//! A stand-in for a Java service using Redisson 3.24+: Redisson's own lock scripts, verbatim (the
//! text Redisson sends: its Java string literals concatenated), run with the keys and arguments
//! Redisson passes, under an owner id of Redisson's shape (`<uuid>:<thread id>`).
//!
//! Fair and read-write scripts are from Redisson's `RedissonFairLock`, `RedissonReadLock` and
//! `RedissonWriteLock` (the newest sources, with the unlock latch and the publish command as an
//! argument).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::redis_server::RedisServer;

/// Redisson's `RedissonLock.tryLockInnerAsync` (KEYS: lock; ARGV: lease ms, owner).
pub const REDISSON_LOCK: &str = "
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return nil;
end;
return redis.call('pttl', KEYS[1]);";

/// Redisson's `RedissonLock.unlockInnerAsync` (KEYS: lock, channel, latch; ARGV: unlock
/// message, lease ms, owner, publish command, latch ms).
pub const REDISSON_UNLOCK: &str = "
local val = redis.call('get', KEYS[3]);
if val ~= false then
    return tonumber(val);
end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
    return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
    redis.call('pexpire', KEYS[1], ARGV[2]);
    redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
    return 0;
else
    redis.call('del', KEYS[1]);
    redis.call(ARGV[4], KEYS[2], ARGV[1]);
    redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
    return 1;
end;";

/// `RedissonFairLock.tryLockInnerAsync`, the waiting variant (`EVAL_LONG`).
/// KEYS: lock, queue, time-outs; ARGV: lease ms, owner, wait ms, now ms.
const REDISSON_FAIR_TRY_LOCK: &str = concat!(
    "while true do ",
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);",
    "if firstThreadId2 == false then ",
    "break;",
    "end;",
    "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);",
    "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then ",
    "redis.call('zrem', KEYS[3], firstThreadId2);",
    "redis.call('lpop', KEYS[2]);",
    "else ",
    "break;",
    "end;",
    "end;",
    "if (redis.call('exists', KEYS[1]) == 0) ",
    "and ((redis.call('exists', KEYS[2]) == 0) ",
    "or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then ",
    "redis.call('lpop', KEYS[2]);",
    "redis.call('zrem', KEYS[3], ARGV[2]);",
    "local keys = redis.call('zrange', KEYS[3], 0, -1);",
    "for i = 1, #keys, 1 do ",
    "redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);",
    "end;",
    "redis.call('hset', KEYS[1], ARGV[2], 1);",
    "redis.call('pexpire', KEYS[1], ARGV[1]);",
    "return nil;",
    "end;",
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then ",
    "redis.call('hincrby', KEYS[1], ARGV[2],1);",
    "redis.call('pexpire', KEYS[1], ARGV[1]);",
    "return nil;",
    "end;",
    "local timeout = redis.call('zscore', KEYS[3], ARGV[2]);",
    "if timeout ~= false then ",
    "local ttl = redis.call('pttl', KEYS[1]);",
    "return math.max(0, ttl); ",
    "end;",
    "local lastThreadId = redis.call('lindex', KEYS[2], -1);",
    "local ttl;",
    "if lastThreadId ~= false and lastThreadId ~= ARGV[2] and redis.call('zscore', KEYS[3], lastThreadId) ~= false then ",
    "ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);",
    "else ",
    "ttl = redis.call('pttl', KEYS[1]);",
    "end;",
    "local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);",
    "if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then ",
    "redis.call('rpush', KEYS[2], ARGV[2]);",
    "end;",
    "return ttl;",
);

/// `RedissonFairLock.acquireFailedAsync`. KEYS: queue, time-outs; ARGV: owner, wait ms.
const REDISSON_FAIR_ACQUIRE_FAILED: &str = concat!(
    "local queue = redis.call('lrange', KEYS[1], 0, -1);",
    "local i = 1;",
    "while i <= #queue and queue[i] ~= ARGV[1] do ",
    "i = i + 1;",
    "end;",
    "i = i + 1;",
    "while i <= #queue do ",
    "redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i]);",
    "i = i + 1;",
    "end;",
    "redis.call('zrem', KEYS[2], ARGV[1]);",
    "redis.call('lrem', KEYS[1], 0, ARGV[1]);",
);

/// `RedissonFairLock.unlockInnerAsync`. KEYS: lock, queue, time-outs, channel, latch;
/// ARGV: message, lease ms, owner, now ms, publish command, latch ms.
const REDISSON_FAIR_UNLOCK: &str = concat!(
    "local val = redis.call('get', KEYS[5]); ",
    "if val ~= false then ",
    "return tonumber(val);",
    "end; ",
    "while true do ",
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);",
    "if firstThreadId2 == false then ",
    "break;",
    "end; ",
    "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);",
    "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then ",
    "redis.call('zrem', KEYS[3], firstThreadId2); ",
    "redis.call('lpop', KEYS[2]); ",
    "else ",
    "break;",
    "end; ",
    "end;",
    "if (redis.call('exists', KEYS[1]) == 0) then ",
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); ",
    "if nextThreadId ~= false then ",
    "redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); ",
    "end; ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[6]); ",
    "return 1; ",
    "end;",
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then ",
    "return nil;",
    "end; ",
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); ",
    "if (counter > 0) then ",
    "redis.call('pexpire', KEYS[1], ARGV[2]); ",
    "redis.call('set', KEYS[5], 0, 'px', ARGV[6]); ",
    "return 0; ",
    "end; ",
    "redis.call('del', KEYS[1]); ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[6]); ",
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); ",
    "if nextThreadId ~= false then ",
    "redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); ",
    "end; ",
    "return 1; ",
);

/// `RedissonReadLock.tryLockInnerAsync`. KEYS: lock, hold-key prefix; ARGV: lease ms, owner,
/// owner's write field.
const REDISSON_READ_LOCK: &str = concat!(
    "local mode = redis.call('hget', KEYS[1], 'mode'); ",
    "if (mode == false) then ",
    "redis.call('hset', KEYS[1], 'mode', 'read'); ",
    "redis.call('hset', KEYS[1], ARGV[2], 1); ",
    "redis.call('set', KEYS[2] .. ':1', 1); ",
    "redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); ",
    "redis.call('pexpire', KEYS[1], ARGV[1]); ",
    "return nil; ",
    "end; ",
    "if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then ",
    "local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); ",
    "local key = KEYS[2] .. ':' .. ind;",
    "redis.call('set', key, 1); ",
    "redis.call('pexpire', key, ARGV[1]); ",
    "local remainTime = redis.call('pttl', KEYS[1]); ",
    "redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); ",
    "return nil; ",
    "end;",
    "return redis.call('pttl', KEYS[1]);",
);

/// `RedissonReadLock.unlockInnerAsync`. KEYS: lock, channel, hold-key prefix, key prefix, latch;
/// ARGV: message, owner, publish command, latch ms.
const REDISSON_READ_UNLOCK: &str = concat!(
    "local val = redis.call('get', KEYS[5]); ",
    "if val ~= false then ",
    "return tonumber(val);",
    "end; ",
    "local mode = redis.call('hget', KEYS[1], 'mode'); ",
    "if (mode == false) then ",
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[4]); ",
    "return nil; ",
    "end; ",
    "local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); ",
    "if (lockExists == 0) then ",
    "return nil;",
    "end; ",
    "local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); ",
    "if (counter == 0) then ",
    "redis.call('hdel', KEYS[1], ARGV[2]); ",
    "end;",
    "redis.call('del', KEYS[3] .. ':' .. (counter+1)); ",
    "if (redis.call('hlen', KEYS[1]) > 1) then ",
    "local maxRemainTime = -3; ",
    "local keys = redis.call('hkeys', KEYS[1]); ",
    "for n, key in ipairs(keys) do ",
    "counter = tonumber(redis.call('hget', KEYS[1], key)); ",
    "if type(counter) == 'number' then ",
    "for i=counter, 1, -1 do ",
    "local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); ",
    "maxRemainTime = math.max(remainTime, maxRemainTime);",
    "end; ",
    "end; ",
    "end; ",
    "if maxRemainTime > 0 then ",
    "redis.call('pexpire', KEYS[1], maxRemainTime); ",
    "redis.call('set', KEYS[5], 0, 'px', ARGV[4]); ",
    "return 0; ",
    "end;",
    "if mode == 'write' then ",
    "redis.call('set', KEYS[5], 0, 'px', ARGV[4]); ",
    "return 0;",
    "end; ",
    "end; ",
    "redis.call('del', KEYS[1]); ",
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[4]); ",
    "return 1; ",
);

/// `RedissonWriteLock.tryLockInnerAsync`. KEYS: lock; ARGV: lease ms, write field.
const REDISSON_WRITE_LOCK: &str = concat!(
    "local mode = redis.call('hget', KEYS[1], 'mode'); ",
    "if (mode == false) then ",
    "redis.call('hset', KEYS[1], 'mode', 'write'); ",
    "redis.call('hset', KEYS[1], ARGV[2], 1); ",
    "redis.call('pexpire', KEYS[1], ARGV[1]); ",
    "return nil; ",
    "end; ",
    "if (mode == 'write') then ",
    "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then ",
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); ",
    "local currentExpire = redis.call('pttl', KEYS[1]); ",
    "redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); ",
    "return nil; ",
    "end; ",
    "end;",
    "return redis.call('pttl', KEYS[1]);",
);

/// `RedissonWriteLock.unlockInnerAsync`. KEYS: lock, channel, latch; ARGV: message (1), lease
/// ms, write field, publish command, latch ms.
const REDISSON_WRITE_UNLOCK: &str = concat!(
    "local val = redis.call('get', KEYS[3]); ",
    "if val ~= false then ",
    "return tonumber(val);",
    "end; ",
    "local mode = redis.call('hget', KEYS[1], 'mode'); ",
    "if (mode == false) then ",
    "redis.call(ARGV[4], KEYS[2], ARGV[1]); ",
    "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); ",
    "return nil; ",
    "end;",
    "if (mode == 'write') then ",
    "local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); ",
    "if (lockExists == 0) then ",
    "return nil;",
    "else ",
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); ",
    "if (counter > 0) then ",
    "redis.call('pexpire', KEYS[1], ARGV[2]); ",
    "redis.call('set', KEYS[3], 0, 'px', ARGV[5]); ",
    "return 0; ",
    "else ",
    "redis.call('hdel', KEYS[1], ARGV[3]); ",
    "if (redis.call('hlen', KEYS[1]) == 1) then ",
    "redis.call('del', KEYS[1]); ",
    "redis.call(ARGV[4], KEYS[2], ARGV[1]); ",
    "else ",
    "redis.call('hset', KEYS[1], 'mode', 'read'); ",
    "end; ",
    "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); ",
    "return 1; ",
    "end; ",
    "end; ",
    "end; ",
    "return nil;",
);

/// `RedissonFencedLock.tryLockInnerAsync`, the variant that returns the token. KEYS: lock,
/// token counter; ARGV: lease ms, owner. Answers `{-1, token}` or `{pttl, -1}`.
const REDISSON_FENCED_LOCK: &str = concat!(
    "if (redis.call('exists', KEYS[1]) == 0 ",
    "or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then ",
    "local token = redis.call('incr', KEYS[2]);",
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); ",
    "redis.call('pexpire', KEYS[1], ARGV[1]); ",
    "return {-1, token}; ",
    "end; ",
    "return {redis.call('pttl', KEYS[1]), -1};",
);

/// `RedissonPermitExpirableSemaphore.tryAcquireAsync(ids, timeoutDate)` (KEYS: semaphore,
/// timeouts, channel; ARGV: permits, lease end ms, now ms, non-expiring score, publish
/// command, permit ids as bytes): `OK` when acquired, `:<soonest lease end>` or nil when not.
const REDISSON_SEMAPHORE_ACQUIRE: &str = concat!(
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); ",
    "if #expiredIds > 0 then ",
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); ",
    "local value = redis.call('incrby', KEYS[1], #expiredIds); ",
    "if tonumber(value) > 0 then ",
    "redis.call(ARGV[5], KEYS[3], value); ",
    "end;",
    "end; ",
    "local value = redis.call('get', KEYS[1]); ",
    "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then ",
    "redis.call('decrby', KEYS[1], ARGV[1]); ",
    "for i = 6, #ARGV, 1 do ",
    "redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); ",
    "end; ",
    "local ttl = redis.call('pttl', KEYS[1]); ",
    "if ttl > 0 then ",
    "redis.call('pexpire', KEYS[2], ttl); ",
    "end; ",
    "return 'OK'; ",
    "end; ",
    "local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); ",
    "if v[1] ~= nil and v[2] ~= ARGV[4] then ",
    "return ':' .. tostring(v[2]); ",
    "end ",
    "return nil;",
);

/// `RedissonPermitExpirableSemaphore.tryReleaseAsync(permitId)` (KEYS: semaphore, channel,
/// timeouts; ARGV: permit id as bytes, 1, now ms, publish command): 1 released, 0 not.
const REDISSON_SEMAPHORE_RELEASE: &str = concat!(
    "local expire = redis.call('zscore', KEYS[3], ARGV[1]);",
    "local removed = redis.call('zrem', KEYS[3], ARGV[1]);",
    "if tonumber(removed) ~= 1 then ",
    "return 0;",
    "end;",
    "local value = redis.call('incrby', KEYS[1], ARGV[2]); ",
    "redis.call(ARGV[4], KEYS[2], value); ",
    "if tonumber(expire) <= tonumber(ARGV[3]) then ",
    "return 0;",
    "end;",
    "return 1;",
);

/// `RedissonPermitExpirableSemaphore.trySetPermitsAsync` (KEYS: semaphore, channel; ARGV:
/// permits, publish command).
const REDISSON_SEMAPHORE_TRY_SET: &str = concat!(
    "local value = redis.call('get', KEYS[1]); ",
    "if (value == false) then ",
    "redis.call('set', KEYS[1], ARGV[1]); ",
    "redis.call(ARGV[2], KEYS[2], ARGV[1]); ",
    "return 1;",
    "end;",
    "return 0;",
);

/// `RedissonCountDownLatch.trySetCountAsync` (KEYS: latch, channel; ARGV: new-count message,
/// count, publish command).
const REDISSON_LATCH_TRY_SET: &str = concat!(
    "if redis.call('exists', KEYS[1]) == 0 then ",
    "redis.call('set', KEYS[1], ARGV[2]); ",
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); ",
    "return 1 ",
    "else ",
    "return 0 ",
    "end",
);

/// `RedissonCountDownLatch.countDownAsync` (KEYS: latch, channel; ARGV: zero-count message,
/// publish command).
const REDISSON_LATCH_COUNT_DOWN: &str = concat!(
    "local v = redis.call('decr', KEYS[1]);",
    "if v <= 0 then redis.call('del', KEYS[1]) end;",
    "if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;",
);

/// Redisson's score of a permit taken without a lease.
const REDISSON_NON_EXPIRING: &str = "922337203685477";

/// A Redisson client on its own connection, with one thread's owner id.
pub struct Redisson {
    con: Box<dyn redis::ConnectionLike + Send>,
    /// What Redisson announces releases with: `publish`, or on a Redis 7 cluster `spublish`.
    publish: &'static str,
    pub owner: String,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

fn latch(name: &str) -> String {
    format!(
        "redisson_unlock_latch:{{{name}}}:{}",
        uuid::Uuid::new_v4().simple()
    )
}

impl Redisson {
    pub fn new(server: &RedisServer) -> Self {
        Redisson {
            con: Box::new(server.admin()),
            publish: "publish",
            owner: format!("{}:1", uuid::Uuid::new_v4()),
        }
    }

    /// Redisson on a Redis 7 cluster (of which `urls` are nodes): scripts routed by their
    /// first key, releases announced with sharded pub/sub.
    pub fn on_cluster(urls: &[String]) -> Self {
        let con = redis::cluster::ClusterClient::new(urls.to_vec())
            .and_then(|client| client.get_connection())
            .expect("a cluster connection");
        Redisson {
            con: Box::new(con),
            publish: "spublish",
            owner: format!("{}:1", uuid::Uuid::new_v4()),
        }
    }

    fn eval<T: redis::FromRedisValue>(
        &mut self,
        script: &str,
        keys: &[&str],
        args: &[String],
    ) -> T {
        redis::cmd("EVAL")
            .arg(script)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query(&mut *self.con)
            .expect("a Redisson script")
    }

    /// `RLock.tryLock`: `None` when acquired, else the holder's PTTL.
    pub fn try_lock(&mut self, name: &str, lease: Duration) -> Option<i64> {
        let args = [lease.as_millis().to_string(), self.owner.clone()];
        self.eval(REDISSON_LOCK, &[name], &args)
    }

    /// `RLock.unlock`: 1 released, 0 still held, `None` not held.
    pub fn unlock(&mut self, name: &str) -> Option<i64> {
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let args = [
            "0".to_owned(),
            "30000".to_owned(),
            self.owner.clone(),
            self.publish.to_owned(),
            "9000".to_owned(),
        ];
        self.eval(REDISSON_UNLOCK, &[name, &channel, &latch(name)], &args)
    }

    /// `RFencedLock.tryLockAndGetToken`: `Ok(token)` when acquired, `Err(pttl)` when held.
    pub fn fenced_try_lock(&mut self, name: &str, lease: Duration) -> Result<i64, i64> {
        let token_key = format!("redisson_lock_token:{{{name}}}");
        let args = [lease.as_millis().to_string(), self.owner.clone()];
        let (first, second): (i64, i64) =
            self.eval(REDISSON_FENCED_LOCK, &[name, &token_key], &args);
        if first == -1 {
            Ok(second)
        } else {
            Err(first)
        }
    }

    /// `RFairLock.tryLock(wait, lease)`'s acquire: `None` when acquired, else a wait hint; a
    /// first call that finds the lock held joins the queue.
    pub fn fair_try_lock(&mut self, name: &str, lease: Duration, wait: Duration) -> Option<i64> {
        let queue = format!("redisson_lock_queue:{{{name}}}");
        let timeouts = format!("redisson_lock_timeout:{{{name}}}");
        let args = [
            lease.as_millis().to_string(),
            self.owner.clone(),
            wait.as_millis().to_string(),
            now_ms().to_string(),
        ];
        self.eval(REDISSON_FAIR_TRY_LOCK, &[name, &queue, &timeouts], &args)
    }

    /// `RFairLock`'s give-up: leaves the queue.
    pub fn fair_acquire_failed(&mut self, name: &str, wait: Duration) {
        let queue = format!("redisson_lock_queue:{{{name}}}");
        let timeouts = format!("redisson_lock_timeout:{{{name}}}");
        let args = [self.owner.clone(), wait.as_millis().to_string()];
        let () = self.eval(REDISSON_FAIR_ACQUIRE_FAILED, &[&queue, &timeouts], &args);
    }

    /// `RFairLock.unlock`: 1 released (or lock absent), `None` not held by this owner.
    pub fn fair_unlock(&mut self, name: &str) -> Option<i64> {
        let queue = format!("redisson_lock_queue:{{{name}}}");
        let timeouts = format!("redisson_lock_timeout:{{{name}}}");
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let args = [
            "0".to_owned(),
            "30000".to_owned(),
            self.owner.clone(),
            now_ms().to_string(),
            self.publish.to_owned(),
            "9000".to_owned(),
        ];
        self.eval(
            REDISSON_FAIR_UNLOCK,
            &[name, &queue, &timeouts, &channel, &latch(name)],
            &args,
        )
    }

    /// The channel this owner waits on for a fair lock.
    pub fn fair_channel(&self, name: &str) -> String {
        format!("redisson_lock__channel:{{{name}}}:{}", self.owner)
    }

    /// `RReadWriteLock.readLock().tryLock`: `None` when acquired, else the PTTL.
    pub fn read_lock(&mut self, name: &str, lease: Duration) -> Option<i64> {
        let prefix = format!("{{{name}}}:{}:rwlock_timeout", self.owner);
        let args = [
            lease.as_millis().to_string(),
            self.owner.clone(),
            format!("{}:write", self.owner),
        ];
        self.eval(REDISSON_READ_LOCK, &[name, &prefix], &args)
    }

    /// `RReadWriteLock.readLock().unlock`: 1 released, 0 others still read, `None` not held.
    pub fn read_unlock(&mut self, name: &str) -> Option<i64> {
        let channel = format!("redisson_rwlock:{{{name}}}");
        let prefix = format!("{{{name}}}:{}:rwlock_timeout", self.owner);
        let key_prefix = format!("{{{name}}}");
        let args = [
            "0".to_owned(),
            self.owner.clone(),
            self.publish.to_owned(),
            "9000".to_owned(),
        ];
        self.eval(
            REDISSON_READ_UNLOCK,
            &[name, &channel, &prefix, &key_prefix, &latch(name)],
            &args,
        )
    }

    /// `RReadWriteLock.writeLock().tryLock`: `None` when acquired, else the PTTL.
    pub fn write_lock(&mut self, name: &str, lease: Duration) -> Option<i64> {
        let args = [
            lease.as_millis().to_string(),
            format!("{}:write", self.owner),
        ];
        self.eval(REDISSON_WRITE_LOCK, &[name], &args)
    }

    /// `RPermitExpirableSemaphore.trySetPermits`.
    pub fn semaphore_try_set_permits(&mut self, name: &str, permits: u32) -> bool {
        let channel = format!("redisson_sc:{{{name}}}");
        let args = [permits.to_string(), self.publish.to_owned()];
        self.eval::<i64>(REDISSON_SEMAPHORE_TRY_SET, &[name, &channel], &args) == 1
    }

    /// `RPermitExpirableSemaphore.tryAcquire(leaseTime)`: the permit id (32 hex digits) when
    /// acquired; else `Err` with the soonest lease end (epoch ms), if any.
    pub fn semaphore_try_acquire(
        &mut self,
        name: &str,
        lease: Duration,
    ) -> Result<String, Option<u64>> {
        let id: [u8; 16] = *uuid::Uuid::new_v4().as_bytes();
        let timeouts = format!("{{{name}}}:timeout");
        let channel = format!("redisson_sc:{{{name}}}");
        let reply: Option<String> = redis::cmd("EVAL")
            .arg(REDISSON_SEMAPHORE_ACQUIRE)
            .arg(3)
            .arg(name)
            .arg(&timeouts)
            .arg(&channel)
            .arg(1)
            .arg(now_ms() + lease.as_millis() as u64)
            .arg(now_ms())
            .arg(REDISSON_NON_EXPIRING)
            .arg(self.publish)
            .arg(&id[..])
            .query(&mut *self.con)
            .expect("Redisson's permit acquire");
        match reply.as_deref() {
            Some("OK") => Ok(id.iter().map(|byte| format!("{byte:02x}")).collect()),
            Some(soonest) => Err(soonest.trim_start_matches(':').parse().ok()),
            None => Err(None),
        }
    }

    /// `RPermitExpirableSemaphore.tryRelease(permitId)`: whether it was held (and live).
    pub fn semaphore_release(&mut self, name: &str, permit_id: &str) -> bool {
        let bytes: Vec<u8> = (0..permit_id.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&permit_id[at..at + 2], 16).expect("hex"))
            .collect();
        let timeouts = format!("{{{name}}}:timeout");
        let channel = format!("redisson_sc:{{{name}}}");
        let released: i64 = redis::cmd("EVAL")
            .arg(REDISSON_SEMAPHORE_RELEASE)
            .arg(3)
            .arg(name)
            .arg(&channel)
            .arg(&timeouts)
            .arg(&bytes[..])
            .arg(1)
            .arg(now_ms())
            .arg(self.publish)
            .query(&mut *self.con)
            .expect("Redisson's permit release");
        released == 1
    }

    /// `RCountDownLatch.trySetCount`.
    pub fn latch_try_set_count(&mut self, name: &str, count: u64) -> bool {
        let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
        let args = ["1".to_owned(), count.to_string(), self.publish.to_owned()];
        self.eval::<i64>(REDISSON_LATCH_TRY_SET, &[name, &channel], &args) == 1
    }

    /// `RCountDownLatch.countDown`.
    pub fn latch_count_down(&mut self, name: &str) {
        let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
        let args = ["0".to_owned(), self.publish.to_owned()];
        let _: Option<i64> = self.eval(REDISSON_LATCH_COUNT_DOWN, &[name, &channel], &args);
    }

    /// `RCountDownLatch.getCount`.
    pub fn latch_count(&mut self, name: &str) -> i64 {
        redis::cmd("GET")
            .arg(name)
            .query::<Option<i64>>(&mut *self.con)
            .expect("GET")
            .unwrap_or(0)
    }

    /// `RReadWriteLock.writeLock().unlock`: 1 released, 0 still held, `None` not held.
    pub fn write_unlock(&mut self, name: &str) -> Option<i64> {
        let channel = format!("redisson_rwlock:{{{name}}}");
        let args = [
            "1".to_owned(),
            "30000".to_owned(),
            format!("{}:write", self.owner),
            self.publish.to_owned(),
            "9000".to_owned(),
        ];
        self.eval(
            REDISSON_WRITE_UNLOCK,
            &[name, &channel, &latch(name)],
            &args,
        )
    }
}
