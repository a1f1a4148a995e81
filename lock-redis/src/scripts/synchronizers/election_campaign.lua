local kind = kind_of(KEYS[1], KEYS[4])
if kind ~= false and kind ~= 'election' then
    return wrong_kind(kind)
end
if kind == 'election' then
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[1], ARGV[1])
        end
        return {-1, tonumber(redis.call('get', KEYS[2]) or '0')}
    end
    return {redis.call('pttl', KEYS[1]), -1}
end
local token = next_token(KEYS[2])
redis.call('hset', KEYS[1], ARGV[2], ARGV[3], 'mode', 'election')
redis.call('pexpire', KEYS[1], ARGV[1])
redis.call('publish', KEYS[3], 'leader')
return {-1, token}
