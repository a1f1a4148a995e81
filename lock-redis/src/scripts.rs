//! The Lua scripts: each lock operation is one atomic script run by `EVALSHA`.
//!
//! Every key a script touches is passed in `KEYS` and every value in `ARGV`, so the scripts
//! are constants (loaded once per server) and stay valid on a cluster slot.

use std::sync::LazyLock;

use redis::Script;

/// A script and its SHA1, computed once.
pub(crate) struct LuaScript {
    /// What the script does, for error messages.
    pub(crate) name: &'static str,
    script: Script,
}

impl LuaScript {
    fn new(name: &'static str, code: &'static str) -> Self {
        LuaScript {
            name,
            script: Script::new(code),
        }
    }

    /// The SHA1 `EVALSHA` names the script by.
    pub(crate) fn sha(&self) -> &str {
        self.script.get_hash()
    }

    /// Sends `SCRIPT LOAD`, after the server answered `NOSCRIPT` (restarted, or its script
    /// cache flushed).
    pub(crate) fn load(&self, con: &mut dyn redis::ConnectionLike) -> redis::RedisResult<String> {
        self.script.load(con)
    }
}

/// Redisson's acquire: free, or already held by this owner → count one more hold and set the
/// lease; return nil. Held by another owner → return its remaining lease (`PTTL`, -1 for none).
///
/// KEYS[1] lock · ARGV[1] lease in ms · ARGV[2] owner id.
pub(crate) static ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "acquire",
        r"
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
",
    )
});

/// A full release with Redisson's unlock latch: a latch left by an earlier attempt of the same
/// request → replay its result. Not held by this owner → nil. Else delete the lock whatever the
/// owner's count (the client counts reentrant holds itself), announce it on the channel,
/// remember the result in the latch, return 1.
///
/// KEYS[1] lock · KEYS[2] channel · KEYS[3] latch · ARGV[1] unlock message · ARGV[2] owner id ·
/// ARGV[3] latch lifetime in ms.
pub(crate) static RELEASE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "release",
        r"
local done = redis.call('get', KEYS[3])
if done ~= false then
    return tonumber(done)
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[3])
return 1
",
    )
});

/// The watchdog's batch renewal: for each lock still held by its owner, set the lease. Returns
/// per key 1 (renewed), 2 (another owner holds it now) or 0 (gone). A lock that is gone is
/// never recreated, and one another owner holds is left alone.
///
/// KEYS[i] lock i · ARGV[1] lease in ms · ARGV[i + 1] owner id of lock i.
pub(crate) static RENEW: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "renew",
        r"
local renewed = {}
for i = 1, #KEYS do
    if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
        redis.call('pexpire', KEYS[i], ARGV[1])
        renewed[i] = 1
    elseif redis.call('exists', KEYS[i]) == 1 then
        renewed[i] = 2
    else
        renewed[i] = 0
    end
end
return renewed
",
    )
});

/// A consistent snapshot of one lock: {held, held by this owner, PTTL}.
///
/// KEYS[1] lock · ARGV[1] owner id.
pub(crate) static STATUS: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "status",
        r"
if redis.call('exists', KEYS[1]) == 0 then
    return {0, 0, -2}
end
return {1, redis.call('hexists', KEYS[1], ARGV[1]), redis.call('pttl', KEYS[1])}
",
    )
});

/// Redisson's force unlock: delete the lock whoever holds it; if it existed, announce the
/// release. Returns 1 if the lock was held.
///
/// KEYS[1] lock · KEYS[2] channel · ARGV[1] unlock message.
pub(crate) static FORCE_UNLOCK: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "force unlock",
        r"
if redis.call('del', KEYS[1]) == 1 then
    redis.call('publish', KEYS[2], ARGV[1])
    return 1
end
return 0
",
    )
});

/// Builds `EVALSHA <sha> <number of keys> keys... args...`.
pub(crate) fn evalsha(script: &LuaScript, keys: &[&str], args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.sha()).arg(keys.len()).arg(keys).arg(args);
    cmd
}
