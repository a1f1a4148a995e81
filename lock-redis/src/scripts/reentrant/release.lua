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
