local mode = kind_of(KEYS[1], KEYS[3])
if mode ~= false and mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
if mode == 'write' then
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[2], ARGV[1])
    return 1
end
return 0
