local done = redis.call('get', KEYS[2])
if done ~= false then
    return tonumber(done)
end
-- A hold's id is its own: a key that is not a hash (the name used as another kind) has none.
if redis.pcall('hexists', KEYS[1], ARGV[1]) ~= 1 then
    return nil
end
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], ARGV[3], '1', 'mode', 'lock')
redis.call('pexpire', KEYS[1], ARGV[4])
redis.call('set', KEYS[2], '2', 'px', ARGV[2])
return 2
