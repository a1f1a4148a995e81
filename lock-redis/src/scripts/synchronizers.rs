//! The synchronizers: the semaphore with leased permits (Redisson's
//! `RPermitExpirableSemaphore`), the count-down latch (Redisson's `RCountDownLatch`) and the
//! leader election (dlock's own keys).
//!
//! The semaphore's layout is Redisson's: the available permits in a string at `<name>`, the
//! permits held in a sorted set `{<name>}:timeout` (permit id → lease end, epoch ms), releases
//! announced on `redisson_sc:{<name>}` with the permits available. A permit id is 16 bytes,
//! stored as they are (Redisson's); dlock passes it as 32 hex digits and the scripts turn it
//! into the bytes. Lease ends are the server's time (`TIME`); Redisson's clients write their
//! own wall clock, as its fair lock does.
//!
//! The latch is Redisson's: the count in a string at `<name>`, gone once it reaches zero,
//! announced on `redisson_countdownlatch__channel__{<name>}` (`0` when it reaches zero, `1`
//! when a count is set).
//!
//! An election is a hash `dlock_election:{<name>}` whose one field is the leader's owner id,
//! valued with its candidate id, with the leadership's lease; its token counter
//! `dlock_election_token:{<name>}`; its channel `dlock_election_channel:{<name>}`. Its release,
//! renewal, status and force unlock are the exclusive lock's scripts on that hash.

use std::sync::LazyLock;

use super::LuaScript;

/// Lua defining `now` (the server's time in ms) and `permit_bytes(hex)`.
macro_rules! preamble {
    () => {
        r"
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local function permit_bytes(hex)
    return (hex:gsub('..', function(pair) return string.char(tonumber(pair, 16)) end))
end
"
    };
}

/// Lua that gives back the permits whose lease ended (`KEYS[1]` available, `KEYS[2]` held,
/// `KEYS[3]` channel), announcing the permits available, as Redisson's scripts do.
macro_rules! reclaim {
    () => {
        r"
local expired = redis.call('zrangebyscore', KEYS[2], '0', now)
if #expired > 0 then
    for i = 1, #expired do
        redis.call('zrem', KEYS[2], expired[i])
    end
    local value = redis.call('incrby', KEYS[1], #expired)
    if tonumber(value) > 0 then
        redis.call('publish', KEYS[3], value)
    end
end
"
    };
}

/// A permit acquire: give back expired permits; the same permit again (a retried request) →
/// its lease extended (never shortened), nil; a permit available → take it with its lease,
/// nil; else how long until the soonest permit lease ends (-1 if none does).
///
/// KEYS[1] available · KEYS[2] held · KEYS[3] channel · ARGV[1] lease ms · ARGV[2] permit id.
pub(crate) static SEMAPHORE_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "permit acquire",
        concat!(
            preamble!(),
            reclaim!(),
            r"
local id = permit_bytes(ARGV[2])
local expires = now + tonumber(ARGV[1])
local mine = redis.call('zscore', KEYS[2], id)
if mine ~= false then
    if tonumber(mine) < expires then
        redis.call('zadd', KEYS[2], expires, id)
    end
    return nil
end
local available = redis.call('get', KEYS[1])
if available ~= false and tonumber(available) >= 1 then
    redis.call('decrby', KEYS[1], '1')
    redis.call('zadd', KEYS[2], expires, id)
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    return nil
end
local first = redis.call('zrange', KEYS[2], '0', '0', 'WITHSCORES')
-- Redisson's score of a permit taken without a lease: no end to wait for.
if first[1] ~= nil and first[2] ~= '922337203685477' then
    return math.max(tonumber(first[2]) - now, 1)
end
return -1
",
        ),
    )
});

