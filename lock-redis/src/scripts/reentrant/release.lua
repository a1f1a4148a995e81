-- Release a reentrant, fenced or election hold whole, with the unlock latch, and announce it.
-- Answers 1, 3 (the announcement reached subscribers besides the releasing client's own), nil
-- (not held) or what the latch kept from an earlier attempt.
-- KEYS[1] the lock's hash, KEYS[2] its channel, KEYS[3] this request's unlock latch.
-- ARGV[1] the unlock message, ARGV[2] the hold id, ARGV[3] the latch's lifetime in ms,
--   ARGV[4] the releasing client's own subscriptions to the channel (0 or 1).
local done = redis.call('get', KEYS[3])
if done ~= false then
    return tonumber(done)
end
-- A hold's id is its own: a key that is not a hash (the name used as another kind) has none.
if redis.pcall('hexists', KEYS[1], ARGV[2]) ~= 1 then
    return nil
end
redis.call('del', KEYS[1])
local heard = redis.call('publish', KEYS[2], ARGV[1])
redis.call('set', KEYS[3], '1', 'px', ARGV[3])
if heard > tonumber(ARGV[4]) then
    return 3
end
return 1
