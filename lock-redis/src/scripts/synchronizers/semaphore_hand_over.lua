-- Release a permit by handing it to a successor permit with its lease (nobody is woken), with the
-- unlock latch. Answers 2, nil (not held, or its lease had ended: then it is given back) or what
-- the latch kept from an earlier attempt.
-- KEYS[1] the permits available (the fair time-outs and kind mark follow, not read), KEYS[4] the
--   permits held (permit id -> lease end), KEYS[5] the semaphore's channel, KEYS[6] this
--   request's unlock latch.
-- ARGV[1] the permit id (32 hex digits), ARGV[2] the latch's lifetime in ms, ARGV[3] the
--   successor's permit id, ARGV[4] the successor's lease in ms.
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
if tonumber(expires) <= now then
    local value = redis.call('incrby', KEYS[1], '1')
    redis.call('publish', KEYS[5], value)
    return nil
end
redis.call('zadd', KEYS[4], now + tonumber(ARGV[4]), permit_bytes(ARGV[3]))
redis.call('set', KEYS[6], '2', 'px', ARGV[2])
return 2
