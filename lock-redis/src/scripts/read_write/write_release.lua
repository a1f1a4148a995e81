-- Release a write hold whole, with the unlock latch, and announce it; the hash stays in read mode
-- if the owner still reads. Answers 1, nil (not held) or what the latch kept from an earlier
-- attempt.
-- KEYS[1] the lock's hash, KEYS[2] its channel, KEYS[3] this request's unlock latch.
-- ARGV[1] the message announced ('1': every waiter looks again), ARGV[2] the hold's write field,
--   ARGV[3] the latch's lifetime in ms.
local done = redis.call('get', KEYS[3])
if done ~= false then
    return tonumber(done)
end
-- A hold's id is its own: a key that is not a hash (the name used as another kind) has none.
if redis.pcall('hget', KEYS[1], 'mode') ~= 'write' or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
redis.call('hdel', KEYS[1], ARGV[2])
if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
else
    redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('publish', KEYS[2], ARGV[1])
redis.call('set', KEYS[3], '1', 'px', ARGV[3])
return 1
