-- A count-down latch's count, as Redis keeps it ('0' when it has none); a name in use as another
-- kind is refused.
-- KEYS[1] the count, KEYS[2] the fair time-outs of that name, KEYS[3] the kind mark.
-- ARGV none.
-- Refuse a name in use as another kind (Redisson's unmarked counters are accepted).
local kind = kind_of(KEYS[1], KEYS[2], KEYS[3])
if kind ~= false and kind ~= 'latch' and kind ~= 'counter' then
    return wrong_kind(kind)
end
local count = redis.call('get', KEYS[1])
if count == false or string.sub(count, 1, 1) == '-' then
    return '0'
end
return count
