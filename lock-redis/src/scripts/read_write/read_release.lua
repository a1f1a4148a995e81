local done = redis.call('get', KEYS[5])
if done ~= false then
    return tonumber(done)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    return nil
end
local count = redis.call('hget', KEYS[1], ARGV[2])
if count == false then
    return nil
end
redis.call('hdel', KEYS[1], ARGV[2])
for i = 1, tonumber(count) do
    redis.call('del', KEYS[3] .. ':' .. i)
end
redis.call('set', KEYS[5], '1', 'px', ARGV[3])
redis.call('publish', KEYS[2], ARGV[1])
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
return 1
