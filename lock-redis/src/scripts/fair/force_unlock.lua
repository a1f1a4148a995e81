-- Force-unlock a fair lock: remember its holds as ended, drop dead heads of the queue, delete the
-- hash and wake the head. Answers 1 if it was held, else 0.
-- KEYS[1] the lock's hash, KEYS[2] the queue, KEYS[3] the time-outs, KEYS[4] the waiters'
--   channel prefix (':<waiter id>' appended), KEYS[5] the grant offers, KEYS[6] the
--   force-unlocked holds of that name.
-- ARGV[1] the unlock message, ARGV[2] how long an ended hold is remembered, in ms.
local kind = kind_of(KEYS[1], KEYS[3])
if kind ~= false and kind ~= 'fair' and kind ~= 'exclusive' then
    return wrong_kind(kind)
end
note_force_unlocked(KEYS[6], KEYS[1], ARGV[2])
-- Drop the waiters at the head of the queue whose time-out has passed, and their grant offers.
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
while true do
    local first = redis.call('lindex', KEYS[2], 0)
    if first == false then break end
    local timeout = redis.call('zscore', KEYS[3], first)
    if timeout ~= false and tonumber(timeout) - 0 > now then break end
    redis.call('zrem', KEYS[3], first)
    redis.call('lpop', KEYS[2])
    redis.call('hdel', KEYS[5], first)
end
if redis.call('del', KEYS[1]) == 1 then
    local head = redis.call('lindex', KEYS[2], '0')
    if head ~= false then
        redis.call('publish', KEYS[4] .. ':' .. head, ARGV[1])
    end
    return 1
end
return 0
