//! The synchronizers: the semaphore with leased permits (Redisson's
//! `RPermitExpirableSemaphore`), the count-down latch (Redisson's `RCountDownLatch`) and the
//! leader election (dlock's own layout).
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
//! Both keep a number at the name, so dlock marks which it is with `dlock_kind:{<name>}`
//! (`semaphore` or `latch`), written with the number and gone with it: a name counted as one
//! is refused as the other. Counts are returned as the strings Redis keeps (a Lua number is a
//! double, exact only up to 2^53); a count Redis cannot keep (`INCRBY` past 2^63 − 1) is
//! refused with `DLOCK_INVALID`.
//!
//! An election is a hash at `<name>`, marked `mode` = `election`, whose other field is the
//! leader's hold id, valued with its candidate id, with the leadership's lease; its token
//! counter `dlock_election_token:{<name>}`; its channel `dlock_election_channel:{<name>}`. Its
//! release, renewal, status and force unlock are the exclusive lock's scripts on that hash.

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

/// Lua that refuses a name in use as another kind than `$accepted` (`semaphore` or `latch`;
/// Redisson's unmarked counters are accepted by both; a string that is not a count by
/// neither); the keys are the common first ones of both kinds' steps: `KEYS[1]` the number,
/// `KEYS[2]` the fair time-outs of that name, `KEYS[3]` the mark. Defines `kind`.
macro_rules! counter_kind {
    ($accepted:literal) => {
        concat!(
            kinds!(),
            "local kind = kind_of(KEYS[1], KEYS[2], KEYS[3])\n",
            "if kind ~= false and kind ~= '",
            $accepted,
            "' and kind ~= 'counter' then\n",
            "    return wrong_kind(kind)\n",
            "end\n",
        )
    };
}

/// Lua that gives back the permits whose lease ended (`KEYS[1]` available, `KEYS[4]` held,
/// `KEYS[5]` channel), announcing the permits available, as Redisson's scripts do.
macro_rules! reclaim {
    () => {
        r"
local expired = redis.call('zrangebyscore', KEYS[4], '0', now)
if #expired > 0 then
    for i = 1, #expired do
        redis.call('zrem', KEYS[4], expired[i])
    end
    local value = redis.call('incrby', KEYS[1], #expired)
    if tonumber(value) > 0 then
        redis.call('publish', KEYS[5], value)
    end
end
"
    };
}

/// A permit acquire: a name in use as another kind → `DLOCK_WRONGKIND`; give back expired
/// permits; the same permit again (a retried request) → its lease extended (never shortened),
/// nil; a permit available → take it with its lease, nil; else how long until the soonest
/// permit lease ends (-1 if none does).
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] held · KEYS[5] channel ·
/// ARGV[1] lease ms · ARGV[2] permit id.
pub(crate) static SEMAPHORE_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "permit acquire",
        concat!(
            counter_kind!("semaphore"),
            preamble!(),
            reclaim!(),
            r"
local id = permit_bytes(ARGV[2])
local expires = now + tonumber(ARGV[1])
local mine = redis.call('zscore', KEYS[4], id)
if mine ~= false then
    if tonumber(mine) < expires then
        redis.call('zadd', KEYS[4], expires, id)
    end
    return nil
end
local available = redis.call('get', KEYS[1])
if available ~= false and tonumber(available) >= 1 then
    redis.call('decrby', KEYS[1], '1')
    redis.call('zadd', KEYS[4], expires, id)
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[4], ttl)
    end
    return nil
