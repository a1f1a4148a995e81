-- A waiter gives up: it leaves the fair queue, everyone behind it moves up one slot, and if it was
-- the head of a free lock the first two waiters left are woken. Answers 1 if it was queued, else 0.
-- KEYS[1] the queue, KEYS[2] the time-outs, KEYS[3] the lock's hash, KEYS[4] the waiters'
--   channel prefix (':<waiter id>' appended), KEYS[5] the grant offers.
-- ARGV[1] the waiter id, ARGV[2] its queue slot in ms, ARGV[3] the unlock message.
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
