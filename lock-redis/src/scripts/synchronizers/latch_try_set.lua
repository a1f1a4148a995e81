-- Set a latch's count if it has none, mark the name a latch and announce it. Answers 1 if it set
-- the count, 0 if one was set; a request sent again after a lost reply answers as it first did.
-- KEYS[1] the count, KEYS[2] the fair time-outs of that name, KEYS[3] the kind mark,
--   KEYS[4] the latch's channel, KEYS[5] this request's latch.
-- ARGV[1] the count to set, ARGV[2] the request latch's lifetime in ms.
local done = redis.call('get', KEYS[5])
if done ~= false then
    return tonumber(done)
end
-- Refuse a name in use as another kind (Redisson's unmarked counters are accepted).
local kind = kind_of(KEYS[1], KEYS[2], KEYS[3])
if kind ~= false and kind ~= 'latch' and kind ~= 'counter' then
    return wrong_kind(kind)
end
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call('set', KEYS[3], 'latch')
    redis.call('publish', KEYS[4], '1')
    redis.call('set', KEYS[5], '1', 'px', ARGV[2])
    return 1
end
redis.call('set', KEYS[5], '0', 'px', ARGV[2])
return 0