end
local first = redis.call('zrange', KEYS[4], '0', '0', 'WITHSCORES')
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
/// announced; nil if its lease had ended already (it is given back all the same), else 1. A
/// permit's id is its own, so the step acts on that permit alone, whenever it arrives.
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] held · KEYS[5] channel ·
/// KEYS[6] latch · ARGV[1] permit id · ARGV[2] latch ms.
pub(crate) static SEMAPHORE_RELEASE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "permit release",
        concat!(
            preamble!(),
            r"
local done = redis.call('get', KEYS[6])
if done ~= false then
    return tonumber(done)
end
local id = permit_bytes(ARGV[1])
local expires = redis.call('zscore', KEYS[4], id)
if expires == false then
    return nil
end
redis.call('zrem', KEYS[4], id)
local value = redis.call('incrby', KEYS[1], '1')
redis.call('publish', KEYS[5], value)
if tonumber(expires) <= now then
    return nil
end
redis.call('set', KEYS[6], '1', 'px', ARGV[2])
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
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] held · KEYS[5] channel ·
/// KEYS[6] latch · ARGV[1] permit id · ARGV[2] latch ms · ARGV[3] successor's permit id ·
/// ARGV[4] successor's lease ms.
pub(crate) static SEMAPHORE_HAND_OVER: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "permit hand-over",
        concat!(
            preamble!(),
            r"
local done = redis.call('get', KEYS[6])
if done ~= false then
    return tonumber(done)
end
local id = permit_bytes(ARGV[1])
local expires = redis.call('zscore', KEYS[4], id)
if expires == false then
    return nil
end
redis.call('zrem', KEYS[4], id)
if tonumber(expires) <= now then
    local value = redis.call('incrby', KEYS[1], '1')
    redis.call('publish', KEYS[5], value)
    return nil
end
redis.call('zadd', KEYS[4], now + tonumber(ARGV[4]), permit_bytes(ARGV[3]))
redis.call('set', KEYS[6], '2', 'px', ARGV[2])
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
/// remaining lease (or the soonest one's), -2 if none}; a name in use as another kind →
/// `DLOCK_WRONGKIND`.
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] held · ARGV[1] permit
/// id.
pub(crate) static SEMAPHORE_STATUS: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "permit status",
        concat!(
            counter_kind!("semaphore"),
            preamble!(),
            r"
local mine = redis.call('zscore', KEYS[4], permit_bytes(ARGV[1]))
if mine ~= false and tonumber(mine) > now then
    return {1, 1, tonumber(mine) - now}
end
local first = redis.call('zrangebyscore', KEYS[4], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
if first[1] == nil then
    return {0, 0, -2}
end
return {1, 0, tonumber(first[2]) - now}
",
        ),
    )
});

/// Sets the permits if they were never set (Redisson's `trySetPermits`), marking the name a
/// semaphore: 1 if it did.
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] channel · ARGV[1]
/// permits.
pub(crate) static SEMAPHORE_TRY_SET: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "set permits",
        concat!(
            counter_kind!("semaphore"),
            r"
if redis.call('get', KEYS[1]) == false then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call('set', KEYS[3], 'semaphore')
    redis.call('publish', KEYS[4], ARGV[1])
    return 1
end
return 0
",
        ),
    )
});

/// Adds permits (Redisson's `addPermits`), announcing them, marking the name a semaphore; the
/// permits available after, as Redis keeps the number. More than Redis can count →
/// `DLOCK_INVALID`, nothing changed.
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] channel · ARGV[1]
/// permits.
pub(crate) static SEMAPHORE_ADD: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "add permits",
        concat!(
            counter_kind!("semaphore"),
            r"
local added = redis.pcall('incrby', KEYS[1], ARGV[1])
if type(added) == 'table' and added.err then
    return redis.error_reply('DLOCK_INVALID the permits would exceed what Redis counts (2^63 - 1)')
end
redis.call('set', KEYS[3], 'semaphore')
if tonumber(ARGV[1]) > 0 then
    redis.call('publish', KEYS[4], ARGV[1])
end
return redis.call('get', KEYS[1])
",
        ),
    )
});

/// The permits available now, expired ones given back first (Redisson's
/// `availablePermits`), as Redis keeps the number.
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] held · KEYS[5] channel.
pub(crate) static SEMAPHORE_AVAILABLE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "available permits",
        concat!(
            counter_kind!("semaphore"),
            preamble!(),
            reclaim!(),
            r"
return redis.call('get', KEYS[1]) or '0'
",
        ),
    )
});

/// Whether the latch is open: count missing or at most zero → nil (taken), else -1 (held, no
/// lease known); a name in use as another kind → `DLOCK_WRONGKIND`.
///
/// KEYS[1] count · KEYS[2] fair time-outs · KEYS[3] mark.
pub(crate) static LATCH_OPEN: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "latch open",
        concat!(
            counter_kind!("latch"),
            r"
local count = redis.call('get', KEYS[1])
if count == false or string.sub(count, 1, 1) == '-' or count == '0' then
    return nil
end
return -1
",
        ),
    )
});

