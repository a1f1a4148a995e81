//! The read-write lock (Redisson's `RReadWriteLock`): one hash for both sides, its `mode` field
//! `read` or `write`; a reader's field `<owner>` counts its holds, each hold a string key
//! `{name}:<owner>:rwlock_timeout:<n>` with the hold's lease; the writer's field is
//! `<owner>:write`. The hash lives as long as its longest hold. Both sides share one channel;
//! a write release publishes `1` (Redisson clients wake all their waiters on it).

use std::sync::LazyLock;

use super::LuaScript;

/// Read acquire: free → mode `read`, this hold's first count; read mode, or write mode held by
/// the caller's own write hold (a writer may read) → one more. Each count gets its own key with
/// the lease, and the hash lives at least as long. Returns nil when taken, else the hash's
/// `PTTL`. A name in use as another kind → `DLOCK_WRONGKIND`, before anything is written.
///
/// KEYS[1] lock · KEYS[2] this hold's hold-key prefix · KEYS[3] fair time-outs of that name ·
/// ARGV[1] lease ms · ARGV[2] hold id · ARGV[3] the write field of the caller's own write hold
/// (empty if it has none).
pub(crate) static READ_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "read acquire",
        concat!(
            kinds!(),
            r"
local mode = kind_of(KEYS[1], KEYS[3])
if mode ~= false and mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], '1')
    redis.call('set', KEYS[2] .. ':1', '1', 'px', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'read' or (mode == 'write' and ARGV[3] ~= '' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local n = redis.call('hincrby', KEYS[1], ARGV[2], '1')
    redis.call('set', KEYS[2] .. ':' .. n, '1', 'px', ARGV[1])
    local pttl = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(pttl, tonumber(ARGV[1])))
    return nil
end
return redis.call('pttl', KEYS[1])
",
        ),
    )
});

/// Read release of this owner's whole share, with the unlock latch: not held → nil. Else its
/// field and hold keys go; if other holds remain, the hash lives as long as the longest of them
/// (a dead reader's share ends with its own lease), or stays while a writer holds it; if none
/// remain, the hash goes. The release is announced either way (waiters re-read the lease they
/// wait for). Returns 1.
///
/// KEYS[1] lock · KEYS[2] channel · KEYS[3] this owner's hold-key prefix · KEYS[4] hold-key
/// prefix of every owner · KEYS[5] latch · ARGV[1] message · ARGV[2] owner id · ARGV[3] latch ms.
pub(crate) static READ_RELEASE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "read release",
        r"
local done = redis.call('get', KEYS[5])
if done ~= false then
    return tonumber(done)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    return nil
end
local count = redis.call('hget', KEYS[1], ARGV[2])
if count == false then
    return nil
end
redis.call('hdel', KEYS[1], ARGV[2])
for i = 1, tonumber(count) do
    redis.call('del', KEYS[3] .. ':' .. i)
end
redis.call('set', KEYS[5], '1', 'px', ARGV[3])
redis.call('publish', KEYS[2], ARGV[1])
if redis.call('hlen', KEYS[1]) > 1 then
    local longest = -3
    local fields = redis.call('hkeys', KEYS[1])
    for _, field in ipairs(fields) do
        local n = tonumber(redis.call('hget', KEYS[1], field))
        if type(n) == 'number' then
            for i = n, 1, -1 do
                local left = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
                longest = math.max(longest, left)
            end
        end
    end
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
        return 1
    end
    if mode == 'write' then
        return 1
    end
end
redis.call('del', KEYS[1])
return 1
",
    )
});

/// Renewal of read holds, in a batch: for each (lock, hold-key prefix) still held by its owner,
/// every hold key of that owner that is left is extended to at least the lease (never
/// shortened), and the hash lives at least as long. Only the owner's own holds are extended:
/// another reader that died still runs out. The owner's share is there as long as one of its
/// hold keys is (the hash outlives the longest of them). Returns per pair 1 (renewed), 2 (held
/// by others only) or 0 (gone, or every one of its holds had already run out).
///
/// KEYS[2i-1] lock i · KEYS[2i] its owner's hold-key prefix · ARGV[1] lease ms ·
/// ARGV[i + 1] owner id of hold i.
pub(crate) static READ_RENEW: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "read renew",
        r"
