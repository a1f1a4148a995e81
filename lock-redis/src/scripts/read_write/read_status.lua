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
