-- Preamble: a function library prepended to the steps that keep or read the marks of waiters in
-- turn (the plain lock's, and a read-write lock's writers'); no KEYS or ARGV of its own, and it expects no globals (it reads the time
-- itself). A name's waiters are two sorted sets: `order`, waiter id -> its number in the order
-- of first refusals, and `marks`, waiter id -> epoch ms its mark lives until. A free lock goes
-- to the first live waiter alone. Defines turns_now(): the server's time in ms;
-- turn_of_other(order, marks, waiter): how long (ms) the first live mark has left if it is
-- another waiter's, else false (marks that ran out are dropped); mark_turn(order, marks, waiter,
-- slot): marks `waiter` for `slot` ms from now, in its place if it has one, else after the
-- others; refuse_marked(order, marks, waiter, slot, ttl): marks `waiter` as mark_turn does and
-- answers its refusal, {ttl, -2, how many live marks come before its own}; and
-- unmark_turn(order, marks, waiter).
local function turns_now()
    local clock = redis.call('time')
    return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
local function turn_of_other(order, marks, waiter)
    local now = turns_now()
    local gone = redis.call('zrangebyscore', marks, '-inf', now)
    for i = 1, #gone do
        redis.call('zrem', order, gone[i])
    end
    if #gone > 0 then
        redis.call('zremrangebyscore', marks, '-inf', now)
    end
    while true do
        local first = redis.call('zrange', order, 0, 0)[1]
        if first == nil or first == waiter then
            return false
        end
        local until_ms = redis.call('zscore', marks, first)
        if until_ms ~= false then
            return math.max(1, tonumber(until_ms) - now)
        end
        -- A place with no mark (its mark set expired whole): not a live waiter.
        redis.call('zrem', order, first)
    end
end
local function mark_turn(order, marks, waiter, slot)
    if redis.call('zscore', order, waiter) == false then
        local last = redis.call('zrange', order, -1, -1, 'WITHSCORES')
        redis.call('zadd', order, tonumber(last[2] or '0') + 1, waiter)
    end
    redis.call('zadd', marks, turns_now() + tonumber(slot), waiter)
    local longest = redis.call('zrange', marks, -1, -1, 'WITHSCORES')
    redis.call('pexpireat', marks, tonumber(longest[2]))
    redis.call('pexpireat', order, tonumber(longest[2]))
end
local function unmark_turn(order, marks, waiter)
    redis.call('zrem', order, waiter)
    redis.call('zrem', marks, waiter)
end
local function refuse_marked(order, marks, waiter, slot, ttl)
    mark_turn(order, marks, waiter, slot)
    local place = redis.call('zscore', order, waiter)
    local ahead = 0
    if place ~= false then
        local now = turns_now()
        local before = redis.call('zrangebyscore', order, '-inf', '(' .. place)
        for i = 1, #before do
            local until_ms = redis.call('zscore', marks, before[i])
            if until_ms ~= false and tonumber(until_ms) > now then
                ahead = ahead + 1
            end
        end
    end
    return {ttl, -2, ahead}
end
