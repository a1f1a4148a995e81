local kind = kind_of(KEYS[1], KEYS[3])
if kind == false then
    return 0
end
if kind ~= ARGV[2] and not (kind == 'exclusive' and ARGV[2] ~= 'election') then
    return wrong_kind(kind)
end
if redis.call('del', KEYS[1]) == 1 then
    redis.call('publish', KEYS[2], ARGV[1])
    return 1
end
return 0
