if redis.call('exists', KEYS[1], KEYS[2]) == 0 then
    redis.call('hset', KEYS[1], ARGV[2], '1', 'mode', 'lock')
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
local kind = kind_of(KEYS[1], KEYS[3])
if kind == false then
    redis.call('hset', KEYS[1], ARGV[2], '1', 'mode', 'lock')
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if kind ~= 'lock' and kind ~= 'exclusive' then
    return wrong_kind(kind)
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], '1')
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    return nil
end
return redis.call('pttl', KEYS[1])
