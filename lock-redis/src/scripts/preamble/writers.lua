-- Preamble: a function library prepended to the read-write steps that keep or read the marks of
-- waiting writers; no KEYS or ARGV of its own, and it expects no globals (it reads the time
-- itself). Defines writers_wait(writers): how long (ms) the longest live mark in the sorted set
-- `writers` (waiter id -> epoch ms its mark lives until) lasts, or false if none lives; and
-- mark_writer(writers, waiter, slot): marks `waiter` as waiting for `slot` ms from now. While a
-- mark lives, no new reader is let in, so readers coming and going cannot starve a writer.
local function writers_now()
    local clock = redis.call('time')
    return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
local function writers_wait(writers)
    local now = writers_now()
    redis.call('zremrangebyscore', writers, '-inf', now)
    local last = redis.call('zrange', writers, '-1', '-1', 'WITHSCORES')
    if last[2] == nil then
        return false
    end
    return tonumber(last[2]) - now
end
local function mark_writer(writers, waiter, slot)
    local now = writers_now()
    redis.call('zadd', writers, now + tonumber(slot), waiter)
    local last = redis.call('zrange', writers, '-1', '-1', 'WITHSCORES')
    redis.call('pexpireat', writers, tonumber(last[2]))
end