/// A permit release, with the unlock latch: a latch left by an earlier attempt → its result.
/// The permit not held → nil. Else it goes back: the permits available go up by one and are
/// announced; nil if its lease had ended already (it is given back all the same), else 1.
///
/// KEYS[1] available · KEYS[2] held · KEYS[3] channel · KEYS[4] latch · ARGV[1] permit id ·
/// ARGV[2] latch ms.
pub(crate) static SEMAPHORE_RELEASE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "permit release",
        concat!(
            preamble!(),
            r"
local done = redis.call('get', KEYS[4])
if done ~= false then
    return tonumber(done)
end
local id = permit_bytes(ARGV[1])
local expires = redis.call('zscore', KEYS[2], id)
if expires == false then
    return nil
end
redis.call('zrem', KEYS[2], id)
local value = redis.call('incrby', KEYS[1], '1')
redis.call('publish', KEYS[3], value)
if tonumber(expires) <= now then
    return nil
end
redis.call('set', KEYS[4], '1', 'px', ARGV[2])
return 1
",
        ),
    )
});

/// A permit release that hands the permit to a waiter of the same client, with the unlock
/// latch: the permit held and live → it becomes the successor's permit with its lease, none
/// comes free, nobody is woken, 2. Not held → nil; its lease ended → given back as by the
/// release, nil.
///
/// KEYS[1] available · KEYS[2] held · KEYS[3] channel · KEYS[4] latch · ARGV[1] permit id ·
/// ARGV[2] latch ms · ARGV[3] successor's permit id · ARGV[4] successor's lease ms.
pub(crate) static SEMAPHORE_HAND_OVER: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "permit hand-over",
        concat!(
            preamble!(),
            r"
local done = redis.call('get', KEYS[4])
if done ~= false then
    return tonumber(done)
end
local id = permit_bytes(ARGV[1])
local expires = redis.call('zscore', KEYS[2], id)
if expires == false then
    return nil
end
redis.call('zrem', KEYS[2], id)
if tonumber(expires) <= now then
    local value = redis.call('incrby', KEYS[1], '1')
    redis.call('publish', KEYS[3], value)
    return nil
end
redis.call('zadd', KEYS[2], now + tonumber(ARGV[4]), permit_bytes(ARGV[3]))
redis.call('set', KEYS[4], '2', 'px', ARGV[2])
return 2
",
        ),
    )
});

/// The watchdog's batch renewal of permits: for each permit still held and live, its lease is
/// extended to at least the one given (never shortened); 1. Gone, or its lease ended → 0 (it is
/// given back by the next step that finds it).
///
/// KEYS[i] held permits of semaphore i · ARGV[1] lease ms · ARGV[i + 1] permit id i.
pub(crate) static SEMAPHORE_RENEW: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "permit renew",
        concat!(
            preamble!(),
            r"
local renewed = {}
local expires = now + tonumber(ARGV[1])
for i = 1, #KEYS do
    local id = permit_bytes(ARGV[i + 1])
    local current = redis.pcall('zscore', KEYS[i], id)
    if type(current) == 'string' and tonumber(current) > now then
        if tonumber(current) < expires then
            redis.call('zadd', KEYS[i], expires, id)
        end
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
",
        ),
    )
});

/// A snapshot of a semaphore for one permit: {some permit held, this permit held, its
/// remaining lease (or the soonest one's), -2 if none}.
///
/// KEYS[1] held · ARGV[1] permit id.
pub(crate) static SEMAPHORE_STATUS: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "permit status",
        concat!(
            preamble!(),
            r"
local mine = redis.call('zscore', KEYS[1], permit_bytes(ARGV[1]))
if mine ~= false and tonumber(mine) > now then
    return {1, 1, tonumber(mine) - now}
end
local first = redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
if first[1] == nil then
    return {0, 0, -2}
end
return {1, 0, tonumber(first[2]) - now}
",
        ),
    )
});

/// Sets the permits if they were never set (Redisson's `trySetPermits`): 1 if it did.
///
/// KEYS[1] available · KEYS[2] channel · ARGV[1] permits.
pub(crate) static SEMAPHORE_TRY_SET: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "set permits",
        r"
if redis.call('get', KEYS[1]) == false then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call('publish', KEYS[2], ARGV[1])
    return 1
end
return 0
",
    )
});

