//! The fair lock (Redisson's `RedissonFairLock`): the lock hash of the reentrant lock, plus a
//! queue of waiters (a list of owner ids) and each waiter's time-out (a sorted set of owner id
//! → epoch ms), and one channel per waiter.
//!
//! A waiter's time-out is when it is taken for dead if it has not got the lock: one slot after
//! the time-out of the waiter ahead of it, and the head's one slot after the lock is free for
//! it (the holder's lease end). Each script first drops waiters at the head whose time-out has
//! passed. The time is the server's (`TIME`), so dlock clients need no wall clock; Redisson
//! clients send their own, which is why Redisson asks for clocks kept in step.
//!
//! dlock's scripts keep that anchor exact where Redisson's let it drift: a renewal moves every
//! time-out by the lease it adds, a release moves them back by the lease it did not use (the
//! lock is free for the head now), and an acquire re-anchors the rest at the new holder's lease
//! end. So a waiter whose process died holds the queue up for at most its slot after its turn
//! came. A release wakes the head and the waiter behind it, which re-reads when the head's
//! place times out: if the head is dead, it takes over one slot later.

use std::sync::LazyLock;

use super::LuaScript;

/// Lua that defines `now` (the server's time, in ms) and drops the waiters at the head of the
/// queue `$queue` whose time-out in `$timeouts` has passed (and their grant offers in
/// `$grants`).
macro_rules! drop_dead_heads {
    ($queue:literal, $timeouts:literal, $grants:literal) => {
        drop_dead_heads!($queue, $timeouts, $grants, "0")
    };
    // `$given_back`: ms every time-out is about to move back by (a release's unused lease),
    // counted when judging a head dead.
    ($queue:literal, $timeouts:literal, $grants:literal, $given_back:literal) => {
        concat!(
            "local clock = redis.call('time')\n",
            "local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)\n",
            "while true do\n",
            "    local first = redis.call('lindex', ",
            $queue,
            ", 0)\n",
            "    if first == false then break end\n",
            "    local timeout = redis.call('zscore', ",
            $timeouts,
            ", first)\n",
            "    if timeout ~= false and tonumber(timeout) - ",
            $given_back,
            " > now then break end\n",
            "    redis.call('zrem', ",
            $timeouts,
            ", first)\n",
            "    redis.call('lpop', ",
            $queue,
            ")\n",
            "    redis.call('hdel', ",
            $grants,
            ", first)\n",
            "end\n",
        )
    };
}

/// The fair acquire. A name in use as another kind (a plain or read-write lock, a
/// synchronizer) → `DLOCK_WRONGKIND`, before anything is written. Free, and this waiter is at
/// the head of the queue (or the queue is empty) → take it (the hash marked `mode` = `fair`),
/// leave the queue, and re-anchor the time-outs of everyone behind at its lease end; return
/// nil. Held by this hold → count one more hold, its lease extended to at least the one asked for (never
/// shortened; the waiters' time-outs move with it); nil. Else, if the caller will wait and is not queued yet →
/// join the queue at its end. Returns how long to wait at most before trying again without
/// being woken: until the holder's lease ends or the head waiter's time-out, whichever comes
/// first (at least 1 ms).
///
/// The queue holds waiter ids (a thread's place, kept across its attempts); the lock's field is
/// the hold's own id, which a grant takes from the offer.
///
/// KEYS[1] lock · KEYS[2] queue · KEYS[3] time-outs · ARGV[1] lease ms · ARGV[2] waiter id ·
/// ARGV[3] slot ms · ARGV[4] `1` to join the queue if held, `0` to try once · KEYS[4] grant
/// offers · ARGV[5] the grant offer (`<lease ms>:<attempt>:<hold id>`), or `0` for none: kept
/// while the waiter is queued, replaced by each of its attempts · ARGV[6] hold id.
pub(crate) static FAIR_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "fair acquire",
        concat!(
            kinds!(),
            r"
local kind = kind_of(KEYS[1], KEYS[3])
if kind ~= false and kind ~= 'fair' and kind ~= 'exclusive' then
    return wrong_kind(kind)
end
",
            drop_dead_heads!("KEYS[2]", "KEYS[3]", "KEYS[4]"),
            r"
local head = redis.call('lindex', KEYS[2], '0')
if redis.call('exists', KEYS[1]) == 0 and (head == false or head == ARGV[2]) then
    local mine = redis.call('zscore', KEYS[3], ARGV[2])
    if head ~= false then
        redis.call('lpop', KEYS[2])
    end
    redis.call('zrem', KEYS[3], ARGV[2])
    redis.call('hdel', KEYS[4], ARGV[2])
    if mine ~= false then
        local shift = now + tonumber(ARGV[1]) - tonumber(mine)
        local waiting = redis.call('zrange', KEYS[3], '0', '-1')
        for i = 1, #waiting do
            redis.call('zincrby', KEYS[3], shift, waiting[i])
        end
    end
    redis.call('hset', KEYS[1], ARGV[6], '1', 'mode', 'fair')
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[6]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[6], '1')
    local before = redis.call('pttl', KEYS[1])
    local added = tonumber(ARGV[1]) - before
    if added > 0 then
        redis.call('pexpire', KEYS[1], ARGV[1])
        if before > 0 then
            local waiting = redis.call('zrange', KEYS[3], '0', '-1')
            for i = 1, #waiting do
                redis.call('zincrby', KEYS[3], added, waiting[i])
            end
        end
    end
    return nil
