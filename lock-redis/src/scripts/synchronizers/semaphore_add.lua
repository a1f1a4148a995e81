-- Add permits, announce them and mark the name a semaphore, the permits whose lease ended given
-- back first. Answers the permits available after, as Redis keeps the number, or DLOCK_INVALID
-- (more than Redis counts; nothing changed).
-- KEYS[1] the permits available, KEYS[2] the fair time-outs of that name, KEYS[3] the kind mark,
--   KEYS[4] the permits held (permit id -> lease end), KEYS[5] the semaphore's channel.
-- ARGV[1] the permits to add.
-- Refuse a name in use as another kind (Redisson's unmarked counters are accepted).
local kind = kind_of(KEYS[1], KEYS[2], KEYS[3])
if kind ~= false and kind ~= 'semaphore' and kind ~= 'counter' then
    return wrong_kind(kind)
end
-- Permits whose lease ended are free again before more are counted.
local expired = redis.call('zrangebyscore', KEYS[4], '0', now)
for i = 1, #expired do
    redis.call('zrem', KEYS[4], expired[i])
end
if #expired > 0 then
    redis.call('incrby', KEYS[1], #expired)
end
local added = redis.pcall('incrby', KEYS[1], ARGV[1])
if type(added) == 'table' and added.err then
    return redis.error_reply('DLOCK_INVALID the permits would exceed what Redis counts (2^63 - 1)')
end
redis.call('set', KEYS[3], 'semaphore')
if tonumber(ARGV[1]) > 0 or #expired > 0 then
    redis.call('publish', KEYS[5], redis.call('get', KEYS[1]))
end
return redis.call('get', KEYS[1])
