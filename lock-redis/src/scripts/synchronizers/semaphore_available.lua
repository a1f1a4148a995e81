-- The permits available, expired permits given back (and announced) first, as Redis keeps the
-- number ('0' when none is set).
-- KEYS[1] the permits available, KEYS[2] the fair time-outs of that name, KEYS[3] the kind mark,
--   KEYS[4] the permits held (permit id -> lease end), KEYS[5] the semaphore's channel.
-- ARGV none.
-- Refuse a name in use as another kind (Redisson's unmarked counters are accepted).
local kind = kind_of(KEYS[1], KEYS[2], KEYS[3])
if kind ~= false and kind ~= 'semaphore' and kind ~= 'counter' then
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
return redis.call('get', KEYS[1]) or '0'
