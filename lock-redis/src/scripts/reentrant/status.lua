local kind = kind_of(KEYS[1], KEYS[2])
if kind == false then
    return {0, 0, -2}
end
if kind ~= ARGV[2] and not (kind == 'exclusive' and ARGV[2] ~= 'election') then
    return wrong_kind(kind)
end
if redis.call('exists', KEYS[1]) == 0 then
    return {0, 0, -2}
end
return {1, redis.call('hexists', KEYS[1], ARGV[1]), redis.call('pttl', KEYS[1])}
