-- A snapshot of a read-write lock's read side: {someone reads, this hold reads, PTTL}; a name in
-- use as another kind is refused.
-- KEYS[1] the lock's hash, KEYS[2] the fair time-outs of that name.
-- ARGV[1] the hold id.
local mode = kind_of(KEYS[1], KEYS[2])
if mode == false then
    return {0, 0, -2}
end
if mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
local reading = 0
if mode == 'read' or redis.call('hlen', KEYS[1]) > 2 then
    reading = 1
end
return {reading, redis.call('hexists', KEYS[1], ARGV[1]), redis.call('pttl', KEYS[1])}
