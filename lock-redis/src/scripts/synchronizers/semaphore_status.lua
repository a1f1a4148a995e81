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
