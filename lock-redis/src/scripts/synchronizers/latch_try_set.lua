-- Refuse a name in use as another kind (Redisson's unmarked counters are accepted).
local kind = kind_of(KEYS[1], KEYS[2], KEYS[3])
if kind ~= false and kind ~= 'latch' and kind ~= 'counter' then
    return wrong_kind(kind)
end
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call('set', KEYS[3], 'latch')
    redis.call('publish', KEYS[4], '1')
    return 1
end
return 0
