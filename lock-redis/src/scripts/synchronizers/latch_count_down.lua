-- Count a latch down by one; at zero or below the count and its mark go, and reaching zero is
-- announced. Answers the count after, as Redis keeps it ('0' at least).
-- KEYS[1] the count, KEYS[2] the fair time-outs of that name, KEYS[3] the kind mark,
--   KEYS[4] the latch's channel.
-- ARGV none.
-- Refuse a name in use as another kind (Redisson's unmarked counters are accepted).
local kind = kind_of(KEYS[1], KEYS[2], KEYS[3])
if kind ~= false and kind ~= 'latch' and kind ~= 'counter' then
    return wrong_kind(kind)
end
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
