-- A snapshot of a semaphore for one permit: {some permit held, this permit held, its remaining
-- lease (or the soonest one's), -2 if none}; a name in use as another kind is refused.
-- KEYS[1] the permits available, KEYS[2] the fair time-outs of that name, KEYS[3] the kind mark,
--   KEYS[4] the permits held (permit id -> lease end).
-- ARGV[1] the permit id (32 hex digits).
-- Refuse a name in use as another kind (Redisson's unmarked counters are accepted).
local kind = kind_of(KEYS[1], KEYS[2], KEYS[3])
if kind ~= false and kind ~= 'semaphore' and kind ~= 'counter' then
    return wrong_kind(kind)
end
local mine = redis.call('zscore', KEYS[4], permit_bytes(ARGV[1]))
if mine ~= false and tonumber(mine) > now then
    return {1, 1, tonumber(mine) - now}
end
local first = redis.call('zrangebyscore', KEYS[4], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
if first[1] == nil then
    return {0, 0, -2}
end
return {1, 0, tonumber(first[2]) - now}