local renewed = {}
for i = 1, #KEYS, 2 do
    local owner = ARGV[(i + 1) / 2 + 1]
    local count = redis.pcall('hget', KEYS[i], owner)
    local result = 0
    if type(count) == 'string' then
        local lease = tonumber(ARGV[1])
        for c = 1, tonumber(count) do
            local key = KEYS[i + 1] .. ':' .. c
            local left = redis.call('pttl', key)
            if left ~= -2 then
                result = 1
                if left < lease then
                    redis.call('pexpire', key, ARGV[1])
                end
            end
        end
        if result == 1 and redis.call('pttl', KEYS[i]) < lease then
            redis.call('pexpire', KEYS[i], ARGV[1])
        end
    elseif redis.call('exists', KEYS[i]) == 1 then
        result = 2
    end
    table.insert(renewed, result)
end
return renewed
",
    )
});

/// A snapshot of the read side: {someone reads, this hold reads, PTTL}.
///
/// KEYS[1] lock · KEYS[2] fair time-outs of that name · ARGV[1] hold id.
pub(crate) static READ_STATUS: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "read status",
        concat!(
            kinds!(),
            r"
local mode = kind_of(KEYS[1], KEYS[2])
if mode == false then
    return {0, 0, -2}
end
if mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
local reading = 0
if mode == 'read' or redis.call('hlen', KEYS[1]) > 2 then
    reading = 1
end
return {reading, redis.call('hexists', KEYS[1], ARGV[1]), redis.call('pttl', KEYS[1])}
",
        ),
    )
});

/// Force unlock of the read side (Redisson's): in read mode, delete the lock and announce it.
/// Returns 1 if it was read-locked.
///
/// KEYS[1] lock · KEYS[2] channel · KEYS[3] fair time-outs of that name · ARGV[1] message.
pub(crate) static READ_FORCE_UNLOCK: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "read force unlock",
        concat!(
            kinds!(),
            r"
local mode = kind_of(KEYS[1], KEYS[3])
if mode ~= false and mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
if mode == 'read' then
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[2], ARGV[1])
    return 1
end
return 0
",
        ),
    )
});

/// Write acquire: free → mode `write`, this hold's write field; write mode held by this hold
/// → one more count, the hash living at least the lease. Returns nil when taken, else the
/// hash's `PTTL`. A name in use as another kind → `DLOCK_WRONGKIND`, before anything is
/// written.
///
/// KEYS[1] lock · KEYS[2] fair time-outs of that name · ARGV[1] lease ms · ARGV[2] the hold's
/// write field.
pub(crate) static WRITE_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "write acquire",
        concat!(
            kinds!(),
            r"
local mode = kind_of(KEYS[1], KEYS[2])
if mode ~= false and mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], '1')
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], '1')
    local pttl = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(pttl, tonumber(ARGV[1])))
    return nil
end
return redis.call('pttl', KEYS[1])
",
        ),
    )
});

/// Write release of this owner's whole hold, with the unlock latch: not held → nil. Else the
/// write field goes; the hash goes too unless this owner still reads (then mode `read`: a
/// downgrade). Announced with `1`, so every waiter (readers may all come in) looks again.
/// Returns 1.
///
/// KEYS[1] lock · KEYS[2] channel · KEYS[3] latch · ARGV[1] message (`1`) · ARGV[2] the owner's
/// write field · ARGV[3] latch ms.
pub(crate) static WRITE_RELEASE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "write release",
        r"
local done = redis.call('get', KEYS[3])
if done ~= false then
    return tonumber(done)
end
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
redis.call('hdel', KEYS[1], ARGV[2])
if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
else
    redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('publish', KEYS[2], ARGV[1])
redis.call('set', KEYS[3], '1', 'px', ARGV[3])
return 1
",
    )
});

/// A snapshot of the write side: {someone writes, this hold writes, PTTL}.
///
/// KEYS[1] lock · KEYS[2] fair time-outs of that name · ARGV[1] the hold's write field.
pub(crate) static WRITE_STATUS: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "write status",
        concat!(
            kinds!(),
            r"
local mode = kind_of(KEYS[1], KEYS[2])
if mode == false then
    return {0, 0, -2}
end
if mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
if mode ~= 'write' then
    return {0, 0, redis.call('pttl', KEYS[1])}
end
return {1, redis.call('hexists', KEYS[1], ARGV[1]), redis.call('pttl', KEYS[1])}
",
        ),
    )
});

/// Force unlock of the write side (Redisson's): in write mode, delete the lock and announce it
/// with `1`. Returns 1 if it was write-locked.
///
/// KEYS[1] lock · KEYS[2] channel · KEYS[3] fair time-outs of that name · ARGV[1] message (`1`).
pub(crate) static WRITE_FORCE_UNLOCK: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "write force unlock",
        concat!(
            kinds!(),
            r"
local mode = kind_of(KEYS[1], KEYS[3])
if mode ~= false and mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
if mode == 'write' then
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[2], ARGV[1])
    return 1
end
return 0
",
        ),
    )
});
