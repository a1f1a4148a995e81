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