/// Redisson's `trySetCount`: no count → set it, mark the name a latch, and announce `1`; 1 if
/// it did.
///
/// KEYS[1] count · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] channel · ARGV[1] count.
pub(crate) static LATCH_TRY_SET: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "set count",
        concat!(
            counter_kind!("latch"),
            r"
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call('set', KEYS[3], 'latch')
    redis.call('publish', KEYS[4], '1')
    return 1
end
return 0
",
        ),
    )
});

/// Redisson's `countDown`: one down; at zero or below the count (and its mark) goes, and
/// reaching zero is announced with `0`. The count after, as Redis keeps it (`0` at least). A
/// latch that is open already stays so.
///
/// KEYS[1] count · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] channel.
pub(crate) static LATCH_COUNT_DOWN: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "count down",
        concat!(
            counter_kind!("latch"),
            r"
if kind == false then
    return '0'
end
local v = redis.call('decr', KEYS[1])
if v <= 0 then
    redis.call('del', KEYS[1], KEYS[3])
    if v == 0 then
        redis.call('publish', KEYS[4], '0')
    end
    return '0'
end
return redis.call('get', KEYS[1])
",
        ),
    )
});

/// The latch's count, as Redis keeps it (`0` when it has none).
///
/// KEYS[1] count · KEYS[2] fair time-outs · KEYS[3] mark.
pub(crate) static LATCH_COUNT: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "count",
        concat!(
            counter_kind!("latch"),
            r"
local count = redis.call('get', KEYS[1])
if count == false or string.sub(count, 1, 1) == '-' then
    return '0'
end
return count
",
        ),
    )
});

/// A campaign: a name in use as another kind → `DLOCK_WRONGKIND`. No leader → this hold leads
/// with its candidate id and the lease (the hash marked `mode` = `election`), takes the next
/// token (as the fenced lock's: the counter + 1, or the server's clock in µs if higher), and
/// the new leader is announced; `{-1, token}`. Already this hold's → its lease extended (never
/// shortened); `{-1, token}`. Another leader → `{PTTL, -1}`.
///
/// KEYS[1] election · KEYS[2] token counter · KEYS[3] channel · KEYS[4] fair time-outs of that
/// name · ARGV[1] lease ms · ARGV[2] hold id · ARGV[3] candidate id.
pub(crate) static ELECTION_CAMPAIGN: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "campaign",
        concat!(
            kinds!(),
            tokens!(),
            r"
local kind = kind_of(KEYS[1], KEYS[4])
if kind ~= false and kind ~= 'election' then
    return wrong_kind(kind)
end
if kind == 'election' then
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[1], ARGV[1])
        end
        return {-1, tonumber(redis.call('get', KEYS[2]) or '0')}
    end
    return {redis.call('pttl', KEYS[1]), -1}
end
local token = next_token(KEYS[2])
redis.call('hset', KEYS[1], ARGV[2], ARGV[3], 'mode', 'election')
redis.call('pexpire', KEYS[1], ARGV[1])
redis.call('publish', KEYS[3], 'leader')
return {-1, token}
",
        ),
    )
});

/// The leader: `{candidate id, token, PTTL}`, or nil when nobody leads; a name in use as
/// another kind → `DLOCK_WRONGKIND`.
///
/// KEYS[1] election · KEYS[2] token counter · KEYS[3] fair time-outs of that name.
pub(crate) static ELECTION_LEADER: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "leader",
        concat!(
            kinds!(),
            r"
local kind = kind_of(KEYS[1], KEYS[3])
if kind == false then
    return nil
end
if kind ~= 'election' then
    return wrong_kind(kind)
end
local fields = redis.call('hgetall', KEYS[1])
for i = 1, #fields, 2 do
    if fields[i] ~= 'mode' then
        return {fields[i + 1], tonumber(redis.call('get', KEYS[2]) or '0'), redis.call('pttl', KEYS[1])}
    end
end
return nil
",
        ),
    )
});