/// Adds permits (Redisson's `addPermits`), announcing them; the permits available after.
///
/// KEYS[1] available · KEYS[2] channel · ARGV[1] permits.
pub(crate) static SEMAPHORE_ADD: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "add permits",
        r"
local value = tonumber(redis.call('get', KEYS[1]) or '0') + tonumber(ARGV[1])
redis.call('set', KEYS[1], value)
if tonumber(ARGV[1]) > 0 then
    redis.call('publish', KEYS[2], ARGV[1])
end
return value
",
    )
});

/// The permits available now, expired ones given back first (Redisson's
/// `availablePermits`).
///
/// KEYS[1] available · KEYS[2] held · KEYS[3] channel.
pub(crate) static SEMAPHORE_AVAILABLE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "available permits",
        concat!(
            preamble!(),
            reclaim!(),
            r"
return tonumber(redis.call('get', KEYS[1]) or '0')
",
        ),
    )
});

/// Whether the latch is open: count missing or at most zero → nil (taken), else -1 (held, no
/// lease known).
///
/// KEYS[1] count.
pub(crate) static LATCH_OPEN: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "latch open",
        r"
local count = redis.call('get', KEYS[1])
if count == false or tonumber(count) <= 0 then
    return nil
end
return -1
",
    )
});

/// Redisson's `trySetCount`: no count → set it and announce `1`; 1 if it did.
///
/// KEYS[1] count · KEYS[2] channel · ARGV[1] count.
pub(crate) static LATCH_TRY_SET: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "set count",
        r"
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call('publish', KEYS[2], '1')
    return 1
end
return 0
",
    )
});

/// Redisson's `countDown`: one down; at zero or below the count goes, and reaching zero is
/// announced with `0`. The count after (0 at least).
///
/// KEYS[1] count · KEYS[2] channel.
pub(crate) static LATCH_COUNT_DOWN: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "count down",
        r"
local v = redis.call('decr', KEYS[1])
if v <= 0 then
    redis.call('del', KEYS[1])
end
if v == 0 then
    redis.call('publish', KEYS[2], '0')
end
return math.max(v, 0)
",
    )
});

/// The latch's count (0 when it has none).
///
/// KEYS[1] count.
pub(crate) static LATCH_COUNT: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "count",
        r"
return math.max(tonumber(redis.call('get', KEYS[1]) or '0'), 0)
",
    )
});

/// A campaign: no leader → this owner leads with its candidate id and the lease, takes the
/// next token (as the fenced lock's: the counter + 1, or the server's clock in µs if higher),
/// and the new leader is announced; `{-1, token}`. Already this owner's → its lease extended
/// (never shortened); `{-1, token}`. Another leader → `{PTTL, -1}`.
///
/// KEYS[1] election · KEYS[2] token counter · KEYS[3] channel · ARGV[1] lease ms · ARGV[2]
/// owner id · ARGV[3] candidate id.
pub(crate) static ELECTION_CAMPAIGN: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "campaign",
        r"
if redis.call('exists', KEYS[1]) == 1 then
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[1], ARGV[1])
        end
        return {-1, tonumber(redis.call('get', KEYS[2]) or '0')}
    end
    return {redis.call('pttl', KEYS[1]), -1}
end
local clock = redis.call('time')
local micros = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local token = math.max(tonumber(redis.call('get', KEYS[2]) or '0') + 1, micros)
redis.call('set', KEYS[2], string.format('%.0f', token))
redis.call('hset', KEYS[1], ARGV[2], ARGV[3])
redis.call('pexpire', KEYS[1], ARGV[1])
redis.call('publish', KEYS[3], 'leader')
return {-1, token}
",
    )
});

/// The leader: `{candidate id, token, PTTL}`, or nil when nobody leads.
///
/// KEYS[1] election · KEYS[2] token counter.
pub(crate) static ELECTION_LEADER: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "leader",
        r"
local fields = redis.call('hgetall', KEYS[1])
if #fields < 2 then
    return nil
end
return {fields[2], tonumber(redis.call('get', KEYS[2]) or '0'), redis.call('pttl', KEYS[1])}
",
    )
});
