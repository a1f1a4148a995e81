-- Acquire (or extend) a permit, expired permits given back first. Answers nil (taken), the ms
-- until the soonest permit's lease ends or -1 (none free), or DLOCK_GONE (the extended permit is
-- gone).
-- KEYS[1] the permits available, KEYS[2] the fair time-outs of that name, KEYS[3] the kind mark,
--   KEYS[4] the permits held (permit id -> lease end), KEYS[5] the semaphore's channel.
-- ARGV[1] lease in ms, ARGV[2] the permit id (32 hex digits), ARGV[3] '1' for an extend of a
--   permit the owner has.
-- Refuse a name in use as another kind (Redisson's unmarked counters are accepted).
local kind = kind_of(KEYS[1], KEYS[2], KEYS[3])
if kind ~= false and kind ~= 'semaphore' and kind ~= 'counter' then
    if ARGV[3] == '1' then
        return redis.status_reply('DLOCK_GONE')
    end
    return wrong_kind(kind)
end
-- Give back the permits whose lease ended, announcing the permits available.
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
local id = permit_bytes(ARGV[2])
local expires = now + tonumber(ARGV[1])
local mine = redis.call('zscore', KEYS[4], id)
if ARGV[3] == '1' and mine == false then
    -- An extend acts only on a permit the store still has: an ended hold stays ended.
    return redis.status_reply('DLOCK_GONE')
end
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
