-- Release a permit, with the unlock latch: it goes back and the permits available are announced.
-- Answers 1, nil (not held, or its lease had ended: given back all the same) or what the latch
-- kept from an earlier attempt.
-- KEYS[1] the permits available (the fair time-outs and kind mark follow, not read), KEYS[4] the
--   permits held (permit id -> lease end), KEYS[5] the semaphore's channel, KEYS[6] this
--   request's unlock latch.
-- ARGV[1] the permit id (32 hex digits), ARGV[2] the latch's lifetime in ms.
local done = redis.call('get', KEYS[6])
if done ~= false then
    return tonumber(done)
end
local id = permit_bytes(ARGV[1])
local expires = redis.call('zscore', KEYS[4], id)
if expires == false then
    return nil
end
redis.call('zrem', KEYS[4], id)
local value = redis.call('incrby', KEYS[1], '1')
redis.call('publish', KEYS[5], value)
if tonumber(expires) <= now then
    return nil
end
redis.call('set', KEYS[6], '1', 'px', ARGV[2])
return 1
