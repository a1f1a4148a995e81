local kind = false
if redis.call('exists', KEYS[1], KEYS[2]) == 1 then
    kind = kind_of(KEYS[1], KEYS[3])
end
if kind ~= false and kind ~= 'lock' and kind ~= 'exclusive' then
    return wrong_kind(kind)
end
if kind ~= false then
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        redis.call('hincrby', KEYS[1], ARGV[2], '1')
        if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[1], ARGV[1])
        end
        return {-1, tonumber(redis.call('get', KEYS[4]) or '0')}
    end
    return {redis.call('pttl', KEYS[1]), -1}
end
local token = next_token(KEYS[4])
redis.call('hset', KEYS[1], ARGV[2], '1', 'mode', 'lock')
redis.call('pexpire', KEYS[1], ARGV[1])
return {-1, token}
