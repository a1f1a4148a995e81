-- Release a hold's whole read share, with the unlock latch, and announce it; the hash then lives
-- as long as the longest hold left. Answers 1, nil (not held, or all its hold keys had run out)
-- or what the latch kept from an earlier attempt.
-- KEYS[1] the lock's hash, KEYS[2] its channel, KEYS[3] this hold's hold-key prefix,
--   KEYS[4] what every owner's hold keys start with, KEYS[5] this request's unlock latch.
-- ARGV[1] the unlock message, ARGV[2] the hold id, ARGV[3] the latch's lifetime in ms.
local done = redis.call('get', KEYS[5])
if done ~= false then
    return tonumber(done)
end
-- A hold's id is its own: a key that is not a hash (the name used as another kind) has none.
local mode = redis.pcall('hget', KEYS[1], 'mode')
if type(mode) ~= 'string' then
    return nil
end
local count = redis.call('hget', KEYS[1], ARGV[2])
if count == false then
    return nil
end
-- A read hold whose every lease key ran out is over (its field stays while other readers keep
-- the hash): gone, not released.
local live = false
for i = 1, tonumber(count) do
    if redis.call('del', KEYS[3] .. ':' .. i) == 1 then
        live = true
    end
end
redis.call('hdel', KEYS[1], ARGV[2])
if not live then
    if redis.call('hlen', KEYS[1]) <= 1 then
        redis.call('del', KEYS[1])
    end
    return nil
end
redis.call('set', KEYS[5], '1', 'px', ARGV[3])
-- Announced only as the last live reader leaves (Redisson's rule): while other readers read, a
-- waiting writer is still refused, and readers wait for writers only.
if redis.call('hlen', KEYS[1]) > 1 then
    local longest = -3
    local fields = redis.call('hkeys', KEYS[1])
    for _, field in ipairs(fields) do
        local n = tonumber(redis.call('hget', KEYS[1], field))
        if type(n) == 'number' then
            for i = n, 1, -1 do
                local left = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
                longest = math.max(longest, left)
            end
        end
    end
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
        return 1
    end
    if mode == 'write' then
        return 1
    end
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
