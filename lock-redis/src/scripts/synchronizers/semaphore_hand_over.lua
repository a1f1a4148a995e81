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
