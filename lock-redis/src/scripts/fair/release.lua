-- Release a fair hold whole, with the unlock latch: the lock goes to the head's grant offer if it
-- made one (the new head is told when that grant runs out), else the first two waiters are
-- woken. Answers 1, nil (not held) or what the latch
-- kept from an earlier attempt.
-- KEYS[1] the lock's hash, KEYS[2] the queue, KEYS[3] the time-outs, KEYS[4] the waiters'
--   channel prefix (':<waiter id>' appended), KEYS[5] the grant offers, KEYS[6] this request's
--   unlock latch.
-- ARGV[1] the unlock message, ARGV[2] the hold id, ARGV[3] the latch's lifetime in ms.
local done = redis.call('get', KEYS[6])
if done ~= false then
    return tonumber(done)
end
-- A hold's id is its own: a key that is not a hash (the name used as another kind) has none.
if redis.pcall('hexists', KEYS[1], ARGV[2]) ~= 1 then
    return nil
end
local unused = math.max(redis.call('pttl', KEYS[1]), 0)
redis.call('del', KEYS[1])
redis.call('set', KEYS[6], '1', 'px', ARGV[3])
-- Drop the waiters at the head of the queue whose time-out has passed, and their grant offers.
-- A head is judged by its time-out as it will be once moved back by the unused lease.
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
while true do
    local first = redis.call('lindex', KEYS[2], 0)
    if first == false then break end
    local timeout = redis.call('zscore', KEYS[3], first)
    if timeout ~= false and tonumber(timeout) - unused > now then break end
    redis.call('zrem', KEYS[3], first)
    redis.call('lpop', KEYS[2])
    redis.call('hdel', KEYS[5], first)
end
local head = redis.call('lindex', KEYS[2], '0')
local offer = false
if head ~= false then
    offer = redis.call('hget', KEYS[5], head)
end
local lease = 0
local shift = -unused
local holder = false
if offer ~= false then
    local colon = string.find(offer, ':', 1, true)
    lease = tonumber(string.sub(offer, 1, colon - 1))
    offer = string.sub(offer, colon + 1)
    colon = string.find(offer, ':', 1, true)
    holder = string.sub(offer, colon + 1)
    offer = string.sub(offer, 1, colon - 1)
    local mine = redis.call('zscore', KEYS[3], head)
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], head)
    redis.call('hdel', KEYS[5], head)
    if mine ~= false then
        -- Back by the unused lease, then forward by what re-anchors the head's moved
        -- time-out at the grant lease's end: the two shifts sum to this.
        shift = now + lease - tonumber(mine)
    end
end
if shift ~= 0 then
    local waiting = redis.call('zrange', KEYS[3], '0', '-1')
    for i = 1, #waiting do
        redis.call('zincrby', KEYS[3], shift, waiting[i])
    end
end
if offer ~= false then
    redis.call('hset', KEYS[1], holder, '1', 'mode', 'fair')
    redis.call('pexpire', KEYS[1], lease)
    redis.call('publish', KEYS[4] .. ':' .. head, 'grant:' .. offer)
    -- Should the granted waiter be dead, the lock is the new head's once the short grant lease
    -- runs out. A dlock waiter (one that offered to take a grant) is told when, and its client
    -- wakes it then; another (a Redisson client's) re-reads its wait now.
    local next = redis.call('lindex', KEYS[2], '0')
    if next ~= false then
        local message = ARGV[1]
        if redis.call('hexists', KEYS[5], next) == 1 then
            message = 'remind:' .. lease
        end
        redis.call('publish', KEYS[4] .. ':' .. next, message)
    end
    return 1
end
local first_two = redis.call('lrange', KEYS[2], '0', '1')
for i = 1, #first_two do
    redis.call('publish', KEYS[4] .. ':' .. first_two[i], ARGV[1])
end
return 1
