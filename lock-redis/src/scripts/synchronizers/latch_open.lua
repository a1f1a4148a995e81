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
