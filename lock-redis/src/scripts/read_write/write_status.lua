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
