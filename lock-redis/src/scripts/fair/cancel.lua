local queue = redis.call('lrange', KEYS[1], '0', '-1')
local at = 0
for i = 1, #queue do
    if queue[i] == ARGV[1] then
        at = i
        break
    end
end
if at == 0 then
    return 0
end
for i = at + 1, #queue do
    redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i])
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], '0', ARGV[1])
redis.call('hdel', KEYS[5], ARGV[1])
if at == 1 and redis.call('exists', KEYS[3]) == 0 then
    local first_two = redis.call('lrange', KEYS[1], '0', '1')
    for i = 1, #first_two do
        redis.call('publish', KEYS[4] .. ':' .. first_two[i], ARGV[3])
    end
end
return 1
