-- A snapshot of a read-write lock's write side: {someone writes, this hold writes, PTTL}; a name
-- in use as another kind is refused.
-- KEYS[1] the lock's hash, KEYS[2] the fair time-outs of that name.
-- ARGV[1] the hold's write field.
local mode = kind_of(KEYS[1], KEYS[2])
if mode == false then
    return {0, 0, -2}
end
if mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
if mode ~= 'write' then
    return {0, 0, redis.call('pttl', KEYS[1])}
end
return {1, redis.call('hexists', KEYS[1], ARGV[1]), redis.call('pttl', KEYS[1])}