end
local pttl = redis.call('pttl', KEYS[1])
if ARGV[4] == '1' and redis.call('zscore', KEYS[3], ARGV[2]) == false then
    local last = redis.call('lindex', KEYS[2], '-1')
    local ahead = false
    if last ~= false then
        ahead = redis.call('zscore', KEYS[3], last)
    end
    local base = now + math.max(pttl, 0)
    if ahead ~= false then
        base = tonumber(ahead)
    end
    redis.call('zadd', KEYS[3], base + tonumber(ARGV[3]), ARGV[2])
    redis.call('rpush', KEYS[2], ARGV[2])
    head = redis.call('lindex', KEYS[2], '0')
end
local my_timeout = redis.call('zscore', KEYS[3], ARGV[2])
if ARGV[5] ~= '0' and my_timeout ~= false then
    redis.call('hset', KEYS[4], ARGV[2], ARGV[5])
    local keep = tonumber(my_timeout) - now + tonumber(ARGV[3])
    if redis.call('pttl', KEYS[4]) < keep then
        redis.call('pexpire', KEYS[4], math.max(keep, 1))
    end
elseif my_timeout ~= false then
    redis.call('hdel', KEYS[4], ARGV[2])
end
local hint = -1
if pttl >= 0 then
    hint = pttl
end
if head ~= false and head ~= ARGV[2] then
    local timeout = redis.call('zscore', KEYS[3], head)
    if timeout ~= false then
        local left = tonumber(timeout) - now
        if hint < 0 or left < hint then
            hint = left
        end
    end
end
if hint < 0 then
    hint = tonumber(ARGV[3])
end
return math.max(hint, 1)
",
        ),
    )
});

/// The fair release, with the unlock latch: not held by this owner → nil; else delete the
/// lock, remember the result, move every time-out back by the lease left unused, drop dead
/// heads, and wake the head and the waiter behind it, each on its own channel (no other waiter
/// is woken). Returns 1.
///
/// If the head made a grant offer (a dlock waiter; see `FAIR_GRANT_PREFIX`), the lock is
/// handed to it instead: the offer's hold becomes the holder on the offer's lease, the waiter
/// leaves the queue, everyone behind is re-anchored at that lease's end, it is told with
/// `grant:<attempt>` (the attempt whose offer was granted), and the
/// waiter behind it is woken to re-read its wait (it takes over once the grant lease runs out,
/// should the granted waiter be dead). Re-anchoring makes moving the time-outs back by the
/// unused lease moot: each time-out moves once, by the sum of both shifts.
///
/// KEYS[1] lock · KEYS[2] queue · KEYS[3] time-outs · KEYS[4] channel (the waiter's id is
/// appended) · KEYS[5] grant offers · KEYS[6] latch · ARGV[1] unlock message · ARGV[2] hold
/// id · ARGV[3] latch ms.
pub(crate) static FAIR_RELEASE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "fair release",
        concat!(
            r"
local done = redis.call('get', KEYS[6])
if done ~= false then
    return tonumber(done)
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
local unused = math.max(redis.call('pttl', KEYS[1]), 0)
redis.call('del', KEYS[1])
redis.call('set', KEYS[6], '1', 'px', ARGV[3])
",
            drop_dead_heads!("KEYS[2]", "KEYS[3]", "KEYS[5]", "unused"),
            r"
local head = redis.call('lindex', KEYS[2], '0')
local offer = false
if head ~= false then
    offer = redis.call('hget', KEYS[5], head)
end
local lease = 0
local shift = -unused
local holder = false
if offer ~= false then
    local colon = string.find(offer, ':', 1, true)
    lease = tonumber(string.sub(offer, 1, colon - 1))
    offer = string.sub(offer, colon + 1)
    colon = string.find(offer, ':', 1, true)
    holder = string.sub(offer, colon + 1)
    offer = string.sub(offer, 1, colon - 1)
    local mine = redis.call('zscore', KEYS[3], head)
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], head)
    redis.call('hdel', KEYS[5], head)
    if mine ~= false then
        -- Back by the unused lease, then forward by what re-anchors the head's moved
        -- time-out at the grant lease's end: the two shifts sum to this.
        shift = now + lease - tonumber(mine)
    end
