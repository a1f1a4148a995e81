-- Whether a count-down latch is open: nil (open: no count, or one at zero or below) or -1
-- (counting); a name in use as another kind is refused.
-- KEYS[1] the count, KEYS[2] the fair time-outs of that name, KEYS[3] the kind mark.
-- ARGV none.
-- Refuse a name in use as another kind (Redisson's unmarked counters are accepted).
local kind = kind_of(KEYS[1], KEYS[2], KEYS[3])
if kind ~= false and kind ~= 'latch' and kind ~= 'counter' then
    return wrong_kind(kind)
end
local count = redis.call('get', KEYS[1])
if count == false or string.sub(count, 1, 1) == '-' or count == '0' then
    return nil
end
return -1