end
if shift ~= 0 then
    local waiting = redis.call('zrange', KEYS[3], '0', '-1')
    for i = 1, #waiting do
        redis.call('zincrby', KEYS[3], shift, waiting[i])
    end
end
if offer ~= false then
    redis.call('hset', KEYS[1], holder, '1', 'mode', 'fair')
    redis.call('pexpire', KEYS[1], lease)
    redis.call('publish', KEYS[4] .. ':' .. head, 'grant:' .. offer)
    -- The new head re-reads its wait: should the granted waiter be dead, the lock is its
    -- once the short grant lease runs out.
    local next = redis.call('lindex', KEYS[2], '0')
    if next ~= false then
        redis.call('publish', KEYS[4] .. ':' .. next, ARGV[1])
    end
    return 1
end
local first_two = redis.call('lrange', KEYS[2], '0', '1')
for i = 1, #first_two do
    redis.call('publish', KEYS[4] .. ':' .. first_two[i], ARGV[1])
end
return 1
",
        ),
    )
});

/// A waiter gives up (Redisson's `acquireFailed`): everyone behind it moves up one slot and it
/// leaves the queue; if it was at the head and the lock is free, the new head and the one
/// behind it are woken.
/// Returns 1 if it was queued.
///
/// KEYS[1] queue · KEYS[2] time-outs · KEYS[3] lock · KEYS[4] channel · KEYS[5] grant offers ·
/// ARGV[1] waiter id · ARGV[2] its slot ms · ARGV[3] unlock message.
pub(crate) static FAIR_CANCEL: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "fair give-up",
        r"
local queue = redis.call('lrange', KEYS[1], '0', '-1')
local at = 0
for i = 1, #queue do
    if queue[i] == ARGV[1] then
        at = i
        break
    end
end
if at == 0 then
    return 0
end
for i = at + 1, #queue do
    redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i])
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], '0', ARGV[1])
redis.call('hdel', KEYS[5], ARGV[1])
if at == 1 and redis.call('exists', KEYS[3]) == 0 then
    local first_two = redis.call('lrange', KEYS[1], '0', '1')
    for i = 1, #first_two do
        redis.call('publish', KEYS[4] .. ':' .. first_two[i], ARGV[3])
    end
end
return 1
",
    )
});

/// Force unlock of a fair lock: drop dead heads, delete the lock, wake the head. Returns 1 if
/// the lock was held.
///
/// KEYS[1] lock · KEYS[2] queue · KEYS[3] time-outs · KEYS[4] channel · KEYS[5] grant offers ·
/// ARGV[1] unlock message.
pub(crate) static FAIR_FORCE_UNLOCK: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "fair force unlock",
        concat!(
            kinds!(),
            r"
local kind = kind_of(KEYS[1], KEYS[3])
if kind ~= false and kind ~= 'fair' and kind ~= 'exclusive' then
    return wrong_kind(kind)
end
",
            drop_dead_heads!("KEYS[2]", "KEYS[3]", "KEYS[5]"),
            r"
if redis.call('del', KEYS[1]) == 1 then
    local head = redis.call('lindex', KEYS[2], '0')
    if head ~= false then
        redis.call('publish', KEYS[4] .. ':' .. head, ARGV[1])
    end
    return 1
end
return 0
",
        ),
    )
});

/// The watchdog's batch renewal of fair holds: as the exclusive renewal (never shortening a
/// lease), and the time-outs of the lock's waiters move by the lease added, so a waiter's place still times out one slot
/// after the lock is free for it. Returns per lock 1 (renewed), 2 (another owner holds it) or
/// 0 (gone).
///
/// KEYS[3i-2] lock i · KEYS[3i-1] its queue · KEYS[3i] its time-outs · ARGV[1] lease ms ·
/// ARGV[i + 1] owner id of lock i.
pub(crate) static FAIR_RENEW: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "fair renew",
        r"
local renewed = {}
for i = 1, #KEYS, 3 do
    local owner = ARGV[(i + 2) / 3 + 1]
    local result = 0
    if redis.pcall('hexists', KEYS[i], owner) == 1 then
        local before = redis.call('pttl', KEYS[i])
        local added = tonumber(ARGV[1]) - before
        if added > 0 then
            redis.call('pexpire', KEYS[i], ARGV[1])
            if before > 0 then
                local waiting = redis.call('zrange', KEYS[i + 2], '0', '-1')
                for w = 1, #waiting do
                    redis.call('zincrby', KEYS[i + 2], added, waiting[w])
                end
            end
        end
        result = 1
    elseif redis.call('exists', KEYS[i]) == 1 then
        result = 2
    end
    table.insert(renewed, result)
end
return renewed
",
    )
});
